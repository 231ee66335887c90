//! The relay on a three-broker Apache Kafka cluster under broker faults, in both delivery
//! modes at once, while the ledger writes real events at [`RATE`] events/s.
//!
//! # One scenario, two relays
//!
//! A [`Scenario`] is one ledger database, one cluster ([`BrokerCluster`]) and one relay per
//! delivery mode ([`Lane`]), each with its own slot and its own topics (three copies,
//! `min.insync.replicas=2`), so both modes meet the same faults at the same moments. A
//! [`Load`] writes assignments through the ledger's write path (events, outbox rows,
//! projections) the whole time. Each lane's consumer reads `read_committed` in a task of its
//! own, so that its receipt times are taken when the records arrive, whatever the test does.
//!
//! # What decides
//!
//! `ledger reconcile` ([`ra_ledger::reconcile`]) compares each lane's topics with the
//! ledger's `events` once the load stopped: lost, phantom and order inversions must be 0,
//! and duplicates too in exactly-once. Beside it each test prints duplicates under at least
//! once, the commit → receipt p99 of the events committed during the faults against the
//! others, and the time from each healed fault until the lag is under 1 s
//! ([`figures`]). Timings are printed, never asserted.
//!
//! # No help
//!
//! The tests break Kafka and wait for Kafka to heal (a node back, every partition in sync),
//! as Kafka's own `replication_test` does; they never touch a relay: no restart, no
//! reconnect, no setting changed. A relay that stopped fails the test.
//!
//! The leader kill and the coordinator pause run in `deploy/test`; the rolling restart,
//! two brokers down, the supersede and the topics check are `#[ignore]`d there for CI time
//! and run in `deploy/test-cluster`.

mod coordinator_pause;
mod figures;
mod leader_kill;
mod rolling_restart;
mod supersede;
mod topics;
mod two_down;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use ra_ledger::commands::Ledger;
use ra_ledger::domain::Jurisdiction;
use ra_ledger::reconcile::{self, Report};
use ra_ledger_cdc::config::{DeliveryMode, RelayConfig};
use ra_ledger_cdc::metrics;
use ra_ledger_tests::cluster::BrokerCluster;
use ra_ledger_tests::relay::{Collector, RunningRelay, test_config};
use ra_ledger_tests::{TestDatabase, TestTopics, metric};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use figures::{Figures, Window};

/// Events per second the load writes: above the [`REQUIRED_RATE`] the faults must meet.
const RATE: u64 = 2_500;
/// The rate the faults are to meet (issue 33). A run below it says so (printed: a machine
/// too busy to write at that rate is no fault of the relay's, and time is not asserted).
const REQUIRED_RATE: f64 = 2_000.0;
/// Events per load transaction (one every `1 s / (RATE / PER_TRANSACTION)`, 40 ms).
const PER_TRANSACTION: u64 = 100;
/// How long the load runs before the first fault and after the last heal: samples from
/// outside the faults, and time for the lag to fall back.
const QUIET: Duration = Duration::from_secs(8);
/// The most a healed cluster may take to have every partition in sync again.
const HEAL_TIMEOUT: Duration = Duration::from_secs(120);

/// Both delivery modes, the order in which lanes are made and reported.
const MODES: [DeliveryMode; 2] = [DeliveryMode::AtLeastOnce, DeliveryMode::ExactlyOnce];

/// Runs `f`, a blocking call (a broker's start or kill, a metadata wait, a Kafka tool),
/// without holding up the runtime's other tasks: the relays and the consumers.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// One relay and its consumer.
struct Lane {
    /// Its delivery mode.
    mode: DeliveryMode,
    /// Its configuration (slot, topics).
    config: RelayConfig,
    /// The relay.
    relay: RunningRelay,
    /// Its consumer, reading in a task of its own.
    collector: BackgroundCollector,
    /// Its topics (deleted when it is dropped).
    topics: TestTopics,
}

impl Lane {
    /// `<prefix>.outbox.event.<aggregate>`, a topic of this lane.
    fn topic(&self, aggregate: &str) -> String {
        self.config.topic(aggregate)
    }

