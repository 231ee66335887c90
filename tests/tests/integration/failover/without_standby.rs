//! After a promotion that leaves no standby: the pair's primary killed under load, its
//! standby promoted, and none built yet. The promoted server keeps the gate naming the old
//! standby's physical slot, which it lacks, so PostgreSQL would hold a failover slot for
//! ever. One scenario, in `without_standby`'s two shapes:
//!
//! - `stream`: the relay streams what the new primary commits, its slot's failover off,
//!   pages (`ra_relay_streaming_without_standby`) and logs what to build;
//! - `hold`: it publishes nothing, stays up (no exit 78), reports the hold on the gauges
//!   `RaStandbyGateHolding` reads and logs the command that ends it; the gate emptied by an
//!   operator (the PostgreSQL hint's "amend parameter") is a hold too, with its own fix.
//!
//! Either way, once the standby is built with the slot the gate names, the relay goes back
//! behind the gate by itself, its slot a failover slot again with a ready copy on the new
//! standby, and in the end nothing is lost and nothing is on Kafka that the new primary
//! lacks. The relay runs as its own process, as `ledger relay` does: its exit, its log and
//! its `/metrics` are what an operator has.
//!
//! The same rule applies when the last standby goes while the primary lives: retired, its
//! physical slot dropped, the relay leaves the gate it was held behind (`stream`).

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use ra_ledger_cdc::config::{DeliveryMode, RelayConfig, WithoutStandby};
use ra_ledger_cdc::metrics::{
    STANDBY_GATE_MISSING_SLOTS, STANDBY_GATE_WAITING, STREAMING, STREAMING_WITHOUT_STANDBY,
};
use ra_ledger_tests::relay::{Collector, RunningRelay, insert_backlog};
use ra_ledger_tests::replicated::ReplicatedPostgres;
use ra_ledger_tests::{TestTopics, metric};

use super::{READY_TIMEOUT, Writer, check, failover_config, outbox_ids, wait_for_metric};
use crate::relay_faults::relay_command;

/// The relay as its own process: its settings in a TOML file and its log (at `warn`) in a
/// folder of the run's, `/metrics` on a free port. Killed when dropped.
struct RelayProcess {
    child: Child,
    log: PathBuf,
    metrics: String,
}

