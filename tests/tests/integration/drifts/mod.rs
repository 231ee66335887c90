//! Drifts of the environment under a streaming relay that the catalogue in
//! docs/operators.md ("The catalogue of drifts") once listed as not yet run (issue 55,
//! item 8): Kafka's `min.insync.replicas` raised past what a topic can meet, PostgreSQL's
//! `wal_level` lowered across a restart, partitions added to an event topic, the relay's
//! WRITE ACL removed. Each test proves what the system does (holds, refuses, or pages) and
//! that no committed event is lost: every outbox row reaches Kafka in the end, counted by a
//! consumer.

mod acl;
mod min_insync;
mod partitions;
mod wal_level;

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use ra_ledger_cdc::config::RelayConfig;
use ra_ledger_tests::TestTopics;
use ra_ledger_tests::relay::{Collector, Tally};
use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;

/// Waits up to 120 s until `collector` received every one of `expected`, then counts what
/// came under `name` ([`Tally::of`]): each test's end, whose `lost` must be 0.
pub(crate) async fn tally_after_all(
    collector: &mut Collector,
    expected: &HashSet<String>,
    name: &str,
) -> Tally {
    collector
        .until_all(Duration::from_secs(120), expected)
        .await;
    Tally::of(name, expected, &collector.received)
}

/// An admin client of `topics`' broker.
pub(crate) fn admin(topics: &TestTopics) -> anyhow::Result<AdminClient<DefaultClientContext>> {
    Ok(topics.client_config().create()?)
}

/// Sets `topic`'s configuration to `settings` (AlterConfigs: what it does not name goes
/// back to the broker's default).
pub(crate) async fn set_topic_config(
    topics: &TestTopics,
    topic: &str,
    settings: &[(&str, &str)],
) -> anyhow::Result<()> {
    let change = settings.iter().fold(
        AlterConfig::new(ResourceSpecifier::Topic(topic)),
        |change, (key, value)| change.set(key, value),
    );
    for outcome in admin(topics)?
        .alter_configs(&[change], &AdminOptions::new())
        .await?
    {
        if let Err((resource, code)) = outcome {
            anyhow::bail!("altering {resource:?} to {settings:?}: {code}");
        }
    }
    Ok(())
}

/// The value of `topic`'s configuration `name`, as the broker describes it.
pub(crate) async fn topic_config(
    topics: &TestTopics,
    topic: &str,
    name: &str,
) -> anyhow::Result<Option<String>> {
    let described = admin(topics)?
        .describe_configs(&[ResourceSpecifier::Topic(topic)], &AdminOptions::new())
        .await?;
    let resource = described
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("no description of {topic}"))?
        .map_err(|code| anyhow::anyhow!("describing {topic}: {code}"))?;
    Ok(resource.get(name).and_then(|entry| entry.value.clone()))
}

/// The ids of `ids` whose rows are of `aggregate_type`.
pub(crate) async fn ids_of_type<'a>(
    ids: &'a [String],
    client: &tokio_postgres::Client,
    aggregate_type: &str,
) -> anyhow::Result<HashSet<&'a str>> {
    let rows = client
        .query(
            "SELECT event_id::text FROM outbox WHERE event_id::text = ANY($1) AND aggregate_type = $2",
            &[&ids, &aggregate_type],
        )
        .await?;
    let of_type: HashSet<String> = rows.iter().map(|row| row.get(0)).collect();
    Ok(ids
        .iter()
        .filter(|id| of_type.contains(*id))
        .map(String::as_str)
        .collect())
}

/// The relay as a process of its own, its log (stderr, at `warn` and above) in a file and
/// its `/metrics` on a port: for the tests that read what it logs.
pub(crate) struct LoggedRelay {
    child: std::process::Child,
    log: std::path::PathBuf,
    metrics: String,
}

impl LoggedRelay {
    /// Starts `config`'s relay, its settings (Kafka's and secret files included) in a
    /// file under `dir`.
    pub(crate) fn start(config: &RelayConfig, dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut settings = format!(
            "heartbeat_interval_ms = {}\nstatus_interval_ms = {}\nreconnect_backoff_max_ms = {}\n\
             health_check_interval_ms = {}\nshutdown_grace_ms = {}\n[kafka]\n",
            config.heartbeat_interval_ms,
            config.status_interval_ms,
            config.reconnect_backoff_max_ms,
            config.health_check_interval_ms,
            config.shutdown_grace_ms,
        );
        for (key, value) in &config.kafka {
            settings.push_str(&format!("{key:?} = {value:?}\n"));
        }
        settings.push_str("[kafka_secret_files]\n");
        for (key, path) in &config.kafka_secret_files {
            settings.push_str(&format!("{key:?} = {:?}\n", path.display().to_string()));
        }
        let file = dir.join("relay.toml");
        std::fs::write(&file, settings)?;
        let address = format!("127.0.0.1:{}", ra_ledger_tests::process::free_port()?);
        let log = dir.join("relay.log");
        let file = file.display().to_string();
        let child = crate::relay_faults::relay_command(
            config,
            &[
                ("LEDGER_RELAY_CONFIG", file.as_str()),
                ("LEDGER_METRICS_LISTEN", address.as_str()),
            ],
        )
        .stderr(std::fs::File::create(&log)?)
        .spawn()?;
        Ok(Self {
            child,
            log,
            metrics: format!("http://{address}/metrics"),
        })
    }

    /// What it logged so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until its log holds `text`; fails with the log after `limit`.
    pub(crate) async fn until_logged(&self, text: &str, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        while !self.log().contains(text) {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the relay did not log {text:?} within {limit:?}; its log ({}):\n{}",
                self.log.display(),
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    /// `/metrics` now; empty while it does not answer.
    pub(crate) async fn scrape(&self) -> String {
        match reqwest::get(&self.metrics).await {
            Ok(answer) => answer.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Whether it is still running.
    pub(crate) fn running(&mut self) -> anyhow::Result<bool> {
        Ok(self.child.try_wait()?.is_none())
    }

    /// Stops it (SIGTERM) and waits for it.
    pub(crate) fn stop(mut self) -> anyhow::Result<()> {
        ra_ledger_tests::process::send_signal(self.child.id(), "TERM")?;
        let status = self.child.wait()?;
        anyhow::ensure!(
            status.success(),
            "the relay exited with {status}:\n{}",
            self.log()
        );
        Ok(())
    }
}

impl Drop for LoggedRelay {
    fn drop(&mut self) {
        // A failed test's relay stops with it; after stop() this finds it gone.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
