//! The relay as its own process, for tests that kill it with SIGKILL or SIGTERM. It runs
//! exactly what `ledger relay` runs, configured from the environment.

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
    let config = ra_ledger_cdc::config::RelayConfig::load(
        std::env::var("LEDGER_RELAY_CONFIG").ok().as_deref(),
    )?;
    ra_ledger_cdc::relay::run_process(config).await?;
    Ok(())
}
