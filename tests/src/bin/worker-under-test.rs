//! The reassignment worker as its own process, for tests that kill it with SIGKILL. It runs
//! exactly what `ledger worker` runs, configured from the environment.

use ra_ledger::worker::WorkerConfig;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let var = |name: &str| std::env::var(name).map_err(|_| anyhow::anyhow!("{name} is not set"));
    let config = WorkerConfig {
        database_url: var("LEDGER_DATABASE_URL")?,
        brokers: var("LEDGER_KAFKA_BROKERS")?,
        topic: var("LEDGER_REASSIGNMENT_TOPIC")?,
        group_id: var("LEDGER_WORKER_GROUP")?,
        retry_backoff_max: std::time::Duration::from_millis(200),
        kafka: ra_ledger_tests::worker::quick_group_settings(),
        ..WorkerConfig::default()
    };
    ra_ledger::worker::run_process(config).await?;
    Ok(())
}
