//! Running the reassignment worker in tests: in this process, or as a process to kill.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ra_ledger::metrics::WorkerMetrics;
use ra_ledger::reassign::RunStatus;
use ra_ledger::worker::{WorkerConfig, WorkerError};
use ra_ledger_cdc::infra::kafka::BOOTSTRAP_SERVERS;

use crate::{Background, TestDatabase, TestTopics};

/// A worker configuration for one test: its topics, its own consumer group, quick retries.
pub fn test_config(database: &TestDatabase, topics: &TestTopics) -> WorkerConfig {
    WorkerConfig {
        database_url: database.url.as_str().into(),
        topic: format!("{}.outbox.event.reassignment", topics.prefix),
        group_id: format!("worker-{}", topics.prefix),
        retry_backoff_max_ms: 200,
        kafka: quick_group_settings()
            .into_iter()
            .chain(topics.client.clone())
            .chain([(BOOTSTRAP_SERVERS.to_owned(), topics.brokers.clone())])
            .collect(),
        ..WorkerConfig::default()
    }
}

/// A killed consumer leaves the group after seconds, not the default 45 s.
pub fn quick_group_settings() -> std::collections::BTreeMap<String, String> {
    std::collections::BTreeMap::from([
        ("session.timeout.ms".into(), "6000".into()),
        ("heartbeat.interval.ms".into(), "500".into()),
    ])
}

/// A worker running in this process.
pub type RunningWorker = Background<WorkerMetrics, WorkerError>;

impl RunningWorker {
    /// Starts the worker.
    pub fn start(config: WorkerConfig) -> Self {
        Self::spawn(|metrics, shutdown| ra_ledger::worker::run(config, metrics, shutdown))
    }
}

/// Starts the worker as a process (it dies with the test's thread if the test fails);
/// `binary` is the test's `env!("CARGO_BIN_EXE_worker-under-test")`.
/// Its consumer runs with the worker's own group settings, as `ledger worker` does.
pub fn spawn(binary: &str, config: &WorkerConfig) -> anyhow::Result<Child> {
    let mut command = Command::new("setpriv");
    command
        .args(["--pdeathsig", "SIGKILL", "--", binary])
        .env("LEDGER_DATABASE_URL", &config.database_url)
        .env("LEDGER_KAFKA_BROKERS", &config.kafka[BOOTSTRAP_SERVERS])
        .env("LEDGER_REASSIGNMENT_TOPIC", &config.topic)
        .env("LEDGER_WORKER_GROUP", &config.group_id)
        .env(
            "LEDGER_WORKER_STALL_AFTER_MS",
            config.stall_after_ms.to_string(),
        )
        .env(
            "LEDGER_WORKER_CONTINUE_CHAIN",
            config.continue_chain.to_string(),
        )
        .env(
            "LEDGER_WORKER_CONTINUE_CHAIN_MS",
            config.continue_chain_ms.to_string(),
        )
        .env(
            "LEDGER_WORKER_INSTANCE_ID",
            config.instance_id.as_deref().unwrap_or_default(),
        )
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    Ok(command.spawn()?)
}

/// Polls the run until `done(status)` holds or `timeout` passes; returns the last status.
pub async fn wait_for_run(
    database: &TestDatabase,
    run_id: uuid::Uuid,
    timeout: Duration,
    done: impl Fn(&RunStatus) -> bool,
) -> anyhow::Result<RunStatus> {
    let pool = ra_ledger::db::pool(&database.url, "wait-for-run", 1)?;
    let client = pool.get().await?;
    let deadline = Instant::now() + timeout;
    loop {
        let status = ra_ledger::reassign::status(&client, run_id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("run {run_id} not found"))?;
        if done(&status) {
            return Ok(status);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "run {run_id} did not get there within {timeout:?}: {status:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
