//! `ledger bench peers`: the relay and Debezium (Kafka Connect standalone with the
//! PostgreSQL connector and the Outbox Event Router) side by side on one machine, one at a
//! time, each as a process of its own on its own scratch database, slot and topics, with the
//! same load and the same consumer (docs/peers.md): a drain of a backlog written
//! beforehand, steady loads, and a kill -9 under load.

mod load;
mod process;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ra_ledger::db;
use ra_ledger::testing::{self, ScratchDatabase, debezium};
use ra_ledger_cdc::config::RelayConfig;
use ra_ledger_cdc::pg::ReplicationTarget;
use uuid::Uuid;

use super::{Latencies, scratch};
use load::Delivery;
use process::{Launch, Peer};

/// The systems compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum System {
    /// `ledger relay`.
    Relay,
    /// Debezium on Kafka Connect.
    Debezium,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            Self::Relay => "relay",
            Self::Debezium => "debezium",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Rows of the backlog drained.
    pub rows: u64,
    /// Rows per transaction of the backlog.
    pub per_transaction: u64,
    /// Rates of the steady phases, events/s.
    pub rates: Vec<u64>,
    /// Length of each steady phase.
    pub seconds: u64,
    /// Rate while a system is killed.
    pub kill_rate: u64,
    /// Length of the kill phase (the kill comes a third into it).
    pub kill_seconds: u64,
    /// Which systems, in this order.
    pub systems: Vec<System>,
    /// `deploy/peers`, run as `<it> connect WORKER CONNECTOR`.
    pub connect_command: PathBuf,
    /// Where each system's logs, properties and offsets go.
    pub work_dir: PathBuf,
}

/// How long the consumer waits for a next event before it calls the rest lost: longer than
/// a JVM's start and the connector's retries of a slot still held by its killed walsender.
const IDLE: Duration = Duration::from_secs(90);

pub async fn run(database_url: &str, brokers: &str, options: Options) -> anyhow::Result<()> {
    if options.rows == 0 || options.per_transaction == 0 || options.seconds == 0 {
        anyhow::bail!("--rows, --per-transaction and --seconds must be at least 1");
    }
    if options.rates.contains(&0) || options.kill_rate == 0 || options.kill_seconds < 3 {
        anyhow::bail!("--rates and --kill-rate must be at least 1, --kill-seconds at least 3");
    }
    std::fs::create_dir_all(&options.work_dir)?;
    print_settings(&options);
    let ceiling = ceiling(database_url, brokers, &options).await?;
    println!(
        "ceiling: rdkafka alone producing {} rows {:.0} rows/s; the consumer alone reading them {:.0} rows/s",
        options.rows, ceiling.produce, ceiling.consume
    );
    let mut results = Vec::new();
    for system in &options.systems {
        eprintln!("— {} —", system.name());
        let figures = measure(database_url, brokers, *system, &options).await?;
        print_figures(*system, &figures, &options);
        results.push((*system, figures));
    }
    print_comparison(&results, &options);
    println!(
        "logs, properties and offsets: {}",
        options.work_dir.display()
    );
    Ok(())
}

/// The broker's and the consumer's ceilings, rows/s.
struct Ceiling {
    produce: f64,
    consume: f64,
}

/// rdkafka alone producing the backlog's messages (as `ledger bench relay` does), then the
/// benchmark's consumer alone reading them back.
async fn ceiling(url: &str, brokers: &str, options: &Options) -> anyhow::Result<Ceiling> {
    let scratch = scratch(url).await?;
    let client = db::connect(&scratch.url, "ledger-bench").await?;
    eprintln!("ceiling: {} rows…", options.rows);
    load::backlog(&client, "drain", 0, options.rows, options.per_transaction).await?;
    let topic = format!("bench{}.raw", Uuid::new_v4().simple());
    testing::create_topics(brokers, std::slice::from_ref(&topic), 3).await?;
    let config = scratch.relay_config(String::new(), String::new(), brokers);
    // 120-byte values, as the backlog's payloads are.
    let produce = super::relay::rdkafka_alone(
        &client,
        &config,
        &topic,
        options.per_transaction,
        &[b'x'; 120],
    )
    .await?;
    let consumer = super::latency::assigned_consumer(brokers, &topic)?;
    let delivery = consume_all(consumer, options.rows).await;
    let (Some(first), Some(last)) = (delivery.first, delivery.last_new) else {
        anyhow::bail!("ceiling: the consumer read nothing back from {topic}");
    };
    // First message to last, as the systems' drains are timed.
    let consume = delivery.messages as f64 / last.duration_since(first).as_secs_f64();
    drop(client);
    scratch.drop().await?;
    Ok(Ceiling { produce, consume })
}

