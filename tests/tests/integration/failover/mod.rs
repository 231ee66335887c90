//! The relay across a PostgreSQL failover (PostgreSQL 17+, [`ReplicatedPostgres`]), in both
//! delivery modes, with nothing done by hand for the relay: no slot made, no gate amended,
//! no restart. The harness plays the cluster manager only: it kills the primary, promotes the
//! standby and builds a new standby with the gate's physical slot. Between the promotion and
//! that standby, what the relay does is `without_standby`'s ([`without_standby`] tests both
//! choices one by one).
//!
//! The checker compares the final primary's outbox with what a `read_committed` consumer
//! read: lost (on the primary, not on Kafka), phantom (on Kafka, not on the primary), per-key
//! order, duplicates. Commits acknowledged to the writer that the promoted standby never had
//! are PostgreSQL's own loss under asynchronous replication, reported apart; the gate makes
//! sure Kafka never has them either.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ra_ledger_cdc::config::{DeliveryMode, RelayConfig};
use ra_ledger_cdc::metrics::{
    STANDBY_GATE_MISSING_SLOTS, STANDBY_GATE_WAITING, STREAMING, STREAMING_WITHOUT_STANDBY,
};
use ra_ledger_cdc::relay::RelayError;
use ra_ledger_cdc::relay::recover::{RecoverOptions, recover};
use ra_ledger_cdc::relay::slot::SlotError;
use ra_ledger_tests::relay::{
    Collector, Received, RunningRelay, Tally, insert_backlog, test_config,
};
use ra_ledger_tests::replicated::{ReplicatedPostgres, ReplicationOptions};
use ra_ledger_tests::{TestDatabase, TestTopics, metric};
use tokio_util::sync::CancellationToken;

mod without_standby;

/// Rounds of kill and promote per delivery mode (`LEDGER_FAILOVER_ROUNDS`; the 10
/// in the failover target, fewer in the everyday suite to keep it under its time budget).
fn rounds() -> usize {
    ra_ledger_tests::repetitions("LEDGER_FAILOVER_ROUNDS", 2)
}

/// How long the standby's copy of the slot may take to be ready: slot sync naps up to 30 s.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Writes bursts of outbox rows through the multi-host URL until stopped, reconnecting
/// across failovers. Returns the ids of the transactions whose commit was acknowledged.
struct Writer {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Vec<String>>,
    acknowledged: Arc<Mutex<usize>>,
}