impl RelayProcess {
    fn start(config: &RelayConfig) -> anyhow::Result<Self> {
        let dir = ra_ledger_tests::stack::run_dir().join(format!(
            "without-standby-{}",
            ra_ledger_tests::random_suffix()
        ));
        std::fs::create_dir_all(&dir)?;
        let settings = dir.join("relay.toml");
        std::fs::write(
            &settings,
            format!(
                "slot_failover = true\nwithout_standby = \"{}\"\nhealth_check_interval_ms = {}\n\
                 heartbeat_interval_ms = {}\nstatus_interval_ms = {}\nreconnect_backoff_max_ms = {}\n",
                config.without_standby.as_str(),
                config.health_check_interval_ms,
                config.heartbeat_interval_ms,
                config.status_interval_ms,
                config.reconnect_backoff_max_ms,
            ),
        )?;
        let address = format!("127.0.0.1:{}", ra_ledger_tests::process::free_port()?);
        let log = dir.join("relay.log");
        let settings = settings.display().to_string();
        let child = relay_command(
            config,
            &[
                ("LEDGER_RELAY_CONFIG", settings.as_str()),
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

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log holds `text`.
    async fn until_logged(&self, text: &str, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while !self.log().contains(text) {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the relay did not log {text:?} within {timeout:?}; its log ({}):\n{}",
                self.log.display(),
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// `/metrics` now; empty while it does not answer.
    async fn scrape(&self) -> String {
        match reqwest::get(&self.metrics).await {
            Ok(answer) => answer.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Polls metric `name` until it reads `value` or `timeout` passes.
    async fn until_metric(&self, name: &str, value: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if metric(&self.scrape().await, name) == value {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    fn running(&mut self) -> anyhow::Result<bool> {
        Ok(self.child.try_wait()?.is_none())
    }

    /// SIGTERM, as systemd stops it; its exit status.
    fn stop(&mut self) -> anyhow::Result<ExitStatus> {
        ra_ledger_tests::process::send_signal(self.child.id(), "TERM")?;
        Ok(self.child.wait()?)
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The scenario of the module doc, in the shape `choice` gives it.
async fn promoted_without_a_standby(choice: WithoutStandby) -> anyhow::Result<()> {
    let mut pair = ReplicatedPostgres::start().await?;
    let database = pair.create_database().await?;
    let mut topics = TestTopics::new();
    let config = RelayConfig {
        without_standby: choice,
        ..failover_config(&database, &mut topics, DeliveryMode::AtLeastOnce).await?
    };
    let standby_slot = pair.options().physical_slot.clone();
    let mut collector = Collector::new(&topics)?;
    let mut relay = RelayProcess::start(&config)?;
    let writer = Writer::start(database.url.clone());
    pair.wait_failover_ready(&config.slot, READY_TIMEOUT)
        .await?;
    pair.kill_primary()?;
    pair.promote().await?;
    assert!(pair.standby().is_none());
    // Committed on the new primary while it has no standby.
    let after: HashSet<String> = insert_backlog(&database.connect().await?, 10, 2, 32)
        .await?
        .into_iter()
        .collect();
    match choice {
        WithoutStandby::Stream => {
            let paged = relay
                .until_metric(STREAMING_WITHOUT_STANDBY.name, 1, Duration::from_secs(30))
                .await;
            let arrived = collector.until_all(Duration::from_secs(60), &after).await;
            let failover = pair.primary_slot_failover(&config.slot).await?;
            // The gauges the gate's alert reads: the setting names a missing slot, and
            // nothing waits on it.
            tokio::time::sleep(Duration::from_millis(3 * config.health_check_interval_ms)).await;
            let metrics = relay.scrape().await;
            assert!(paged, "no page for streaming without the gate: {metrics}");
            assert!(
                arrived,
                "what the new primary committed did not reach Kafka"
            );
            assert_eq!(failover, Some(false), "the slot's failover is turned off");
            assert_eq!(metric(&metrics, STREAMING.name), 1, "{metrics}");
            assert_eq!(metric(&metrics, STANDBY_GATE_WAITING.name), 0, "{metrics}");
            assert_eq!(
                metric(&metrics, STANDBY_GATE_MISSING_SLOTS.name),
                1,
                "{metrics}"
            );
            let timeout = Duration::from_secs(5);
            relay
                .until_logged("streams WITHOUT the standby gate", timeout)
                .await?;
            relay
                .until_logged(&format!("pg_basebackup -C -S {standby_slot} -R"), timeout)
                .await?;

            pair.rebuild_standby().await?;
            relay
                .until_logged(
                    &format!("the primary has a standby's physical slot again ({standby_slot})"),
                    Duration::from_secs(20),
                )
                .await?;
            assert!(
                relay
                    .until_metric(STREAMING_WITHOUT_STANDBY.name, 0, Duration::from_secs(20))
                    .await,
                "the page did not clear once the standby was built"
            );
        }
        WithoutStandby::Hold => {
            let held = relay
                .until_metric(STANDBY_GATE_WAITING.name, 1, Duration::from_secs(30))
                .await;
            collector.until(Duration::from_secs(5), |_| false).await;
            let metrics = relay.scrape().await;
            assert!(held, "the hold is not on the gauge: {metrics}");
            assert_eq!(
                metric(&metrics, STANDBY_GATE_MISSING_SLOTS.name),
                1,
                "{metrics}"
            );
            assert_eq!(metric(&metrics, STREAMING.name), 0, "{metrics}");
            assert_eq!(
                metric(&metrics, STREAMING_WITHOUT_STANDBY.name),
                0,
                "{metrics}"
            );
            assert_no_event_of(&collector, &after, "the hold");
            assert!(relay.running()?, "a hold, not a refusal: {}", relay.log());
            assert_eq!(
                pair.primary_slot_failover(&config.slot).await?,
                Some(true),
                "a held relay leaves its slot as it is"
            );
            let timeout = Duration::from_secs(10);
            relay
                .until_logged("this primary has no standby", timeout)
                .await?;
            relay
                .until_logged(&format!("pg_basebackup -C -S {standby_slot} -R"), timeout)
                .await?;
            relay
                .until_logged("set without_standby = \"stream\"", timeout)
                .await?;

            // The operator empties the gate, as PostgreSQL's own hint suggests: still a
            // hold, not the refusal it was.
            pair.set_synchronized_standby_slots("").await?;
            relay
                .until_logged(
                    "synchronized_standby_slots is empty. Build a standby with a physical slot",
                    timeout,
                )
                .await?;
            assert!(relay.running()?, "a hold, not a refusal: {}", relay.log());

            // A standby is built while the gate is empty: the relay holds until the gate
            // names it, and says so.
            pair.rebuild_standby().await?;
            relay
                .until_logged(
                    &format!("ALTER SYSTEM SET synchronized_standby_slots = '{standby_slot}'"),
                    Duration::from_secs(20),
                )
                .await?;
            collector.until(Duration::from_secs(2), |_| false).await;
            assert_no_event_of(&collector, &after, "the hold with a standby and no gate");
            assert!(relay.running()?, "a hold, not a refusal: {}", relay.log());
            pair.set_synchronized_standby_slots(&standby_slot).await?;
            assert!(
                collector.until_all(Duration::from_secs(60), &after).await,
                "nothing reached Kafka once the standby was built and the gate set"
            );
            assert!(
                relay
                    .until_metric(STANDBY_GATE_WAITING.name, 0, Duration::from_secs(10))
                    .await,
                "the gauge still says held"
            );
        }
    }

    // Back behind the gate: a failover slot again, with a ready copy on the new standby.
    assert_eq!(pair.primary_slot_failover(&config.slot).await?, Some(true));
    pair.wait_failover_ready(&config.slot, READY_TIMEOUT)
        .await?;
    let later: HashSet<String> = insert_backlog(&database.connect().await?, 10, 2, 32)
        .await?
        .into_iter()
        .collect();
    let later_arrived = collector.until_all(Duration::from_secs(60), &later).await;
    let acknowledged = writer.finish().await?;
    let on_primary = outbox_ids(&database).await?;
    let all = collector
        .until_all(Duration::from_secs(120), &on_primary)
        .await;
    collector.until(Duration::from_secs(2), |_| false).await;
    let running = relay.running()?;
    let status = relay.stop()?;
    let findings = check(
        &format!("promoted without a standby, {}", choice.as_str()),
        &on_primary,
        &acknowledged,
        &collector.received,
    );
    assert!(later_arrived, "nothing reached Kafka behind the gate again");
    assert!(all, "{findings:?}");
    assert_eq!(findings.lost, 0, "{findings:?}");
    assert_eq!(findings.phantom, 0, "{findings:?}");
    assert_eq!(findings.order_violations, 0, "{findings:?}");
    assert!(running, "the relay exited by itself: {}", relay.log());
    assert!(status.success(), "SIGTERM: {status}; {}", relay.log());
    Ok(())
}

fn assert_no_event_of(collector: &Collector, ids: &HashSet<String>, during: &str) {
    let leaked: Vec<&str> = collector
        .received
        .iter()
        .map(|message| message.id())
        .filter(|id| ids.contains(*id))
        .collect();
    assert!(leaked.is_empty(), "published during {during}: {leaked:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promoted_without_a_standby_the_relay_streams_and_pages() -> anyhow::Result<()> {
    promoted_without_a_standby(WithoutStandby::Stream).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promoted_without_a_standby_the_relay_holds_and_says_what_to_run() -> anyhow::Result<()> {
    promoted_without_a_standby(WithoutStandby::Hold).await
}

/// The primary lives and its standby is retired: stopped, then its physical slot dropped.
/// While the slot is there, PostgreSQL holds the relay behind the gate (it waits on the
/// inactive slot); once it is dropped, the relay ends the held session by itself and streams
/// without the gate (`stream`, the default), and goes back behind it once a standby is built.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retired_standby_lets_the_relay_leave_the_gate_once_its_slot_is_dropped()
-> anyhow::Result<()> {
    let mut pair = ReplicatedPostgres::start().await?;
    let database = pair.create_database().await?;
    let mut topics = TestTopics::new();
    let config = failover_config(&database, &mut topics, DeliveryMode::ExactlyOnce).await?;
    let mut collector = Collector::new(&topics)?;
    let relay = RunningRelay::start(config.clone());
    let client = database.connect().await?;
    let before: HashSet<String> = insert_backlog(&client, 10, 2, 32)
        .await?
        .into_iter()
        .collect();
    assert!(collector.until_all(Duration::from_secs(60), &before).await);
    pair.wait_failover_ready(&config.slot, READY_TIMEOUT)
        .await?;

    pair.stop_standby().await?;
    let held: HashSet<String> = insert_backlog(&client, 10, 2, 32)
        .await?
        .into_iter()
        .collect();
    let waiting = wait_for_metric(
        &relay,
        STANDBY_GATE_WAITING.name,
        1,
        Duration::from_secs(20),
    )
    .await;
    collector.until(Duration::from_secs(3), |_| false).await;
    assert!(waiting, "the relay did not report the gate's wait");
    assert_no_event_of(&collector, &held, "the wait on the stopped standby");

    pair.drop_standby_slot().await?;
    let dropped = Instant::now();
    let without = wait_for_metric(
        &relay,
        STREAMING_WITHOUT_STANDBY.name,
        1,
        Duration::from_secs(30),
    )
    .await;
    let left = dropped.elapsed();
    let arrived = collector.until_all(Duration::from_secs(60), &held).await;
    println!(
        "a retired standby: without the gate {:.1} s after the slot was dropped, what it held \
         on Kafka after {:.1} s",
        left.as_secs_f64(),
        dropped.elapsed().as_secs_f64()
    );
    let failover = pair.primary_slot_failover(&config.slot).await?;
    assert!(without, "the relay did not leave the gate");
    assert!(arrived, "what the gate held did not reach Kafka");
    assert_eq!(failover, Some(false));

    pair.rebuild_standby().await?;
    let behind = wait_for_metric(
        &relay,
        STREAMING_WITHOUT_STANDBY.name,
        0,
        Duration::from_secs(20),
    )
    .await;
    assert!(behind, "the relay did not go back behind the gate");
    assert_eq!(pair.primary_slot_failover(&config.slot).await?, Some(true));
    pair.wait_failover_ready(&config.slot, READY_TIMEOUT)
        .await?;
    let after: HashSet<String> = insert_backlog(&client, 10, 2, 32)
        .await?
        .into_iter()
        .collect();
    let all: HashSet<String> = before.iter().chain(&held).chain(&after).cloned().collect();
    let arrived = collector.until_all(Duration::from_secs(60), &all).await;
    collector.until(Duration::from_secs(2), |_| false).await;
    relay.stop().await?;
    let on_primary = outbox_ids(&database).await?;
    let acknowledged: Vec<String> = all.into_iter().collect();
    let findings = check(
        "a retired standby",
        &on_primary,
        &acknowledged,
        &collector.received,
    );
    assert!(arrived, "{findings:?}");
    assert_eq!(findings.lost, 0, "{findings:?}");
    assert_eq!(findings.phantom, 0, "{findings:?}");
    assert_eq!(findings.duplicates, 0, "read_committed: {findings:?}");
    assert_eq!(findings.postgres_lost, 0, "{findings:?}");
    Ok(())
}