    /// Events (exactly once: committed) the relay reports published.
    fn published(&self) -> u64 {
        metric(&self.relay.metrics.render(), metrics::EVENTS_PUBLISHED.name)
    }
}

/// A [`Collector`] polled in a task of its own until [`BackgroundCollector::finish`].
struct BackgroundCollector {
    stop: CancellationToken,
    task: JoinHandle<Collector>,
}

impl BackgroundCollector {
    fn start(mut collector: Collector) -> Self {
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            while !token.is_cancelled() {
                collector.until(Duration::from_millis(200), |_| false).await;
            }
            collector
        });
        Self { stop, task }
    }

    async fn finish(self) -> anyhow::Result<Collector> {
        self.stop.cancel();
        Ok(self.task.await?)
    }
}

/// Assignments written through the ledger's write path at [`RATE`] events/s, until
/// stopped.
struct Load {
    stop: CancellationToken,
    written: Arc<AtomicU64>,
    task: JoinHandle<anyhow::Result<()>>,
    started: Instant,
}

impl Load {
    fn start(pool: Pool, jurisdiction: Jurisdiction, contact: Uuid) -> Self {
        let stop = CancellationToken::new();
        let written = Arc::new(AtomicU64::new(0));
        let (token, counter) = (stop.clone(), Arc::clone(&written));
        let task = tokio::spawn(async move {
            let mut tick =
                tokio::time::interval(Duration::from_millis(1_000 * PER_TRANSACTION / RATE));
            // A slow transaction is made up for at once: the rate holds over the run.
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            while !token.is_cancelled() {
                tick.tick().await;
                let count = PER_TRANSACTION as usize;
                ra_ledger_testing::seed_assignments(
                    &pool,
                    jurisdiction,
                    contact,
                    count,
                    count,
                    |_| {},
                )
                .await?;
                counter.fetch_add(PER_TRANSACTION, Ordering::Relaxed);
            }
            Ok(())
        });
        Self {
            stop,
            written,
            task,
            started: Instant::now(),
        }
    }

    fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Stops it; returns the events it wrote and their rate.
    async fn finish(self) -> anyhow::Result<(u64, f64)> {
        self.stop.cancel();
        self.task.await??;
        let written = self.written.load(Ordering::Relaxed);
        Ok((
            written,
            written as f64 / self.started.elapsed().as_secs_f64(),
        ))
    }
}

/// A fault as the scenario recorded it: when it began, when Kafka had healed, and the
/// events the load wrote in between.
#[derive(Debug, Clone)]
struct Fault {
    /// What it was, for the report.
    label: String,
    /// Its window.
    window: Window,
    /// Events written during it.
    written: u64,
}

/// One database, one cluster and a relay per delivery mode, under a steady load.
struct Scenario<'a> {
    /// What the report calls it.
    name: String,
    /// The relays.
    lanes: Vec<Lane>,
    load: Option<Load>,
    pool: Pool,
    /// The ledger's database.
    database: TestDatabase,
    faults: Vec<Fault>,
    open: Option<(String, DateTime<Utc>, u64)>,
    /// The cluster under test.
    cluster: &'a BrokerCluster,
}