impl Writer {
    fn start(url: String) -> Self {
        let stop = CancellationToken::new();
        let acknowledged = Arc::new(Mutex::new(0));
        let counter = Arc::clone(&acknowledged);
        let token = stop.clone();
        let task = tokio::spawn(async move {
            let mut ids = Vec::new();
            let mut client: Option<tokio_postgres::Client> = None;
            while !token.is_cancelled() {
                if client
                    .as_ref()
                    .is_none_or(tokio_postgres::Client::is_closed)
                {
                    client = ra_ledger_tests::database::connect(&url).await.ok();
                    if client.is_none() {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
                let Some(connection) = client.as_ref() else {
                    continue;
                };
                // 4 transactions of 5 rows about every 10 ms: ~2,000 events/s at most.
                match insert_backlog(connection, 4, 5, 64).await {
                    Ok(written) => {
                        *counter.lock().expect("counter") += written.len();
                        ids.extend(written);
                    }
                    Err(_) => client = None,
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            ids
        });
        Self {
            stop,
            task,
            acknowledged,
        }
    }

    fn acknowledged(&self) -> usize {
        *self.acknowledged.lock().expect("counter")
    }

    async fn finish(self) -> anyhow::Result<Vec<String>> {
        self.stop.cancel();
        Ok(self.task.await?)
    }
}

/// Every event id in `database`'s outbox (on the current primary).
async fn outbox_ids(database: &TestDatabase) -> anyhow::Result<HashSet<String>> {
    let client = database.connect().await?;
    Ok(client
        .query("SELECT event_id::text FROM outbox", &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect())
}

/// What one run of a failover scenario found.
#[derive(Debug, Default)]
struct Findings {
    lost: usize,
    phantom: usize,
    order_violations: usize,
    duplicates: usize,
    postgres_lost: usize,
}

/// Compares the primary's outbox with what was read: lost, phantom, order, duplicates;
/// and what the writer had acknowledged that the primary lacks (PostgreSQL's own loss).
fn check(
    name: &str,
    on_primary: &HashSet<String>,
    acknowledged: &[String],
    received: &[Received],
) -> Findings {
    let tally = Tally::of(name, on_primary, received);
    let read: HashSet<&str> = received.iter().map(Received::id).collect();
    let phantom = read.iter().filter(|id| !on_primary.contains(**id)).count();
    let postgres_lost = acknowledged
        .iter()
        .filter(|id| !on_primary.contains(id.as_str()))
        .count();
    println!(
        "{name}: {phantom} phantom, {postgres_lost} acknowledged commits the promoted standby never had (PostgreSQL's own loss)"
    );
    Findings {
        lost: tally.lost,
        phantom,
        order_violations: tally.order_violations,
        duplicates: tally.duplicates,
        postgres_lost,
    }
}

/// A relay configuration on the pair: a failover slot, the multi-host URL, quick health
/// checks.
async fn failover_config(
    database: &TestDatabase,
    topics: &mut TestTopics,
    delivery: DeliveryMode,
) -> anyhow::Result<RelayConfig> {
    Ok(RelayConfig {
        delivery,
        slot_failover: true,
        health_check_interval_ms: 300,
        ..test_config(database, topics).await?
    })
}

/// Slot lag on the primary now, in bytes.
async fn slot_lag(database: &TestDatabase, slot: &str) -> anyhow::Result<i64> {
    let client = database.connect().await?;
    Ok(client
        .query_one(
            "SELECT coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?
        .get(0))
}

/// Kill and promote, `rounds()` times under load. Each round: the standby's copy of the
/// slot ready, the primary killed (immediate), the standby promoted; with no standby left
/// the relay streams without the gate (`without_standby`'s default) and says so, and what
/// the new primary commits reaches Kafka before any standby exists; then a new standby is
/// built and the relay goes back behind the gate by itself (the next round waits for the
/// new standby's copy of the slot). Everything on the new primary must reach Kafka, and
/// nothing else.
async fn kill_and_promote(delivery: DeliveryMode) -> anyhow::Result<()> {
    let mut pair = ReplicatedPostgres::start().await?;
    let database = pair.create_database().await?;
    let mut topics = TestTopics::new();
    let config = failover_config(&database, &mut topics, delivery).await?;
    let mut collector = Collector::new(&topics)?;
    let relay = RunningRelay::start(config.clone());
    let writer = Writer::start(database.url.clone());
    let name = format!("kill and promote, {delivery:?}");
    for round in 1..=rounds() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let ready_since = Instant::now();
        pair.wait_failover_ready(&config.slot, READY_TIMEOUT)
            .await?;
        let lag = slot_lag(&database, &config.slot).await?;
        let written = writer.acknowledged();
        pair.kill_primary()?;
        let killed = Instant::now();
        pair.promote().await?;
        // The gate names the old standby's slot, which the promoted server lacks, and it
        // has no standby: the relay streams without the gate, and says so.
        let without = wait_for_metric(
            &relay,
            STREAMING_WITHOUT_STANDBY.name,
            1,
            Duration::from_secs(20),
        )
        .await;
        // The first event written on the new primary, on Kafka while it has no standby.
        let marker: HashSet<String> = insert_backlog(&database.connect().await?, 1, 1, 8)
            .await?
            .into_iter()
            .collect();
        let arrived = collector.until_all(Duration::from_secs(120), &marker).await;
        let first_event = killed.elapsed();
        pair.rebuild_standby().await?;
        let behind = wait_for_metric(
            &relay,
            STREAMING_WITHOUT_STANDBY.name,
            0,
            Duration::from_secs(20),
        )
        .await;
        println!(
            "{name}, round {round}: slot lag at the kill {lag} bytes, {written} events acknowledged so far, \
             standby ready after {:.1} s, streaming without the gate reported: {without}, first event \
             from the new primary {:.1} s after the kill, before any standby, back behind the gate \
             {:.1} s after the kill (timeline {})",
            (killed - ready_since).as_secs_f64(),
            first_event.as_secs_f64(),
            killed.elapsed().as_secs_f64(),
            pair.primary_timeline()?,
        );
        anyhow::ensure!(
            arrived,
            "round {round}: nothing from the new primary reached Kafka while it had no standby"
        );
        anyhow::ensure!(
            without,
            "round {round}: the relay did not report streaming without the gate"
        );
        anyhow::ensure!(
            behind && pair.primary_slot_failover(&config.slot).await? == Some(true),
            "round {round}: the relay did not go back behind the gate once the standby was built"
        );
        let on_primary = outbox_ids(&database).await?;
        anyhow::ensure!(
            collector
                .until_all(Duration::from_secs(120), &on_primary)
                .await,
            "round {round}: not everything on the new primary reached Kafka"
        );
    }
    let acknowledged = writer.finish().await?;
    let on_primary = outbox_ids(&database).await?;
    let all = collector
        .until_all(Duration::from_secs(120), &on_primary)
        .await;
    // What else may still come (a phantom would arrive late too).
    collector.until(Duration::from_secs(3), |_| false).await;
    let rendered = relay.metrics.render();
    relay.stop().await?;
    let findings = check(&name, &on_primary, &acknowledged, &collector.received);
    assert!(all, "{findings:?}");
    assert_eq!(findings.lost, 0, "{findings:?}");
    assert_eq!(findings.phantom, 0, "{findings:?}");
    assert_eq!(findings.order_violations, 0, "{findings:?}");
    if delivery == DeliveryMode::ExactlyOnce {
        assert_eq!(findings.duplicates, 0, "read_committed: {findings:?}");
    }
    assert_eq!(
        metric(&rendered, ra_ledger_cdc::metrics::SERVER_TIMELINE.name) as usize,
        1 + rounds(),
        "{rendered}"
    );
    Ok(())
}

/// Polls the relay's metric `name` until it reads `value` or `timeout` passes.
async fn wait_for_metric(relay: &RunningRelay, name: &str, value: u64, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if metric(&relay.metrics.render(), name) == value {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_and_promote_under_load_loses_nothing_at_least_once() -> anyhow::Result<()> {
    kill_and_promote(DeliveryMode::AtLeastOnce).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_and_promote_under_load_loses_nothing_exactly_once() -> anyhow::Result<()> {
    kill_and_promote(DeliveryMode::ExactlyOnce).await
}

/// A standby whose WAL receiver is paused: the gate holds the relay back, so what the
/// primary commits meanwhile is not published; the primary dies before the standby has it,
/// and the promoted standby lacks it: PostgreSQL's own loss, and none of it is on Kafka.
async fn a_lagging_standby_holds_the_relay(delivery: DeliveryMode) -> anyhow::Result<()> {
    let mut pair = ReplicatedPostgres::start().await?;
    let database = pair.create_database().await?;
    let mut topics = TestTopics::new();
    let config = failover_config(&database, &mut topics, delivery).await?;
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
    let receiver = pair.pause_wal_receiver().await?;
    let held: HashSet<String> = insert_backlog(&client, 10, 2, 32)
        .await?
        .into_iter()
        .collect();
    // Nothing of it may be read while the standby lacks it.
    collector.until(Duration::from_secs(3), |_| false).await;
    let leaked = collector
        .received
        .iter()
        .filter(|m| held.contains(m.id()))
        .count();
    let waiting = wait_for_metric(
        &relay,
        ra_ledger_cdc::metrics::STANDBY_GATE_WAITING.name,
        1,
        Duration::from_secs(10),
    )
    .await;
    pair.kill_primary()?;
    // What the paused receiver had not read dies with it (and the standby restarts its
    // processes): the standby never has the held commits.
    ra_ledger_tests::process::send_signal(receiver, "KILL")?;
    let _ = pair.resume_wal_receiver();
    let standby = pair.standby_url()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while ra_ledger_tests::database::connect(&standby).await.is_err() {
        anyhow::ensure!(Instant::now() < deadline, "the standby did not come back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    pair.promote().await?;
    pair.rebuild_standby().await?;
    let after: HashSet<String> = insert_backlog(&database.connect().await?, 10, 2, 32)
        .await?
        .into_iter()
        .collect();
    let arrived = collector.until_all(Duration::from_secs(120), &after).await;
    collector.until(Duration::from_secs(2), |_| false).await;
    relay.stop().await?;
    let on_primary = outbox_ids(&database).await?;
    let acknowledged: Vec<String> = before.iter().chain(&held).chain(&after).cloned().collect();
    let findings = check(
        &format!("lagging standby, {delivery:?}"),
        &on_primary,
        &acknowledged,
        &collector.received,
    );
    assert_eq!(leaked, 0, "published while the standby lagged");
    assert!(waiting, "the relay reported no wait on the gate");
    assert!(arrived, "{findings:?}");
    assert_eq!(findings.lost, 0, "{findings:?}");
    assert_eq!(findings.phantom, 0, "{findings:?}");
    assert_eq!(
        findings.postgres_lost,
        held.len(),
        "the promoted standby had none of the held commits: {findings:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_standby_holds_the_relay_back_at_least_once() -> anyhow::Result<()> {
    a_lagging_standby_holds_the_relay(DeliveryMode::AtLeastOnce).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_standby_holds_the_relay_back_exactly_once() -> anyhow::Result<()> {
    a_lagging_standby_holds_the_relay(DeliveryMode::ExactlyOnce).await
}

/// With `synchronized_standby_slots` empty while the primary has a standby, a failover slot
/// could be read past what the standby has: the relay holds (it stays up, publishes
/// nothing, and its gauge fires `RaStandbyGateHolding`) until the gate is set, then streams
/// with no restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_gate_a_failover_relay_holds_until_it_is_set() -> anyhow::Result<()> {
    let pair = ReplicatedPostgres::start_with(ReplicationOptions {
        synchronized_standby_slots: false,
        ..ReplicationOptions::default()
    })
    .await?;
    let database = pair.create_database().await?;
    let mut topics = TestTopics::new();
    let config = failover_config(&database, &mut topics, DeliveryMode::AtLeastOnce).await?;
    let mut collector = Collector::new(&topics)?;
    let relay = RunningRelay::start(config.clone());
    let written: HashSet<String> = insert_backlog(&database.connect().await?, 10, 2, 32)
        .await?
        .into_iter()
        .collect();
    let held = wait_for_metric(
        &relay,
        STANDBY_GATE_WAITING.name,
        1,
        Duration::from_secs(30),
    )
    .await;
    collector.until(Duration::from_secs(3), |_| false).await;
    let rendered = relay.metrics.render();
    assert!(held, "the relay did not report the hold: {rendered}");
    assert!(!relay.task.is_finished(), "a hold, not a refusal");
    assert_eq!(metric(&rendered, STREAMING.name), 0, "{rendered}");
    assert_eq!(
        metric(&rendered, STANDBY_GATE_MISSING_SLOTS.name),
        0,
        "{rendered}"
    );
    assert!(
        collector.received.is_empty(),
        "published without the gate: {:?}",
        collector.received
    );

    pair.set_synchronized_standby_slots(&pair.options().physical_slot)
        .await?;
    let arrived = collector.until_all(Duration::from_secs(60), &written).await;
    let failover = pair.primary_slot_failover(&config.slot).await?;
    let released = wait_for_metric(
        &relay,
        STANDBY_GATE_WAITING.name,
        0,
        Duration::from_secs(10),
    )
    .await;
    relay.stop().await?;
    assert!(arrived, "nothing reached Kafka once the gate was set");
    assert_eq!(failover, Some(true));
    assert!(released, "the gauge still says held");
    Ok(())
}

/// A slot made without failover is not on the standby: after a promotion the relay stops,
/// naming the recovery; `ledger relay recover` on the new primary loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_without_failover_stops_the_relay_after_a_promotion_and_recovers()
-> anyhow::Result<()> {
    let mut pair = ReplicatedPostgres::start().await?;
    let database = pair.create_database().await?;
    let mut topics = TestTopics::new();
    let config = RelayConfig {
        health_check_interval_ms: 300,
        ..test_config(&database, &mut topics).await?
    };
    let mut collector = Collector::new(&topics)?;
    let relay = RunningRelay::start(config.clone());
    let writer = Writer::start(database.url.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    pair.wait_replayed(Duration::from_secs(30)).await?;
    pair.kill_primary()?;
    pair.promote().await?;
    let outcome = tokio::time::timeout(Duration::from_secs(60), relay.task).await??;
    let error = outcome.expect_err("the relay must stop");
    assert!(
        matches!(error, RelayError::Slot(SlotError::Lost { .. })),
        "{error}"
    );
    assert!(
        error.to_string().contains("ledger relay recover"),
        "{error}"
    );
    pair.rebuild_standby().await?;
    let recovered = recover(&config, &RecoverOptions::default()).await?;
    println!("slot without failover: recovered {recovered:?}");
    let relay = RunningRelay::start(config.clone());
    let acknowledged = writer.finish().await?;
    let on_primary = outbox_ids(&database).await?;
    let all = collector
        .until_all(Duration::from_secs(120), &on_primary)
        .await;
    relay.stop().await?;
    let findings = check(
        "slot without failover",
        &on_primary,
        &acknowledged,
        &collector.received,
    );
    assert!(all, "{findings:?}");
    assert_eq!(findings.lost, 0, "{findings:?}");
    // A slot without failover has no gate: the relay may have published what the old
    // primary flushed in its last moment and the standby never received (the logical
    // walsender sends what is flushed locally). Those are phantoms, as many as PostgreSQL
    // lost of the acknowledged commits, plus at most the writer's one call in flight at the
    // kill (4 transactions of 5 rows), whose writer saw the connection fail rather than a
    // commit. docs/operators.md says so; `ledger reconcile` lists them.
    assert!(
        findings.phantom <= findings.postgres_lost + 20,
        "{findings:?}"
    );
    Ok(())
}

/// A switchover, then a failback: the demoted primary rejoins with a slot of the same name
/// that is not a synced copy, which stops slot sync on it. The relay says so (the standby's
/// slot is not ready); once that orphan is dropped, slot sync works again and the failback
/// loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switchover_and_failback_keep_the_slot_or_say_why_not() -> anyhow::Result<()> {
    let mut pair = ReplicatedPostgres::start().await?;
    let database = pair.create_database().await?;
    let mut topics = TestTopics::new();
    let config = failover_config(&database, &mut topics, DeliveryMode::ExactlyOnce).await?;
    let mut collector = Collector::new(&topics)?;
    let relay = RunningRelay::start(config.clone());
    let writer = Writer::start(database.url.clone());
    pair.wait_failover_ready(&config.slot, READY_TIMEOUT)
        .await?;
    pair.switchover().await?;
    let orphans = pair.orphaned_failover_slots().await?;
    let said = wait_for_metric(
        &relay,
        ra_ledger_cdc::metrics::STANDBY_SLOTS_READY.name,
        0,
        Duration::from_secs(20),
    )
    .await
        && metric(
            &relay.metrics.render(),
            ra_ledger_cdc::metrics::STANDBYS.name,
        ) == 1;
    println!(
        "switchover: orphaned failover slots on the rejoined node {orphans:?}; the relay reported the standby not ready: {said}"
    );
    if !orphans.is_empty() {
        assert!(
            said,
            "an orphaned slot stops slot sync: the relay must say the standby is not ready"
        );
        pair.drop_orphaned_failover_slots().await?;
    }
    pair.wait_failover_ready(&config.slot, READY_TIMEOUT)
        .await?;
    pair.switchover().await?;
    pair.drop_orphaned_failover_slots().await?;
    let acknowledged = writer.finish().await?;
    let on_primary = outbox_ids(&database).await?;
    let all = collector
        .until_all(Duration::from_secs(120), &on_primary)
        .await;
    relay.stop().await?;
    let findings = check(
        "switchover and failback",
        &on_primary,
        &acknowledged,
        &collector.received,
    );
    assert!(all, "{findings:?}");
    assert_eq!(findings.lost, 0, "{findings:?}");
    assert_eq!(findings.phantom, 0, "{findings:?}");
    assert_eq!(findings.duplicates, 0, "{findings:?}");
    assert_eq!(
        findings.postgres_lost, 0,
        "a switchover loses no commit: {findings:?}"
    );
    Ok(())
}
