//! The `ledger` command: migrations, the ledger service, the CDC relay, the reassignment
//! worker, verification, projection rebuilds, audit queries, the demo and the benchmarks.
//! Each subcommand lives in [`cli`].

mod cli;

use std::io::IsTerminal;

/// mimalloc rather than glibc's malloc: the relay's per-message allocations spent about 30%
/// of its CPU in glibc's allocator (`perf` during `ledger bench relay`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    cli::run().await
}