/// Every message of a topic, whatever its shape (the ceiling's payloads carry no sequence
/// number).
async fn consume_all(consumer: rdkafka::consumer::StreamConsumer, expected: u64) -> Delivery {
    use futures::StreamExt as _;
    let mut delivery = Delivery::default();
    let mut stream = consumer.stream();
    while delivery.messages < expected {
        match tokio::time::timeout(Duration::from_secs(30), stream.next()).await {
            Ok(Some(Ok(message))) => {
                if ra_ledger_cdc::event_router::read(&message).is_ok() {
                    let now = Instant::now();
                    delivery.first.get_or_insert(now);
                    delivery.last_new = Some(now);
                    delivery.messages += 1;
                }
            }
            _ => break,
        }
    }
    delivery
}

/// One system's figures.
#[derive(Debug)]
struct Figures {
    drain: Drain,
    steady: Vec<(u64, Steady)>,
    kill: Kill,
}

#[derive(Debug)]
struct Drain {
    rows: u64,
    /// Start of the process -> the consumer had every row.
    from_start: Duration,
    /// The consumer's first row -> its last.
    first_to_last: Duration,
    /// CPU seconds of the process between the first and the last row.
    cpu_drain: f64,
    /// CPU seconds of the process from its start to the last row.
    cpu_total: f64,
    delivery: Delivery,
}

#[derive(Debug)]
struct Steady {
    sent: u64,
    latencies: Option<Latencies>,
    delivery: Delivery,
}

#[derive(Debug)]
struct Kill {
    written: u64,
    /// The longest wait between two new events at the consumer: the kill's outage as a
    /// reader sees it (messages produced just before the kill still arrive after it).
    stall: Option<Duration>,
    delivery: Delivery,
}

/// One system: its own scratch database, slot and topics; the drain, the steady phases and
/// the kill, all on one process (restarted once, by the kill).
async fn measure(
    url: &str,
    brokers: &str,
    system: System,
    options: &Options,
) -> anyhow::Result<Figures> {
    let scratch = scratch(url).await?;
    let client = db::connect(&scratch.url, "ledger-bench").await?;
    let slot = scratch.create_slot(&client, system.name()).await?;
    let prefix = format!("bench{}.{}.", Uuid::new_v4().simple(), system.name());
    let phases = phase_types(options);
    let topics: Vec<String> = phases
        .iter()
        .map(|phase| format!("{prefix}{phase}"))
        .collect();
    testing::create_topics(brokers, &topics, 3).await?;
    let dir = options.work_dir.join(system.name());
    std::fs::create_dir_all(&dir)?;
    let launch = match system {
        System::Relay => relay_launch(&scratch, &slot, &prefix, brokers, &dir)?,
        System::Debezium => {
            debezium_launch(&scratch, &client, &slot, &prefix, brokers, &dir, options).await?
        }
    };
    eprintln!("drain: writing {} rows…", options.rows);
    load::backlog(&client, "drain", 0, options.rows, options.per_transaction).await?;
    let outcome = run_phases(&client, brokers, launch, &prefix, options).await;
    drop(client);
    scratch.drop().await?;
    outcome
}

/// The phases' aggregate types, one topic each: `drain`, `steady_<rate>`..., `kill`.
fn phase_types(options: &Options) -> Vec<String> {
    let mut phases = vec!["drain".to_owned()];
    phases.extend(options.rates.iter().map(|rate| format!("steady_{rate}")));
    phases.push("kill".to_owned());
    phases
}

/// One system under test: the scratch database's client, the broker, the system's topic
/// prefix, and its process.
struct Arena<'a> {
    client: &'a tokio_postgres::Client,
    brokers: &'a str,
    prefix: &'a str,
    peer: Peer,
}

