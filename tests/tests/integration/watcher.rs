//! The end-to-end watcher (issue 55, item 7) against a real relay, PostgreSQL and Kafka: it
//! pages on a gap whatever made it, and never on a healthy pipeline.
//!
//! - **Outbox rows deleted before the relay read them** (issue 55, item 1, reproduced with
//!   no fix: the rows are deleted by SQL as the old retention did, with no relay running,
//!   and the relay's first start makes its slot from a snapshot that no longer has them):
//!   every such event is reported missing, the events written after are not; the gauge,
//!   the verdict (failing, rule 1) and the console's findings say so.
//! - **An event topic deleted and re-created** by an admin: a rescan, and the events of
//!   that topic missing.
//! - **Records deleted** with Kafka's delete-records: a rescan, and exactly the events those
//!   records carried missing.
//! - **A healthy relay under load**, the watcher restarted midway and a second replica
//!   beside it: nothing missing, ever, and the watermark reaches the last event.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ra_ledger::commands::Ledger;
use ra_ledger::verdict::rules::{self, State};
use ra_ledger::watcher::metrics::{WatcherGauges, WatcherMetrics};
use ra_ledger::watcher::{self, Settings};
use ra_ledger_cdc::config::RelayConfig;
use ra_ledger_tests::api::{OPERATOR, TestApi};
use ra_ledger_tests::relay::{Collector, RunningRelay, test_config};
use ra_ledger_tests::{TestDatabase, TestTopics};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::{Offset, TopicPartitionList};
use reqwest::header;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::console::{http, session_cookie};

/// A lag bound short enough for a test, long enough for the relay's normal lag on a loaded
/// machine in the gap tests (nothing is in flight there when it matters).
const SHORT_BOUND: Duration = Duration::from_secs(3);
/// How long a finding may take to show, generous for a loaded machine.
const DEADLINE: Duration = Duration::from_secs(90);

fn metadata() -> ra_ledger::store::Metadata {
    ra_ledger::store::Metadata {
        actor: "watcher-test".into(),
        correlation_id: uuid::Uuid::now_v7(),
        causation_id: None,
        traceparent: None,
    }
}

