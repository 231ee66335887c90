//! What the two command lines, `ledger` and `ledger-bench`, share: their stdout, which
//! ends quietly when its reader went away ([`out`], with the [`outln!`](crate::outln) and
//! [`out!`](crate::out) macros); a reassignment run's progress drawn live ([`progress`]);
//! the flags both take, parsed one way; and their log on stderr ([`init_logging`]). The
//! library's other modules never print; these do, for the binaries alone.

pub mod out;
pub mod progress;

use std::io::IsTerminal;

use ra_ledger_cdc::config::DeliveryMode;

/// The log on stderr, coloured only on a terminal, at `RUST_LOG`'s levels (`info` unset).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
}

/// A `--delivery` flag: `exactly_once` or `at_least_once`.
pub fn parse_delivery(text: &str) -> Result<DeliveryMode, String> {
    DeliveryMode::parse(text).ok_or_else(|| "expected exactly_once or at_least_once".to_owned())
}

/// A `--pause-ratio` flag of an online rebuild: a number from 0 to 100.
pub fn parse_pause_ratio(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|ratio| (0.0..=100.0).contains(ratio))
        .ok_or_else(|| format!("{text:?} is not a number from 0 to 100"))
}