/// One phase's load: `rate` events/s for `duration` on the topic of `aggregate_type`, from
/// sequence number `first`.
struct Load<'a> {
    aggregate_type: &'a str,
    first: i64,
    rate: u64,
    duration: Duration,
}

/// Starts the consumer of the backlog, then the system; runs every phase on it; stops it.
async fn run_phases(
    client: &tokio_postgres::Client,
    brokers: &str,
    launch: Launch,
    prefix: &str,
    options: &Options,
) -> anyhow::Result<Figures> {
    let consumer = super::latency::assigned_consumer(brokers, &format!("{prefix}drain"))?;
    let progress = Arc::new(AtomicU64::new(0));
    let reader = tokio::spawn(load::consume(
        consumer,
        options.rows,
        IDLE,
        progress.clone(),
    ));
    let started = Instant::now();
    let mut arena = Arena {
        client,
        brokers,
        prefix,
        peer: Peer::start(launch)?,
    };
    let outcome = async {
        let drain = drain(&mut arena.peer, options.rows, reader, &progress, started).await?;
        let (steady, kill) = loaded_phases(&mut arena, options).await?;
        Ok(Figures {
            drain,
            steady,
            kill,
        })
    }
    .await;
    arena.peer.stop(Duration::from_secs(30)).await?;
    outcome
}

/// The steady phases, then the kill.
async fn loaded_phases(
    arena: &mut Arena<'_>,
    options: &Options,
) -> anyhow::Result<(Vec<(u64, Steady)>, Kill)> {
    let mut first = options.rows as i64;
    let mut steady = Vec::new();
    for &rate in &options.rates {
        let aggregate_type = format!("steady_{rate}");
        let load = Load {
            aggregate_type: &aggregate_type,
            first,
            rate,
            duration: Duration::from_secs(options.seconds),
        };
        let (figures, _) = steady_phase(arena, load, None).await?;
        first += figures.sent as i64 + 1;
        steady.push((rate, figures));
    }
    let load = Load {
        aggregate_type: "kill",
        first,
        rate: options.kill_rate,
        duration: Duration::from_secs(options.kill_seconds),
    };
    let kill_after = load.duration / 3;
    let (figures, killed_at) = steady_phase(arena, load, Some(kill_after)).await?;
    let stall = killed_at.map(|_| longest_stall(&figures.delivery));
    Ok((
        steady,
        Kill {
            written: figures.sent,
            stall,
            delivery: figures.delivery,
        },
    ))
}

/// The longest time between two consecutive first receipts.
fn longest_stall(delivery: &Delivery) -> Duration {
    let mut receipts: Vec<Instant> = delivery.first_receipt.values().copied().collect();
    receipts.sort();
    receipts
        .windows(2)
        .map(|pair| pair[1].duration_since(pair[0]))
        .max()
        .unwrap_or_default()
}