/// A watcher running as `ledger serve` runs it.
struct RunningWatcher {
    metrics: Arc<WatcherMetrics>,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl RunningWatcher {
    fn start(database: &TestDatabase, relay: &RelayConfig, lag_bound: Duration) -> Self {
        let pool = ra_ledger::db::pool(&database.url, "watcher-test", 3).expect("a pool");
        let settings = Settings {
            relay: relay.clone(),
            lag_bound,
            interval: Duration::from_millis(200),
            window: 1_000,
        };
        let metrics = Arc::new(WatcherMetrics::default());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(watcher::run(
            pool,
            settings,
            Arc::clone(&metrics),
            shutdown.clone(),
        ));
        Self {
            metrics,
            shutdown,
            task,
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
    }

    /// Waits until the gauges satisfy `done`; the last reading either way.
    async fn until(&self, done: impl Fn(&WatcherGauges) -> bool) -> Option<WatcherGauges> {
        let started = Instant::now();
        loop {
            let last = self.metrics.last();
            if last.as_ref().is_some_and(&done) || started.elapsed() > DEADLINE {
                return last;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn last_position(database: &TestDatabase) -> anyhow::Result<i64> {
    Ok(database
        .connect()
        .await?
        .query_one("SELECT coalesce(max(position), 0) FROM events", &[])
        .await?
        .get(0))
}

async fn missing_ids(database: &TestDatabase) -> anyhow::Result<HashSet<String>> {
    Ok(database
        .connect()
        .await?
        .query("SELECT event_id::text FROM watcher_missing", &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect())
}

/// A healthy start: a contact and `count` assignments on Kafka, and a watcher that proved
/// them all.
async fn published(
    database: &TestDatabase,
    config: &RelayConfig,
    count: usize,
) -> anyhow::Result<(RunningRelay, RunningWatcher)> {
    let pool = ra_ledger::db::pool(&database.url, "watcher-seed", 2)?;
    let ledger = Ledger::new(pool.clone());
    let texas = ra_ledger::domain::Jurisdiction::parse("j", "TX")?;
    let relay = RunningRelay::start(config.clone());
    let contact = ra_ledger_testing::primary_contact(&ledger, "TX", &metadata()).await?;
    ra_ledger_testing::seed_assignments(&pool, texas, contact, count, 10, |_| {}).await?;
    let watcher = RunningWatcher::start(database, config, SHORT_BOUND);
    let last = last_position(database).await?;
    let proved = watcher.until(|g| g.watermark >= last).await;
    assert!(
        proved.is_some_and(|g| g.watermark >= last && g.missing == 0),
        "the watcher proved {proved:?}, not every event through {last}"
    );
    Ok((relay, watcher))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_rows_deleted_before_the_relay_read_them_are_reported_missing() -> anyhow::Result<()>
{
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let client = database.connect().await?;
    // No slot yet, as on a database where `ledger serve` wrote before the relay's first
    // start: the relay will make it from a snapshot.
    client
        .execute("SELECT pg_drop_replication_slot($1)", &[&config.slot])
        .await?;
    let pool = ra_ledger::db::pool(&database.url, "watcher-test-writes", 2)?;
    let ledger = Ledger::new(pool.clone());
    let texas = ra_ledger::domain::Jurisdiction::parse("j", "TX")?;
    let contact = ra_ledger_testing::primary_contact(&ledger, "TX", &metadata()).await?;
    ra_ledger_testing::seed_assignments(&pool, texas, contact, 40, 10, |_| {}).await?;
    // What the old retention did, trusting a position the relay never vouched for.
    let deleted: HashSet<String> = client
        .query("DELETE FROM outbox RETURNING event_id::text", &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let lost = deleted.len() as i64;
    assert!(lost > 40, "{lost} outbox rows deleted");
    let relay = RunningRelay::start(config.clone());
    // Events written after the deletion reach Kafka (in the relay's snapshot when written
    // before it made its slot, else streamed), and are not missing. They are on Kafka
    // before the watcher starts: on a loaded machine the relay's first start may take
    // longer than the short lag bound, which would count them too.
    ra_ledger_testing::seed_assignments(&pool, texas, contact, 20, 5, |_| {}).await?;
    let mut collector = Collector::new(&topics)?;
    assert!(
        collector
            .until(DEADLINE, |received| received.len() >= 20)
            .await,
        "the relay published {} of the 20 events",
        collector.received.len()
    );
    let watcher = RunningWatcher::start(&database, &config, SHORT_BOUND);
    let last = last_position(&database).await?;
    let started = Instant::now();
    let found = watcher
        .until(|g| g.missing == lost && g.watermark >= last)
        .await;
    println!(
        "watcher: {found:?} after {:.1} s (lag bound {SHORT_BOUND:?})",
        started.elapsed().as_secs_f64()
    );
    let found = found.expect("a round");
    assert_eq!((found.missing, found.active), (lost, true), "{found:?}");
    assert!(found.watermark >= last, "{found:?}");
    assert_eq!(missing_ids(&database).await?, deleted);
    let reader = pool.get().await?;
    let facts = ra_ledger::verdict::read(&reader, &config.slot, None).await?;
    let verdict = rules::verdict(&facts);
    assert_eq!(verdict.state, State::Failing, "{verdict:?}");
    assert!(
        verdict.reason.starts_with(&format!(
            "{lost} committed event(s) older than the watcher's lag bound are not on Kafka"
        )),
        "{}",
        verdict.reason
    );
    assert_eq!(verdict.runbook, Some("docs/operators.md#raeventsmissing"));
    let mut rendered = String::new();
    watcher.metrics.render(&mut rendered);
    assert!(
        rendered.contains(&format!("\nra_watcher_missing_events {lost}\n")),
        "{rendered}"
    );
    let console = ra_ledger::watcher::findings(&reader).await?;
    assert_eq!(console.missing, lost);
    // The console's operations page and `/status` (what `deploy/stack status` prints).
    let api = TestApi::with_relay_slot(&database, &config.slot)?;
    let base = format!("http://{}", api.serve().await?);
    let cookie = session_cookie(&base, OPERATOR).await;
    let page = http()
        .get(format!("{base}/operations"))
        .header(header::COOKIE, &cookie)
        .send()
        .await?
        .text()
        .await?;
    for shown in [
        format!("id=\"watcher-missing\" data-missing=\"{lost}\""),
        "id=\"verdict-state\">failing".to_owned(),
    ] {
        assert!(
            page.contains(&shown),
            "no {shown} on the operations page: {page}"
        );
    }
    let status = http().get(format!("{base}/status")).send().await?;
    assert_eq!(status.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    let status: serde_json::Value = status.json().await?;
    assert_eq!(
        status["runbook"], "docs/operators.md#raeventsmissing",
        "{status}"
    );
    watcher.stop().await;
    relay.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_topic_deleted_and_re_created_is_a_rescan_that_finds_its_events_missing()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let (relay, watcher) = published(&database, &config, 30).await?;
    relay.stop().await?;
    let contact_topic = config.topic(ra_ledger::domain::CONTACT_AGGREGATE);
    ra_ledger_testing::delete_topics_with(topics.client_config(), &contact_topic).await?;
    // Re-created as an admin would, empty (its metadata may take a moment to settle).
    let started = Instant::now();
    loop {
        match topics.create("outbox.event.contact").await {
            Ok(_) => break,
            Err(error) if started.elapsed() < DEADLINE => {
                println!("re-creating {contact_topic}: {error:#}; trying again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(error) => return Err(error),
        }
    }
    let found = watcher.until(|g| g.missing >= 1).await.expect("a round");
    println!("watcher after the topic was re-created: {found:?}");
    assert!(found.rescans >= 1, "{found:?}");
    let contacts: HashSet<String> = database
        .connect()
        .await?
        .query(
            "SELECT event_id::text FROM events WHERE stream LIKE 'contact-%'",
            &[],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(missing_ids(&database).await?, contacts);
    watcher.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_deleted_with_delete_records_are_found_missing() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let (relay, watcher) = published(&database, &config, 60).await?;
    // Which events partition 0 of the assignment topic holds at offsets 0 to 4.
    let topic = config.topic(ra_ledger::domain::ASSIGNMENT_AGGREGATE);
    let mut collector = Collector::new(&topics)?;
    assert!(
        collector
            .until(Duration::from_secs(60), |r| {
                r.iter()
                    .filter(|m| m.topic == topic && m.partition == 0 && m.offset < 5)
                    .count()
                    == 5
            })
            .await,
        "partition 0 of {topic} holds 5 records"
    );
    let removed: HashSet<String> = collector
        .received
        .iter()
        .filter(|m| m.topic == topic && m.partition == 0 && m.offset < 5)
        .map(|m| m.id().to_owned())
        .collect();
    let admin: AdminClient<DefaultClientContext> = topics.client_config().create()?;
    let mut before = TopicPartitionList::new();
    before.add_partition_offset(&topic, 0, Offset::Offset(5))?;
    admin.delete_records(&before, &AdminOptions::new()).await?;
    let found = watcher.until(|g| g.missing >= 5).await.expect("a round");
    println!("watcher after delete-records: {found:?}");
    assert!(found.rescans >= 1, "{found:?}");
    assert_eq!(missing_ids(&database).await?, removed);
    watcher.stop().await;
    relay.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_relay_under_load_is_never_reported_missing_across_a_restart()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let pool = ra_ledger::db::pool(&database.url, "watcher-load", 2)?;
    let ledger = Ledger::new(pool.clone());
    let texas = ra_ledger::domain::Jurisdiction::parse("j", "TX")?;
    let relay = RunningRelay::start(config.clone());
    let contact = ra_ledger_testing::primary_contact(&ledger, "TX", &metadata()).await?;
    // The default lag bound: what production runs with absorbs a loaded machine's lag.
    let first = RunningWatcher::start(&database, &config, watcher::DEFAULT_LAG_BOUND);
    let second = RunningWatcher::start(&database, &config, watcher::DEFAULT_LAG_BOUND);
    let writes = {
        let pool = pool.clone();
        tokio::spawn(async move {
            for _ in 0..20 {
                ra_ledger_testing::seed_assignments(&pool, texas, contact, 100, 10, |_| {}).await?;
            }
            anyhow::Ok(())
        })
    };
    // Every 100 ms, the most events ever listed missing: a false alarm that cleared
    // would leave no row behind.
    let sampler = {
        let client = database.connect().await?;
        let done = CancellationToken::new();
        let stop = done.clone();
        let task = tokio::spawn(async move {
            let mut most = 0i64;
            while !stop.is_cancelled() {
                let now: i64 = client
                    .query_one("SELECT count(*) FROM watcher_missing", &[])
                    .await?
                    .get(0);
                most = most.max(now);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            anyhow::Ok(most)
        });
        (done, task)
    };
    // Midway, the running watcher stops; the other replica takes over from its progress.
    let started = Instant::now();
    let first_active = loop {
        let active = |w: &RunningWatcher| w.metrics.last().filter(|g| g.active);
        if let Some(g) = active(&first).filter(|g| g.watermark > 500) {
            break Some((true, g));
        }
        if let Some(g) = active(&second).filter(|g| g.watermark > 500) {
            break Some((false, g));
        }
        if started.elapsed() > DEADLINE {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (is_first, before) = first_active.expect("one replica runs the watcher");
    let (active, standby) = if is_first {
        (first, second)
    } else {
        (second, first)
    };
    assert!(!standby.metrics.last().is_some_and(|g| g.active));
    active.stop().await;
    writes.await??;
    let last = last_position(&database).await?;
    let after = standby.until(|g| g.active && g.watermark >= last).await;
    println!("watcher before the restart: {before:?}, after: {after:?}");
    let after = after.expect("a round");
    assert!(after.active && after.watermark >= last, "{after:?}");
    sampler.0.cancel();
    let most = sampler.1.await??;
    assert_eq!((most, after.missing, after.rescans), (0, 0, 0));
    assert!(missing_ids(&database).await?.is_empty());
    let facts = ra_ledger::verdict::read(&pool.get().await?, &config.slot, None).await?;
    assert_ne!(rules::verdict(&facts).state, State::Failing, "{facts:?}");
    standby.stop().await;
    relay.stop().await?;
    Ok(())
}

/// `ledger-bench watcher` runs phases without and with the watcher and prints both, on the
/// run's own servers (a short run: what it proves is the command, not the figures).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_bench_watcher_prints_the_cost_with_and_without_it() -> anyhow::Result<()> {
    let stdout = ra_ledger_tests::cli::bench(
        "watcher",
        &["--events", "300", "--rounds", "1"],
        Duration::from_secs(600),
    )
    .await?;
    for line in [
        "median writes/s:",
        "median relay events/s:",
        "median CPU per event:",
        // The run's servers are on this machine: their CPU is counted.
        "CPU counted: this process, PostgreSQL (postmaster",
        "CPU counted: the Kafka broker (process",
    ] {
        assert!(stdout.contains(line), "no {line:?} in {stdout}");
    }
    Ok(())
}