impl<'a> Scenario<'a> {
    /// A fresh database on `cluster`, a relay per mode of `modes` (each configuration
    /// passed through `tune` first), every relay seen publishing, then the load started and
    /// run for [`QUIET`].
    async fn start(
        name: &str,
        cluster: &'a BrokerCluster,
        modes: &[DeliveryMode],
        tune: impl Fn(&mut RelayConfig),
    ) -> anyhow::Result<Self> {
        let database = TestDatabase::new().await?;
        let pool = ra_ledger::db::pool(&database.url, "cluster-faults", 4)?;
        let mut lanes = Vec::new();
        for &mode in modes {
            let mut topics = TestTopics::on(cluster.brokers());
            let mut config = test_config(&database, &mut topics).await?;
            config.delivery = mode;
            tune(&mut config);
            let collector = Collector::on(&topics, &topics.brokers.clone())?;
            lanes.push(Lane {
                mode,
                relay: RunningRelay::start(config.clone()),
                config,
                collector: BackgroundCollector::start(collector),
                topics,
            });
        }
        // Every topic of the test has three copies, as the cluster gave them.
        for lane in &lanes {
            let replicas = blocking(|| cluster.replicas(&lane.topic("assignment")))?;
            assert!(
                replicas.iter().all(|r| r.len() == 3),
                "{} is not on three brokers: {replicas:?}",
                lane.topic("assignment")
            );
        }
        let ledger = Ledger::new(pool.clone());
        let metadata = ra_ledger::store::Metadata {
            actor: "cluster-faults".into(),
            correlation_id: Uuid::now_v7(),
            causation_id: None,
            traceparent: None,
        };
        let contact = ra_ledger_testing::primary_contact(&ledger, "CA", &metadata).await?;
        let mut scenario = Self {
            name: name.to_owned(),
            lanes,
            load: None,
            pool: pool.clone(),
            database,
            faults: Vec::new(),
            open: None,
            cluster,
        };
        // The contact's event through every relay: each is connected and publishing.
        let deadline = Instant::now() + Duration::from_secs(120);
        while scenario.lanes.iter().any(|lane| lane.published() == 0) {
            anyhow::ensure!(
                Instant::now() < deadline,
                "a relay published nothing within 120 s"
            );
            scenario.ensure_relays_run()?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        scenario.load = Some(Load::start(
            pool,
            Jurisdiction::parse("jurisdiction", "CA")?,
            contact,
        ));
        tokio::time::sleep(QUIET).await;
        Ok(scenario)
    }

    /// The lane of `mode`.
    ///
    /// # Panics
    /// When the scenario has none.
    fn lane(&self, mode: DeliveryMode) -> &Lane {
        self.lanes
            .iter()
            .find(|lane| lane.mode == mode)
            .expect("a lane of that mode")
    }

    /// Events the load wrote so far.
    fn written(&self) -> u64 {
        self.load.as_ref().map_or(0, Load::written)
    }

    /// Fails when a relay stopped: none may need a hand.
    fn ensure_relays_run(&self) -> anyhow::Result<()> {
        for lane in &self.lanes {
            anyhow::ensure!(
                !lane.relay.task.is_finished(),
                "the {} relay stopped",
                lane.mode.as_str()
            );
        }
        Ok(())
    }

    /// A fault begins now.
    fn fault_begins(&mut self, label: impl Into<String>) {
        assert!(self.open.is_none(), "a fault is open already");
        self.open = Some((label.into(), Utc::now(), self.written()));
    }

    /// Kafka healed from the open fault now.
    fn fault_healed(&mut self) -> anyhow::Result<()> {
        let (label, began, written_before) = self.open.take().expect("no fault is open");
        self.faults.push(Fault {
            label,
            window: Window {
                began,
                healed: Utc::now(),
            },
            written: self.written() - written_before,
        });
        self.ensure_relays_run()
    }

    /// Waits until the cluster healed: every broker back, every partition in sync.
    fn wait_until_healed(&self) -> anyhow::Result<Duration> {
        blocking(|| self.cluster.wait_until_in_sync(HEAL_TIMEOUT))
    }

    /// Runs the load [`QUIET`] more, stops it, waits until each consumer has every event of
    /// the ledger, reconciles each lane and prints its figures; returns them per lane, in
    /// the order of the modes given to [`Scenario::start`].
    async fn finish(mut self) -> anyhow::Result<Vec<Outcome>> {
        assert!(self.open.is_none(), "a fault was never healed");
        tokio::time::sleep(QUIET).await;
        self.ensure_relays_run()?;
        let (written, rate) = self.load.take().expect("the load runs").finish().await?;
        if rate < REQUIRED_RATE {
            println!(
                "{}: note: the load wrote {rate:.0} events/s, under the {REQUIRED_RATE:.0} the faults \
                 are to meet (the machine could not keep {RATE}/s)",
                self.name
            );
        }
        let expected: HashSet<String> = self
            .database
            .connect()
            .await?
            .query("SELECT event_id::text FROM events", &[])
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let options = reconcile::Options {
            settle: Duration::from_secs(120),
            ..reconcile::Options::default()
        };
        let windows: Vec<Window> = self.faults.iter().map(|f| f.window.clone()).collect();
        let mut outcomes = Vec::new();
        for lane in std::mem::take(&mut self.lanes) {
            let mut collector = lane.collector.finish().await?;
            let arrived = collector
                .until_all(Duration::from_secs(180), &expected)
                .await;
            let report = reconcile::run(&self.pool, &lane.config, &options).await?;
            let stopped = lane.relay.task.is_finished();
            let figures = Figures::of(&collector.received, &expected, &windows);
            let rendered = lane.relay.metrics.render();
            println!(
                "{}, {}: the relay ran {} sessions; {} Kafka transactions aborted, {} indefinite outcomes",
                self.name,
                lane.mode.as_str(),
                metric(&rendered, metrics::SESSIONS.name),
                metric(&rendered, metrics::TRANSACTIONS_ABORTED.name),
                metric(&rendered, metrics::INDEFINITE_OUTCOMES.name),
            );
            println!(
                "{}, {}: {} events written at {rate:.0} events/s; {}; {figures}",
                self.name,
                lane.mode.as_str(),
                written,
                describe(&report),
            );
            lane.relay.stop().await?;
            outcomes.push(Outcome {
                mode: lane.mode,
                report,
                arrived,
                stopped,
            });
        }
        for fault in &self.faults {
            println!(
                "{}: {} lasted {:.1} s, {} events written meanwhile",
                self.name,
                fault.label,
                fault.window.seconds(),
                fault.written
            );
            assert!(
                fault.written > 0,
                "the load wrote nothing during {}: the fault met no traffic",
                fault.label
            );
        }
        Ok(outcomes)
    }
}

/// What one lane came to.
#[derive(Debug)]
struct Outcome {
    /// Its mode.
    mode: DeliveryMode,
    /// `ledger reconcile`'s finding.
    report: Report,
    /// Whether the consumer got every event of the ledger.
    arrived: bool,
    /// Whether the relay had stopped by itself before the end.
    stopped: bool,
}

impl Outcome {
    /// What every fault test demands: the relay carried on by itself, the consumer got
    /// every event, and `ledger reconcile` found no loss, no phantom, no inversion, nothing
    /// unseen, and no duplicate in exactly once.
    fn assert_clean(&self) {
        let report = &self.report;
        let mode = self.mode.as_str();
        assert!(!self.stopped, "{mode}: the relay stopped");
        assert!(
            report.caught_up,
            "{mode}: the relay never caught up: {report:?}"
        );
        assert_eq!(
            (
                report.lost,
                report.phantom,
                report.inversions(),
                report.unseen
            ),
            (0, 0, 0, 0),
            "{mode}: lost, phantom, inversions, unseen: {report:?}"
        );
        assert!(self.arrived, "{mode}: the consumer did not get every event");
        assert!(
            report.events > 0 && report.records >= report.events,
            "{report:?}"
        );
        if self.mode == DeliveryMode::ExactlyOnce {
            assert_eq!(
                (report.duplicates, report.max_copies),
                (0, 1),
                "exactly once delivered a second copy: {report:?}"
            );
        }
    }
}

/// `ledger reconcile`'s counts in a line.
fn describe(report: &Report) -> String {
    format!(
        "reconcile: {} events, {} records, lost {}, phantom {}, order inversions {} by LSN and {} by version, \
         duplicates {} (most copies of one {}), unseen {}, parked {}",
        report.events,
        report.records,
        report.lost,
        report.phantom,
        report.lsn_inversions,
        report.version_inversions,
        report.duplicates,
        report.max_copies,
        report.unseen,
        report.parked,
    )
}