/// Waits for the consumer to have every row of the backlog, reading the process's CPU at
/// the first and the last.
async fn drain(
    peer: &mut Peer,
    rows: u64,
    reader: tokio::task::JoinHandle<Delivery>,
    progress: &AtomicU64,
    started: Instant,
) -> anyhow::Result<Drain> {
    let mut cpu_first = None;
    while progress.load(Ordering::Relaxed) < rows && !reader.is_finished() {
        peer.ensure_running()?;
        if cpu_first.is_none() && progress.load(Ordering::Relaxed) > 0 {
            cpu_first = Some(peer.cpu_seconds()?);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let cpu_total = peer.cpu_seconds()?;
    let delivery = reader.await?;
    let (Some(first), Some(last)) = (delivery.first, delivery.last_new) else {
        anyhow::bail!("drain: the consumer received nothing within {IDLE:?}");
    };
    Ok(Drain {
        rows,
        from_start: last.duration_since(started),
        first_to_last: last.duration_since(first),
        cpu_drain: cpu_total - cpu_first.unwrap_or(0.0),
        cpu_total,
        delivery,
    })
}

/// The load, after one warm-up row; with `kill_after`, a kill -9 and restart of the process
/// that far into it. Returns the figures and the moment of the kill.
async fn steady_phase(
    arena: &mut Arena<'_>,
    load: Load<'_>,
    kill_after: Option<Duration>,
) -> anyhow::Result<(Steady, Option<Instant>)> {
    let Load {
        aggregate_type,
        first,
        rate,
        duration,
    } = load;
    let Arena {
        client,
        brokers,
        prefix,
        peer,
    } = arena;
    let per_tick = (rate / 100).max(1);
    let sent = per_tick * (duration.as_millis() / 10) as u64;
    let consumer =
        super::latency::assigned_consumer(brokers, &format!("{prefix}{aggregate_type}"))?;
    let progress = Arc::new(AtomicU64::new(0));
    let reader = tokio::spawn(load::consume(consumer, sent + 1, IDLE, progress.clone()));
    // Warm-up: one row through the system, the broker and the consumer's first fetch.
    load::backlog(client, aggregate_type, first, 1, 1).await?;
    let deadline = Instant::now() + IDLE;
    while progress.load(Ordering::Relaxed) == 0 {
        peer.ensure_running()?;
        anyhow::ensure!(
            Instant::now() < deadline,
            "{aggregate_type}: the warm-up row did not arrive within {IDLE:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!(
        "{aggregate_type}: {rate} events/s for {} s{}…",
        duration.as_secs(),
        if kill_after.is_some() {
            ", kill -9 a third into it"
        } else {
            ""
        }
    );
    let mut killed_at = None;
    let kill = kill_after.map(|after| {
        let killed_at = &mut killed_at;
        let peer = &mut *peer;
        (after, move || async move {
            *killed_at = Some(Instant::now());
            peer.kill_and_restart().await
        })
    });
    let committed = load::steady(client, aggregate_type, first + 1, rate, duration, kill).await?;
    let delivery = reader.await?;
    peer.ensure_running()?;
    let latencies = Latencies::from_samples(
        committed
            .at
            .iter()
            .filter_map(|(id, committed)| {
                delivery
                    .first_receipt
                    .get(id)
                    .map(|received| received.saturating_duration_since(*committed))
            })
            .collect(),
    );
    Ok((
        Steady {
            sent: committed.at.len() as u64,
            latencies,
            delivery,
        },
        killed_at,
    ))
}

fn relay_launch(
    scratch: &ScratchDatabase,
    slot: &str,
    prefix: &str,
    brokers: &str,
    dir: &Path,
) -> anyhow::Result<Launch> {
    Ok(Launch {
        program: std::env::current_exe()?,
        args: vec!["relay".into()],
        env: vec![
            ("LEDGER_DATABASE_URL".into(), scratch.url.clone()),
            ("LEDGER_RELAY_SLOT".into(), slot.into()),
            ("LEDGER_KAFKA_BROKERS".into(), brokers.into()),
            ("LEDGER_TOPIC_PREFIX".into(), prefix.into()),
            ("LEDGER_METRICS_LISTEN".into(), String::new()),
        ],
        removed: vec!["LEDGER_RELAY_CONFIG", "LEDGER_DATABASE_PASSWORD_FILE"],
        log: dir.join("relay.log"),
    })
}

/// Debezium's publication (insert-only, as the relay's) and properties files; its slot
/// is `slot`, made before the backlog is written.
async fn debezium_launch(
    scratch: &ScratchDatabase,
    client: &tokio_postgres::Client,
    slot: &str,
    prefix: &str,
    brokers: &str,
    dir: &Path,
    options: &Options,
) -> anyhow::Result<Launch> {
    const PUBLICATION: &str = "peers_debezium";
    debezium::create_publication(client, PUBLICATION).await?;
    let settings = ra_ledger_cdc::pg::config(&scratch.url, "ledger-bench")?;
    let target = ReplicationTarget::of(&settings);
    let rest_port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let setup = debezium::ConnectSetup {
        database: &target,
        brokers,
        name: "peers_debezium",
        slot,
        publication: PUBLICATION,
        topic_prefix: prefix,
        dir,
        rest_port,
    };
    let (worker, connector) = setup.write()?;
    Ok(Launch {
        program: options.connect_command.clone(),
        args: vec![
            "connect".into(),
            worker.display().to_string(),
            connector.display().to_string(),
        ],
        env: Vec::new(),
        removed: Vec::new(),
        log: dir.join("connect.log"),
    })
}

fn print_settings(options: &Options) {
    let relay = RelayConfig::default();
    println!(
        "load: drain of {} rows ({} per transaction); steady {} events/s for {} s each; kill -9 at {} events/s, {} s, a third in; 120-byte payloads, 1,000 keys, 3 partitions per topic",
        options.rows,
        options.per_transaction,
        options
            .rates
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" and "),
        options.seconds,
        options.kill_rate,
        options.kill_seconds
    );
    println!(
        "relay settings: max_in_flight {}, status_interval_ms {}, librdkafka {}",
        relay.max_in_flight,
        relay.status_interval_ms,
        relay
            .producer_settings()
            .iter()
            .filter(|(key, _)| *key != "bootstrap.servers")
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let listed = |settings: &[(&str, &str)]| {
        settings
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!("debezium worker: {}", listed(debezium::WORKER_SETTINGS));
    println!(
        "debezium connector: {}",
        listed(debezium::CONNECTOR_SETTINGS)
    );
}

fn print_figures(system: System, figures: &Figures, options: &Options) {
    let name = system.name();
    let drain = &figures.drain;
    println!(
        "{name} drain: {} rows, {:.0} rows/s first -> last row ({:.0} rows/s from the process's start); CPU {:.2} s per million rows while draining ({:.2} s with its start); {} malformed, {} duplicated",
        drain.rows,
        drain.rows as f64 / drain.first_to_last.as_secs_f64(),
        drain.rows as f64 / drain.from_start.as_secs_f64(),
        drain.cpu_drain * 1e6 / drain.rows as f64,
        drain.cpu_total * 1e6 / drain.rows as f64,
        drain.delivery.malformed,
        drain.delivery.duplicates,
    );
    for (rate, steady) in &figures.steady {
        let lost = steady
            .sent
            .saturating_sub(steady.delivery.unique().saturating_sub(1));
        println!(
            "{name} steady {rate} events/s for {} s: {} sent, {} lost; commit -> consumer {}",
            options.seconds,
            steady.sent,
            lost,
            steady.latencies.map_or_else(
                || "nothing received".to_owned(),
                |latencies| latencies.to_string()
            )
        );
    }
    let kill = &figures.kill;
    let lost = kill
        .written
        .saturating_sub(kill.delivery.unique().saturating_sub(1));
    println!(
        "{name} kill -9 at {} events/s: {} written, {} lost, {} duplicated, {} out of order per key, {} malformed; longest stall between new events {}",
        options.kill_rate,
        kill.written,
        lost,
        kill.delivery.duplicates,
        kill.delivery.out_of_order,
        kill.delivery.malformed,
        kill.stall.map_or_else(
            || "none (no kill)".to_owned(),
            |stall| format!("{:.2} s", stall.as_secs_f64())
        )
    );
}

/// The targets, as ratios of the two systems' figures.
fn print_comparison(results: &[(System, Figures)], options: &Options) {
    let of = |wanted| {
        results
            .iter()
            .find(|(system, _)| *system == wanted)
            .map(|(_, f)| f)
    };
    let (Some(relay), Some(debezium)) = (of(System::Relay), of(System::Debezium)) else {
        return;
    };
    let rate = |drain: &Drain| drain.rows as f64 / drain.first_to_last.as_secs_f64();
    let cpu = |drain: &Drain| drain.cpu_drain / drain.rows as f64;
    println!(
        "relay / debezium drain rate = {:.2} (target >= 3); CPU per event = {:.2} (target <= 0.33)",
        rate(&relay.drain) / rate(&debezium.drain),
        cpu(&relay.drain) / cpu(&debezium.drain)
    );
    if let Some(first_rate) = options.rates.first() {
        let p99 = |figures: &Figures| {
            figures
                .steady
                .iter()
                .find(|(rate, _)| rate == first_rate)
                .and_then(|(_, steady)| steady.latencies)
                .map(|latencies| latencies.p99.as_secs_f64())
        };
        if let (Some(ours), Some(theirs)) = (p99(relay), p99(debezium)) {
            println!(
                "relay / debezium p99 at {first_rate} events/s = {:.2} (target <= 0.33)",
                ours / theirs
            );
        }
    }
}
