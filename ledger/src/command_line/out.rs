//! What the command line prints on stdout, written as Unix tools write it.
//!
//! Rust ignores SIGPIPE, so `println!` to a reader that went away (`ledger audit history …
//! | head`) panics with a backtrace. Every subcommand of `ledger` and `ledger-bench` prints
//! through [`outln!`](crate::outln) and [`out!`](crate::out) instead: a broken pipe ends the command quietly with status 141, the status a
//! shell reports for `cat` killed by SIGPIPE (so `set -o pipefail` scripts see what they
//! would see of any other tool). Any other write error is said in a sentence, status 1.

use std::fmt;
use std::io::{self, Write};

/// The exit status of a command whose reader went away: 128 + SIGPIPE (13), as a shell
/// reports a tool the signal killed.
pub const EXIT_BROKEN_PIPE: i32 = 141;

/// `println!`, ending quietly on a broken pipe (see [the module doc](crate::command_line::out)).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::command_line::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::command_line::out::line(format_args!($($arg)*))
    };
}

/// `print!`, ending quietly on a broken pipe (see [the module doc](crate::command_line::out)).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::command_line::out::text(format_args!($($arg)*))
    };
}

/// Writes `args` and a newline to stdout.
pub fn line(args: fmt::Arguments<'_>) {
    let mut stdout = io::stdout().lock();
    let written = stdout
        .write_fmt(args)
        .and_then(|()| stdout.write_all(b"\n"));
    if let Err(error) = written {
        failed(&error);
    }
}

/// Writes `args` to stdout and flushes it (a progress line without its newline).
pub fn text(args: fmt::Arguments<'_>) {
    let mut stdout = io::stdout().lock();
    let written = stdout.write_fmt(args).and_then(|()| stdout.flush());
    if let Err(error) = written {
        failed(&error);
    }
}

/// Ends the process after a failed write to stdout: quietly on a broken pipe.
fn failed(error: &io::Error) -> ! {
    match exit_after(error) {
        Some(status) => std::process::exit(status),
        None => {
            eprintln!("Error: cannot write to stdout: {error}");
            std::process::exit(1)
        }
    }
}

/// The quiet exit status for a write error, `None` when it must be said. Pure.
fn exit_after(error: &io::Error) -> Option<i32> {
    (error.kind() == io::ErrorKind::BrokenPipe).then_some(EXIT_BROKEN_PIPE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_pipe_ends_quietly_and_other_errors_are_said() {
        let gone = io::Error::from(io::ErrorKind::BrokenPipe);
        assert_eq!(exit_after(&gone), Some(141));
        let full = io::Error::from(io::ErrorKind::StorageFull);
        assert_eq!(exit_after(&full), None);
    }
}
