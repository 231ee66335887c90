//! The `ledger` binary, run as an operator runs it: for what only the process shows, its
//! exit status and its log. `deploy/test` builds it and names it in `LEDGER_BIN` (cargo
//! builds no other package's binaries for a test), and `ledger-bench` beside it in
//! `LEDGER_BENCH_BIN`.

use std::process::Stdio;
use std::time::Duration;

/// The longest a command may run before the test gives up on it.
const LONGEST: Duration = Duration::from_secs(120);

/// The `ledger` binary's path, from `LEDGER_BIN`.
pub fn binary() -> anyhow::Result<String> {
    std::env::var("LEDGER_BIN").map_err(|_| {
        anyhow::anyhow!(
            "LEDGER_BIN is not set: run this test through deploy/test, which builds target/debug/ledger"
        )
    })
}

/// The `ledger-bench` binary's path, from `LEDGER_BENCH_BIN`.
pub fn bench_binary() -> anyhow::Result<String> {
    std::env::var("LEDGER_BENCH_BIN").map_err(|_| {
        anyhow::anyhow!(
            "LEDGER_BENCH_BIN is not set: run this test through deploy/test, which builds target/debug/ledger-bench"
        )
    })
}

/// Runs `ledger-bench` against the run's own servers (`--database-url` and the command's
/// `--brokers` filled in) with `command` and its `arguments`, for at most `timeout`: what it
/// printed on stdout, echoed for the test's output. Fails unless it exits 0, with both
/// streams.
pub async fn bench(
    command: &str,
    arguments: &[&str],
    timeout: std::time::Duration,
) -> anyhow::Result<String> {
    let stack = crate::stack::stack();
    let output = tokio::process::Command::new(bench_binary()?)
        .args(["--database-url", &stack.admin_url, command])
        .args(arguments)
        .args(["--brokers", &stack.kafka_brokers])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(timeout, output)
        .await
        .map_err(|_| anyhow::anyhow!("ledger-bench {command} still ran after {timeout:?}"))??;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    println!("{stdout}");
    anyhow::ensure!(
        output.status.success(),
        "ledger-bench {command} exited {:?}:\n{stdout}{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(stdout)
}

/// What `binary --help` prints on stdout; fails unless it exits 0.
pub async fn help(binary: &str) -> anyhow::Result<String> {
    let output = tokio::time::timeout(
        LONGEST,
        tokio::process::Command::new(binary)
            .arg("--help")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| anyhow::anyhow!("{binary} --help still ran after {LONGEST:?}"))??;
    anyhow::ensure!(
        output.status.success(),
        "{binary} --help exited {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Runs `ledger` with `arguments` and `env` (over the test's environment, without its
/// `LEDGER_RELAY_CONFIG` and `RUST_LOG`: set them in `env`) until it exits; its exit code
/// and what it wrote to stderr, its log. Killed after [`LONGEST`].
pub async fn ledger(
    arguments: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<(Option<i32>, String)> {
    let child = tokio::process::Command::new(binary()?)
        .args(arguments)
        .env_remove("LEDGER_RELAY_CONFIG")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let output = tokio::time::timeout(LONGEST, child.wait_with_output())
        .await
        .map_err(|_| anyhow::anyhow!("ledger {arguments:?} still ran after {LONGEST:?}"))??;
    Ok((
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

/// Where the `ledger` command's stdout goes in [`ledger_printing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stdout {
    /// Read whole, and returned.
    Read,
    /// A pipe whose reader is gone before the command writes (`ledger … | head` once `head`
    /// exited).
    Closed,
}

/// What a `ledger` command did: its exit code, stdout (empty when [`Stdout::Closed`]) and
/// stderr.
#[derive(Debug)]
pub struct Printed {
    /// The exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    /// What it wrote to stdout.
    pub stdout: String,
    /// What it wrote to stderr, its log and its error.
    pub stderr: String,
}

/// Runs `ledger` as [`ledger`] does, with its stdout read or closed: for what it prints.
pub async fn ledger_printing(
    arguments: &[&str],
    env: &[(&str, &str)],
    stdout: Stdout,
) -> anyhow::Result<Printed> {
    let mut child = tokio::process::Command::new(binary()?)
        .args(arguments)
        .env_remove("LEDGER_RELAY_CONFIG")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    if stdout == Stdout::Closed {
        drop(child.stdout.take());
    }
    let output = tokio::time::timeout(LONGEST, child.wait_with_output())
        .await
        .map_err(|_| anyhow::anyhow!("ledger {arguments:?} still ran after {LONGEST:?}"))??;
    Ok(Printed {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}
