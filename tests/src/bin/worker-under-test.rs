//! The reassignment worker as its own process, for tests that kill it with SIGKILL. It runs
//! exactly what `ledger worker` runs, configured from the environment.

use ra_ledger::config::WorkerConfig;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // RUST_LOG (the tests set `warn`), so a passing run's output stays readable.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let mut config = WorkerConfig::load(None)?;
    config.retry_backoff_max_ms = 200;
    config.metrics_listen = None;
    config.resolve_secrets()?;
    config.validate()?;
    ra_ledger::worker::run_process(config).await?;
    Ok(())
}
