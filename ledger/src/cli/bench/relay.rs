//! `ledger bench relay`: the relay draining an outbox backlog, against the two ceilings it
//! sits between: PostgreSQL's own `pg_recvlogical` reading the slot, and rdkafka alone
//! producing the same messages. Every row's payload is one real `AssignmentStarted`
//! envelope, so `--value-format json` measures the rendering of a real event; several
//! formats (`--value-format protobuf,confluent_protobuf`) drain the same backlog one after
//! the other in one run, side by side.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use prost::Message as _;
use ra_ledger::db;
use ra_ledger::testing::{self, ScratchDatabase};
use ra_ledger_cdc::config::{DeliveryMode, RelayConfig, position_topic};
use ra_ledger_cdc::infra::pg::ReplicationTarget;
use ra_ledger_cdc::infra::settings::local;
use ra_ledger_cdc::value_format::ValueFormat;
use ra_ledger_proto::v1;
use uuid::Uuid;

use super::scratch;

/// The backlog to drain, and the formats of its topic to drain it in.
#[derive(Debug, Clone)]
pub struct Backlog {
    /// Outbox rows.
    pub rows: u64,
    /// Rows per transaction.
    pub per_transaction: u64,
    /// The value formats of the topic (`value_formats = { assignment = ... }`), each drained
    /// in turn; the ceilings produce the first one's values.
    pub value_formats: Vec<ValueFormat>,
    /// The schema registry of a `confluent_protobuf` topic.
    pub schema_registry_url: String,
}

/// How pgoutput sends the columns: its `binary` option, or text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pgoutput {
    /// Each type's text output (a `bytea` as `\x` and two hex digits a byte).
    Text,
    /// Each type's binary send function.
    Binary,
}

impl Pgoutput {
    fn binary(self) -> bool {
        self == Self::Binary
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Binary => "binary",
        }
    }
}

/// Parses `--pgoutput`: `text`, `binary` or `both`.
pub(super) fn parse_pgoutput(text: &str) -> Result<Vec<Pgoutput>, String> {
    match text {
        "text" => Ok(vec![Pgoutput::Text]),
        "binary" => Ok(vec![Pgoutput::Binary]),
        "both" => Ok(vec![Pgoutput::Text, Pgoutput::Binary]),
        _ => Err(format!("{text:?}: expected text, binary or both")),
    }
}

/// Parses `--value-format`: one format, or several separated by commas.
pub(super) fn parse_value_formats(text: &str) -> Result<Vec<ValueFormat>, String> {
    text.split(',')
        .map(|part| {
            ValueFormat::parse(part).ok_or_else(|| {
                format!(
                    "{part:?}: expected {}, or several separated by commas",
                    ValueFormat::NAMES.join(", ")
                )
            })
        })
        .collect()
}

pub async fn run(
    database_url: &str,
    brokers: &str,
    backlog: Backlog,
    modes: Vec<DeliveryMode>,
    formats: Vec<Pgoutput>,
) -> anyhow::Result<()> {
    if backlog.rows == 0 || backlog.per_transaction == 0 {
        anyhow::bail!("--rows and --per-transaction must be at least 1");
    }
    let figures = measure(database_url, brokers, &backlog, &modes, &formats).await?;
    outln!(
        "backlog: {} outbox rows, {} per transaction, {}-byte envelopes; topic value formats {}",
        figures.rows,
        backlog.per_transaction,
        figures.payload_bytes,
        figures
            .value_bytes
            .iter()
            .map(|(format, bytes)| format!("{} ({bytes} bytes a value)", format.as_str()))
            .collect::<Vec<_>>()
            .join(", "),
    );
    for (format, nanos) in &figures.render_nanos {
        outln!(
            "rendering a value ({}, in this process, {RENDERINGS} times): {nanos:.0} ns a value",
            format.as_str()
        );
    }
    outln!(
        "broker ceiling (rdkafka alone, same messages): {:.0} rows/s",
        figures.broker_ceiling
    );
    for ceiling in &figures.slot_ceilings {
        outln!(
            "slot, alone    (pg_recvlogical to /dev/null, pgoutput {}): {:.0} rows/s; walsender {}",
            ceiling.format.as_str(),
            ceiling.rate,
            ceiling.walsender.describe(ceiling.rate)
        );
    }
    for shared in &figures.shared_ceilings {
        outln!(
            "shared ceiling (both at once, sharing the machine, pgoutput {}): slot {:.0}, broker {:.0} rows/s; {}",
            shared.format.as_str(),
            shared.slot,
            shared.broker,
            shared.cpu.describe(None),
        );
    }
    for format in &formats {
        if let Some(slot) = figures.slot_ceiling(*format) {
            outln!(
                "slot ceiling   (the faster of pg_recvlogical's two drains, pgoutput {}): {:.0} rows/s",
                format.as_str(),
                slot
            );
        }
    }
    for run in &figures.relays {
        let slot_ceiling = figures.slot_ceiling(run.format).unwrap_or(f64::INFINITY);
        let ceiling = slot_ceiling.min(figures.broker_ceiling);
        outln!(
            "relay {:<13} (slot -> Kafka, {}, pgoutput {}, values {}): {:.0} rows/s; relay / lower ceiling = {:.2} (target >= 0.90); walsender {}",
            run.delivery.as_str(),
            match run.delivery {
                DeliveryMode::AtLeastOnce => "acknowledged",
                DeliveryMode::ExactlyOnce => "committed",
            },
            run.format.as_str(),
            run.value_format.as_str(),
            run.rate,
            run.rate / ceiling,
            run.walsender.describe(run.rate),
        );
        let shared = figures
            .shared_ceilings
            .iter()
            .find(|ceiling| ceiling.format == run.format);
        if let Some(shared) = shared {
            outln!(
                "  relay / shared ceiling = {:.2}; {}",
                run.rate / shared.rate(),
                run.cpu.describe(Some(run.rate))
            );
        } else {
            outln!("  {}", run.cpu.describe(Some(run.rate)));
        }
        outln!("  {}", run.summary);
    }
    // Each run of another value format over the last run of the first format before it
    // (`protobuf,confluent_protobuf,protobuf,confluent_protobuf` pairs each framed drain
    // with the bare one just before it).
    for (index, run) in figures.relays.iter().enumerate() {
        let first = figures.relays[..index].iter().rev().find(|other| {
            other.delivery == run.delivery
                && other.format == run.format
                && other.value_format.as_str() == backlog.value_formats[0].as_str()
        });
        if let Some(first) = first
            && first.value_format.as_str() != run.value_format.as_str()
        {
            outln!(
                "{} pgoutput {}: values {} / {} (the drain before) throughput = {:.2}",
                run.delivery.as_str(),
                run.format.as_str(),
                run.value_format.as_str(),
                first.value_format.as_str(),
                run.rate / first.rate
            );
        }
    }
    for format in &formats {
        let rate = |mode| {
            figures
                .relays
                .iter()
                .find(|run| {
                    run.delivery == mode
                        && run.format == *format
                        && run.value_format.as_str() == backlog.value_formats[0].as_str()
                })
                .map(|run| run.rate)
        };
        if let (Some(at_least_once), Some(exactly_once)) = (
            rate(DeliveryMode::AtLeastOnce),
            rate(DeliveryMode::ExactlyOnce),
        ) {
            outln!(
                "pgoutput {}: exactly_once / at_least_once throughput = {:.2} (exactly once becomes the default at >= 0.80)",
                format.as_str(),
                exactly_once / at_least_once
            );
        }
    }
    Ok(())
}

/// One relay drain.
#[derive(Debug, Clone)]
struct RelayRun {
    delivery: DeliveryMode,
    format: Pgoutput,
    value_format: ValueFormat,
    /// Rows/s.
    rate: f64,
    /// How it delivered: exactly once's Kafka transactions, at least once's idle flushes.
    summary: String,
    /// Where the walsender's time went during the drain: on a CPU, waiting for one, and
    /// waiting for the relay.
    walsender: WalsenderTime,
    /// The machine's and the relay's CPU during the drain.
    cpu: CpuUse,
}

/// `pg_recvlogical` alone draining the slot, for one format. Not PostgreSQL's ceiling by
/// itself: alone on a core of its own, `pg_recvlogical` sleeps as soon as its socket is
/// empty, so the two wake each other every few messages. On 2 cores (2026-12-03) that
/// ping-pong kept the walsender at one core, never waiting for a CPU or for its client, for
/// 120,000-150,000 rows/s at 6.6-7.5 µs a row, while the same slot drained at 187,000 rows/s
/// beside a process that only burned CPU, and the walsender cost 2.8-3.3 µs a row under the
/// relay. The slot's ceiling is the faster of this and the shared drain
/// ([`RelayFigures::slot_ceiling`]).
#[derive(Debug, Clone)]
struct SlotCeiling {
    format: Pgoutput,
    /// Rows/s.
    rate: f64,
    walsender: WalsenderTime,
}

/// `pg_recvlogical` and rdkafka alone draining at the same time, one format: the two ends
/// sharing the machine, as they do under the relay.
#[derive(Debug, Clone)]
struct SharedCeiling {
    format: Pgoutput,
    /// `pg_recvlogical`'s rows/s.
    slot: f64,
    /// rdkafka's rows/s.
    broker: f64,
    cpu: CpuUse,
}

impl SharedCeiling {
    /// The lower of the two: what a relay that costs nothing could reach on this machine
    /// (a little above it, as the one that ends first leaves the other the machine).
    fn rate(&self) -> f64 {
        self.slot.min(self.broker)
    }
}

/// Figures of the relay benchmark.
#[derive(Debug, Clone)]
struct RelayFigures {
    /// Outbox rows in the backlog.
    rows: u64,
    /// `pg_recvlogical` draining the backlog to /dev/null: the slot's ceiling, per format.
    slot_ceilings: Vec<SlotCeiling>,
    /// rdkafka alone producing the same messages: the broker's ceiling, rows/s.
    broker_ceiling: f64,
    /// Both ends at once, per format.
    shared_ceilings: Vec<SharedCeiling>,
    /// The relay draining the backlog to the broker, in each mode.
    relays: Vec<RelayRun>,
    /// Size of each row's payload (the protobuf envelope).
    payload_bytes: usize,
    /// Size of each published value, in each of the topic's formats.
    value_bytes: Vec<(ValueFormat, usize)>,
    /// What rendering one value costs in each format, alone ([`render_nanos`]).
    render_nanos: Vec<(ValueFormat, f64)>,
}

/// How many values [`render_nanos`] renders.
const RENDERINGS: u32 = 1_000_000;

/// Nanoseconds to render `payload` in `format`, over [`RENDERINGS`] renderings in a row: the
/// part of the relay's work a format changes, apart from the drains, whose spread on a
/// shared 2-core machine is wider than it.
fn render_nanos(format: ValueFormat, payload: &bytes::Bytes) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut bytes = 0usize;
    for _ in 0..RENDERINGS {
        bytes += std::hint::black_box(format.render(std::hint::black_box(payload))?).len();
    }
    std::hint::black_box(bytes);
    Ok(started.elapsed().as_nanos() as f64 / f64::from(RENDERINGS))
}

impl RelayFigures {
    /// What the slot can be drained at in `format`: the faster of `pg_recvlogical`'s drain
    /// alone and its drain beside rdkafka (each only shows what it reached, so the faster is
    /// the better bound; see [`SlotCeiling`] for why alone is not always faster).
    fn slot_ceiling(&self, format: Pgoutput) -> Option<f64> {
        let alone = self
            .slot_ceilings
            .iter()
            .filter(|ceiling| ceiling.format == format)
            .map(|ceiling| ceiling.rate);
        let shared = self
            .shared_ceilings
            .iter()
            .filter(|ceiling| ceiling.format == format)
            .map(|ceiling| ceiling.slot);
        alone.chain(shared).reduce(f64::max)
    }
}

/// Drains `backlog` through rdkafka alone, through the relay (each mode in each pgoutput
/// format) and through `pg_recvlogical` (each format), in one run.
async fn measure(
    url: &str,
    brokers: &str,
    backlog: &Backlog,
    modes: &[DeliveryMode],
    formats: &[Pgoutput],
) -> anyhow::Result<RelayFigures> {
    let payload = bytes::Bytes::from(sample_envelope().encode_to_vec());
    let scratch = scratch(url).await?;
    let client = db::connect(&scratch.url, "ledger-bench").await?;
    let mut recvlogical_slots = Vec::new();
    let mut shared_slots = Vec::new();
    for format in formats {
        let purpose = format!("recv_{}", format.as_str());
        recvlogical_slots.push((*format, scratch.create_slot(&client, &purpose).await?));
        let purpose = format!("both_{}", format.as_str());
        shared_slots.push((*format, scratch.create_slot(&client, &purpose).await?));
    }
    let prefix = super::topic_prefix(brokers, "");
    // A slot and topics per mode and format, all made before the backlog so each slot
    // holds it all.
    let mut configs = Vec::new();
    for (index, value_format) in backlog.value_formats.iter().enumerate() {
        // A format given again (`protobuf,confluent_protobuf,protobuf,confluent_protobuf`,
        // alternating runs on a noisy machine) gets slots and topics of its own.
        let round = backlog.value_formats[..index]
            .iter()
            .filter(|earlier| *earlier == value_format)
            .count();
        for format in formats {
            for delivery in modes {
                // Short: a slot name has at most 63 characters, the scratch name takes 45.
                let mode = match (delivery, format) {
                    (DeliveryMode::AtLeastOnce, Pgoutput::Text) => "alo_text",
                    (DeliveryMode::AtLeastOnce, Pgoutput::Binary) => "alo_bin",
                    (DeliveryMode::ExactlyOnce, Pgoutput::Text) => "eos_text",
                    (DeliveryMode::ExactlyOnce, Pgoutput::Binary) => "eos_bin",
                };
                let values = match value_format {
                    ValueFormat::Protobuf => "pb",
                    ValueFormat::Json => "js",
                    ValueFormat::ConfluentProtobuf { .. } => "cf",
                };
                let purpose = match round {
                    0 => format!("{mode}_{values}"),
                    round => format!("{mode}_{values}{round}"),
                };
                let slot = scratch.create_slot(&client, &purpose).await?;
                let topic_prefix = format!("{prefix}{purpose}.");
                testing::create_topics(brokers, &[format!("{topic_prefix}assignment")], 3).await?;
                testing::create_topics(brokers, &[position_topic(&topic_prefix)], 1).await?;
                configs.push((
                    *format,
                    RelayConfig {
                        delivery: *delivery,
                        pgoutput_binary: format.binary(),
                        value_formats: BTreeMap::from([("assignment".into(), *value_format)]),
                        schema_registry_url: value_format
                            .is_framed()
                            .then(|| backlog.schema_registry_url.clone()),
                        ..scratch.relay_config(slot, topic_prefix, brokers)
                    },
                ));
            }
        }
    }
    let per_transaction = backlog.per_transaction;
    let backlog = insert_backlog(&client, backlog.clone(), &payload).await?;
    let raw_topic = format!("{prefix}raw.assignment");
    testing::create_topics(brokers, std::slice::from_ref(&raw_topic), 3).await?;
    let baseline = configs
        .first()
        .map(|(_, config)| config.clone())
        .ok_or_else(|| anyhow::anyhow!("no delivery mode to measure"))?;
    // Each format's value, a framed one with the id its subject gets (registered here as
    // the relay registers it at start, and found there again by the relay).
    let mut value_bytes = Vec::new();
    let mut render_costs = Vec::new();
    let mut value = bytes::Bytes::new();
    for (_, config) in &configs {
        let registered = ra_ledger_cdc::registry::register_topics(config.clone()).await?;
        let format = registered.value_format("assignment");
        if value_bytes
            .iter()
            .any(|(seen, _): &(ValueFormat, usize)| seen.as_str() == format.as_str())
        {
            continue;
        }
        let rendered = format.render(&payload)?;
        if value_bytes.is_empty() {
            value = rendered.clone();
        }
        value_bytes.push((format, rendered.len()));
        render_costs.push((format, render_nanos(format, &payload)?));
    }
    // The ceiling produces the values the relay publishes, in the topic's format.
    let keys = backlog_keys(&client).await?;
    let broker_ceiling =
        rdkafka_alone(&baseline, &raw_topic, &keys, per_transaction, &value).await?;
    let mut relays = Vec::new();
    for (format, config) in configs {
        let delivery = config.delivery;
        let slot = config.slot.clone();
        let sampler = WalsenderSampler::start(&scratch.url, &slot).await?;
        let clock = CpuClock::start();
        let value_format = config.value_format("assignment");
        let (rate, summary) = relay_drain(config, backlog.rows).await?;
        relays.push(RelayRun {
            delivery,
            format,
            value_format,
            rate,
            summary,
            cpu: clock.finish(),
            walsender: sampler.finish().await,
        });
    }
    let mut shared_ceilings = Vec::new();
    for (format, slot) in shared_slots {
        let clock = CpuClock::start();
        let (slot, broker) = tokio::try_join!(
            recvlogical_drain(&scratch, &slot, &backlog, format),
            rdkafka_alone(&baseline, &raw_topic, &keys, per_transaction, &value),
        )?;
        shared_ceilings.push(SharedCeiling {
            format,
            slot,
            broker,
            cpu: clock.finish(),
        });
    }
    // The slot itself, read by PostgreSQL's own client. It runs last, so the relay, not
    // this ceiling, pays for any cold start of decoding.
    let mut slot_ceilings = Vec::new();
    for (format, slot) in recvlogical_slots {
        let sampler = WalsenderSampler::start(&scratch.url, &slot).await?;
        let rate = recvlogical_drain(&scratch, &slot, &backlog, format).await?;
        slot_ceilings.push(SlotCeiling {
            format,
            rate,
            walsender: sampler.finish().await,
        });
    }
    drop(client);
    scratch.drop().await?;
    Ok(RelayFigures {
        rows: backlog.rows,
        slot_ceilings,
        broker_ceiling,
        shared_ceilings,
        relays,
        payload_bytes: payload.len(),
        value_bytes,
        render_nanos: render_costs,
    })
}

/// The walsender over a drain: its CPU, the time it was ready to run and waited for a CPU,
/// from `/proc/<pid>/schedstat` (the bench runs beside the stack's PostgreSQL), and how
/// often it waited for its client to read, from its wait event in `pg_stat_activity`.
///
/// Together they say which end a drain waits on. A walsender at one core is not proof that
/// the slot is at its ceiling: its CPU a row says how much of that core went into decoding
/// and how much into waking for its client ([`SlotCeiling`]). Under the relay on 2 cores
/// (2026-12-03) the walsender ran half a core, waited 0.20-0.27 of the drain for a CPU the
/// other processes held, and 0.09-0.15 for the relay to read what it had sent: the
/// machine's CPU, not PostgreSQL's decoding, set the pace.
#[derive(Debug, Clone, Copy, Default)]
struct WalsenderTime {
    /// CPU seconds per wall second; `None` when the walsender could not be read.
    cores: Option<f64>,
    /// Seconds per wall second it was ready to run and waited for a CPU.
    waiting_for_cpu: Option<f64>,
    /// The share of samples in which it waited for its client to read
    /// (`WalSenderWriteData`); `None` without samples.
    waiting_for_client: Option<f64>,
}

impl WalsenderTime {
    /// Its cores and its CPU a row at `rate` rows/s, and what it waited for.
    fn describe(&self, rate: f64) -> String {
        let cpu = match self.cores {
            Some(cores) if rate > 0.0 => {
                format!("{cores:.2} cores, {:.1} µs CPU a row", cores / rate * 1e6)
            }
            Some(cores) => format!("{cores:.2} cores"),
            None => "CPU not read (is PostgreSQL on this machine?)".to_owned(),
        };
        let waits: Vec<String> = [
            self.waiting_for_cpu
                .map(|share| format!("{share:.2} for a CPU")),
            self.waiting_for_client
                .map(|share| format!("{share:.2} for its client to read")),
        ]
        .into_iter()
        .flatten()
        .collect();
        if waits.is_empty() {
            cpu
        } else {
            format!("{cpu}; of the drain, waited {}", waits.join(" and "))
        }
    }
}

/// Samples the walsender of a slot every 20 ms once a client holds it, from its first
/// sight to its last: a drain's walsender exits when its client is done, so the last sample
/// before that stands for the end.
struct WalsenderSampler {
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<Option<WalsenderSamples>>,
}

/// What [`WalsenderSampler`] saw.
struct WalsenderSamples {
    /// Its scheduler times at the first and the last sample, and when they were read.
    first: Option<(SchedTimes, Instant)>,
    last: Option<(SchedTimes, Instant)>,
    /// Samples of its wait event, and those waiting for its client.
    events: u32,
    writing: u32,
}

impl WalsenderSampler {
    async fn start(url: &str, slot: &str) -> anyhow::Result<Self> {
        let client = db::connect(url, "ledger-bench-walsender").await?;
        let slot = slot.to_owned();
        let stop = tokio_util::sync::CancellationToken::new();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            let pid = loop {
                let pid: Option<i32> = client
                    .query_opt(
                        "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
                        &[&slot],
                    )
                    .await
                    .ok()
                    .flatten()
                    .and_then(|row| row.get(0));
                if let Some(pid) = pid {
                    break pid;
                }
                if Instant::now() > deadline || stopped.is_cancelled() {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            // A PostgreSQL on another machine has its own pids: read only a local walsender.
            let local = u32::try_from(pid).ok().filter(|pid| is_walsender(*pid));
            let times = || Some((local.and_then(sched_times)?, Instant::now()));
            let mut samples = WalsenderSamples {
                first: times(),
                last: None,
                events: 0,
                writing: 0,
            };
            loop {
                // One statement, one snapshot: each reads the wait event afresh.
                let event = client
                    .query_opt(
                        "SELECT coalesce(wait_event, '') FROM pg_stat_activity WHERE pid = $1",
                        &[&pid],
                    )
                    .await
                    .ok()
                    .flatten();
                let Some(event) = event else { break };
                let event: String = event.get(0);
                samples.events += 1;
                samples.writing += u32::from(event == "WalSenderWriteData");
                samples.last = times().or(samples.last);
                tokio::select! {
                    () = stopped.cancelled() => break,
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
            }
            Some(samples)
        });
        Ok(Self { stop, task })
    }

    /// The walsender from its first sample to its last.
    async fn finish(self) -> WalsenderTime {
        self.stop.cancel();
        let Ok(Some(samples)) = self.task.await else {
            return WalsenderTime::default();
        };
        let waiting_for_client =
            (samples.events > 0).then(|| f64::from(samples.writing) / f64::from(samples.events));
        let (Some((first, from)), Some((last, to))) = (samples.first, samples.last) else {
            return WalsenderTime {
                waiting_for_client,
                ..WalsenderTime::default()
            };
        };
        let seconds = to.duration_since(from).as_secs_f64();
        let share = |nanos: u64| (seconds > 0.0).then(|| nanos as f64 / 1e9 / seconds);
        WalsenderTime {
            cores: share(last.running.saturating_sub(first.running)),
            waiting_for_cpu: share(last.waiting.saturating_sub(first.waiting)),
            waiting_for_client,
        }
    }
}

/// A process's time on a CPU and ready to run but waiting for one, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SchedTimes {
    running: u64,
    waiting: u64,
}

/// Whether `pid` is a walsender process on this machine.
fn is_walsender(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|title| walsender_title(&title))
}

/// Whether a process title (`/proc/<pid>/cmdline`) is a walsender's: PostgreSQL titles it
/// `postgres: [<cluster_name>: ]walsender <user> <client> <command>`.
fn walsender_title(title: &[u8]) -> bool {
    let Some(rest) = title.strip_prefix(b"postgres: ") else {
        return false;
    };
    let word = b"walsender ";
    rest.windows(word.len()).any(|window| window == word)
}

/// [`SchedTimes`] of `pid`, from `/proc/<pid>/schedstat`.
fn sched_times(pid: u32) -> Option<SchedTimes> {
    parse_schedstat(&std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?)
}

/// [`SchedTimes`] of the text of a `/proc/<pid>/schedstat`: time on a CPU, time waiting in
/// the run queue, time slices.
fn parse_schedstat(text: &str) -> Option<SchedTimes> {
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    Some(SchedTimes {
        running: fields.next()?.ok()?,
        waiting: fields.next()?.ok()?,
    })
}

/// The machine's busy cores and this process's over a stretch (the relay runs in this
/// process), from `/proc/stat` and `/proc/self/stat`. With every core busy, a drain is bound
/// by the CPU that PostgreSQL, the broker and the relay share, not by either end alone.
#[derive(Debug, Clone, Copy, Default)]
struct CpuUse {
    /// Busy cores of the machine; `None` when `/proc/stat` could not be read.
    machine: Option<f64>,
    /// The machine's cores.
    cores: usize,
    /// This process's cores.
    process: Option<f64>,
}

impl CpuUse {
    /// What it says; with `relay_rate` (rows/s, when this process ran the relay), the
    /// relay's cores and CPU a row too.
    fn describe(&self, relay_rate: Option<f64>) -> String {
        let machine = match self.machine {
            Some(busy) => format!("machine {busy:.2} of {} cores busy", self.cores),
            None => "machine CPU not read".to_owned(),
        };
        match (self.process, relay_rate) {
            (Some(process), Some(rate)) if rate > 0.0 => format!(
                "{machine}; relay {process:.2} cores, {:.1} µs CPU a row",
                process / rate * 1e6
            ),
            _ => machine,
        }
    }
}

/// Where [`CpuUse`] starts counting.
struct CpuClock {
    machine: Option<MachineTicks>,
    process: Option<u64>,
    at: Instant,
}

impl CpuClock {
    fn start() -> Self {
        Self {
            machine: machine_ticks(),
            process: cpu_ticks(std::process::id()),
            at: Instant::now(),
        }
    }

    fn finish(self) -> CpuUse {
        let seconds = self.at.elapsed().as_secs_f64();
        let end = machine_ticks();
        // /proc counts in USER_HZ, 100 a second on Linux.
        let cores = |ticks: u64| (seconds > 0.0).then(|| ticks as f64 / 100.0 / seconds);
        let machine = match (self.machine, end) {
            (Some(from), Some(to)) => cores(to.busy.saturating_sub(from.busy)),
            _ => None,
        };
        let process = match (self.process, cpu_ticks(std::process::id())) {
            (Some(from), Some(to)) => cores(to.saturating_sub(from)),
            _ => None,
        };
        CpuUse {
            machine,
            cores: end.map_or(0, |ticks| ticks.cores),
            process,
        }
    }
}

/// The machine's busy ticks, all cores together, and how many cores it has.
#[derive(Debug, Clone, Copy)]
struct MachineTicks {
    busy: u64,
    cores: usize,
}

/// From `/proc/stat`: busy is every state but idle and iowait (and guest time, which user
/// time already counts).
fn machine_ticks() -> Option<MachineTicks> {
    parse_machine_ticks(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// [`machine_ticks`] of the text of `/proc/stat`.
fn parse_machine_ticks(stat: &str) -> Option<MachineTicks> {
    let total = stat.lines().next()?.strip_prefix("cpu ")?;
    let ticks: Vec<u64> = total
        .split_whitespace()
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    let busy = ticks
        .iter()
        .take(8)
        .enumerate()
        .filter(|(state, _)| !matches!(state, 3 | 4))
        .map(|(_, ticks)| ticks)
        .sum();
    let cores = stat
        .lines()
        .filter(|line| {
            line.starts_with("cpu") && line.as_bytes().get(3).is_some_and(u8::is_ascii_digit)
        })
        .count();
    Some(MachineTicks { busy, cores })
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may hold spaces: fields count from after its closing parenthesis.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// An `AssignmentStarted` envelope as the ledger writes one: UUIDs in text form, a business
/// and jurisdiction key, a correlation and a causation.
fn sample_envelope() -> v1::Envelope {
    let (business, assignment) = (Uuid::now_v7(), Uuid::now_v7());
    let micros = chrono::Utc::now().timestamp_micros();
    v1::Envelope {
        event_id: Uuid::now_v7().to_string(),
        stream: format!("assignment-{business}-TX"),
        stream_version: 1,
        event_type: "AssignmentStarted".into(),
        schema_version: 1,
        recorded_at_micros: micros,
        effective_at_micros: micros,
        actor: "bench".into(),
        correlation_id: Uuid::now_v7().to_string(),
        causation_id: Uuid::now_v7().to_string(),
        event: Some(v1::envelope::Event::AssignmentStarted(
            v1::AssignmentStarted {
                assignment_id: assignment.to_string(),
                business_id: business.to_string(),
                jurisdiction: "TX".into(),
                contact_id: Uuid::now_v7().to_string(),
                replaces: String::new(),
            },
        )),
    }
}

/// The inserted backlog: how many rows, and the WAL position just after them.
struct Inserted {
    rows: u64,
    end_lsn: String,
}

async fn insert_backlog(
    client: &tokio_postgres::Client,
    backlog: Backlog,
    payload: &[u8],
) -> anyhow::Result<Inserted> {
    let (rows, per_transaction) = (backlog.rows, backlog.per_transaction);
    eprintln!("inserting {rows} outbox rows, {per_transaction} per transaction…");
    for _ in 0..rows.div_ceil(per_transaction) {
        client
            .execute(
                include_str!("../../sql/bench/outbox_envelopes.sql"),
                &[&(per_transaction as i32), &"AssignmentStarted", &payload],
            )
            .await?;
    }
    let end_lsn: String = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await?
        .get(0);
    let total: i64 = client
        .query_one("SELECT count(*) FROM outbox", &[])
        .await?
        .get(0);
    Ok(Inserted {
        rows: total as u64,
        end_lsn,
    })
}

/// The broker's ceiling: the same messages (`value` each) produced by rdkafka alone, with
/// the relay's producer settings and in-flight bound, and a producer that does nothing
/// with Kafka's answers but count them. Rows/s.
pub(super) async fn rdkafka_alone(
    relay_config: &RelayConfig,
    topic: &str,
    keys: &[(Uuid, String)],
    per_transaction: u64,
    value: &[u8],
) -> anyhow::Result<f64> {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{BaseRecord, Producer as _, ThreadedProducer};
    let producer: ThreadedProducer<Counted> = relay_config
        .kafka_settings()
        .client_config()?
        .create_with_context(Counted::default())?;
    let counted = producer.context().clone();
    let started = Instant::now();
    for (index, (event_id, key)) in keys.iter().enumerate() {
        let id = event_id.to_string();
        let ordinal = (index % per_transaction as usize).to_string();
        let header = |key, value: &'static [u8]| Header {
            key,
            value: Some(value),
        };
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "id",
                value: Some(id.as_bytes()),
            })
            .insert(header("event_type", b"AssignmentStarted"))
            .insert(header("commit_lsn", b"0/16B3748"))
            .insert(header("txid", b"742"))
            .insert(header("commit_timestamp", b"2026-11-30T00:00:00.000000Z"))
            .insert(Header {
                key: "ordinal",
                value: Some(ordinal.as_bytes()),
            });
        let record = BaseRecord::to(topic)
            .key(key.as_bytes())
            .payload(value)
            .headers(headers);
        producer.send(record).map_err(|(error, _)| error)?;
        // Same bound as the relay's max_in_flight.
        counted
            .wait_until((index + 1).saturating_sub(relay_config.max_in_flight))
            .await;
    }
    counted.wait_until(keys.len()).await;
    if let Some(error) = counted.failure.lock().expect("not poisoned").take() {
        return Err(error.into());
    }
    Ok(keys.len() as f64 / started.elapsed().as_secs_f64())
}

/// A producer context that counts Kafka's answers and keeps the first failure.
#[derive(Default)]
struct Counted {
    answered: std::sync::atomic::AtomicUsize,
    failure: std::sync::Mutex<Option<rdkafka::error::KafkaError>>,
    arrival: tokio::sync::Notify,
}

impl Counted {
    /// Waits until Kafka answered `count` messages.
    async fn wait_until(&self, count: usize) {
        while self.answered.load(std::sync::atomic::Ordering::Acquire) < count {
            self.arrival.notified().await;
        }
    }
}

impl rdkafka::ClientContext for Counted {}

impl rdkafka::producer::ProducerContext for Counted {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, (): ()) {
        if let Err((error, _)) = result {
            self.failure
                .lock()
                .expect("not poisoned")
                .get_or_insert_with(|| error.clone());
        }
        self.answered
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        self.arrival.notify_one();
    }
}

/// The backlog's event ids and keys, in outbox order, for [`rdkafka_alone`].
pub(super) async fn backlog_keys(
    client: &tokio_postgres::Client,
) -> anyhow::Result<Vec<(Uuid, String)>> {
    Ok(client
        .query("SELECT event_id, aggregate_id FROM outbox ORDER BY id", &[])
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect())
}

/// The relay draining the backlog until Kafka acknowledged (exactly once: committed) every
/// row. Rows/s, and how it delivered ([`super::delivery_summary`]).
async fn relay_drain(relay_config: RelayConfig, rows: u64) -> anyhow::Result<(f64, String)> {
    let delivery = relay_config.delivery;
    let metrics = std::sync::Arc::new(ra_ledger_cdc::metrics::RelayMetrics::default());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let started = Instant::now();
    let task = tokio::spawn(ra_ledger_cdc::relay::run(
        relay_config,
        metrics.clone(),
        shutdown.clone(),
    ));
    while metrics.events_published() < rows {
        anyhow::ensure!(!task.is_finished(), "the relay stopped early");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rate = rows as f64 / started.elapsed().as_secs_f64();
    shutdown.cancel();
    task.await??;
    Ok((rate, super::delivery_summary(delivery, &metrics)))
}

/// The slot's ceiling: `pg_recvlogical` reading the backlog to /dev/null. Rows/s.
async fn recvlogical_drain(
    scratch: &ScratchDatabase,
    slot: &str,
    backlog: &Inserted,
    format: Pgoutput,
) -> anyhow::Result<f64> {
    let settings = ra_ledger_cdc::infra::pg::config(&scratch.url, "ledger-bench")?;
    let target = ReplicationTarget::of(&settings);
    let started = Instant::now();
    let status = tokio::process::Command::new(pg_recvlogical()?)
        .args(["-h", &target.host, "-p", &target.port.to_string()])
        .args(["-U", &target.user, "-d", &target.database])
        .args(["--slot", slot, "--start", "--no-loop", "-f", "/dev/null"])
        .args(["-E", &backlog.end_lsn])
        .args(["-o", "proto_version=1", "-o"])
        .arg(format!("publication_names={}", local::PUBLICATION))
        .args(["-o", &format!("binary={}", format.binary())])
        .env("PGPASSWORD", &target.password)
        .status()
        .await?;
    anyhow::ensure!(status.success(), "pg_recvlogical failed: {status}");
    Ok(backlog.rows as f64 / started.elapsed().as_secs_f64())
}

fn pg_recvlogical() -> anyhow::Result<std::path::PathBuf> {
    let mut candidates: Vec<std::path::PathBuf> = std::fs::read_dir("/usr/lib/postgresql")?
        .flatten()
        .map(|entry| entry.path().join("bin/pg_recvlogical"))
        .filter(|path| path.exists())
        .collect();
    candidates.sort();
    candidates
        .pop()
        .ok_or_else(|| anyhow::anyhow!("pg_recvlogical not found under /usr/lib/postgresql"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_ceiling_is_the_faster_of_the_two_drains_of_its_format() {
        let alone = |format, rate| SlotCeiling {
            format,
            rate,
            walsender: WalsenderTime::default(),
        };
        let shared = |format, slot| SharedCeiling {
            format,
            slot,
            broker: 1.0,
            cpu: CpuUse::default(),
        };
        let figures = RelayFigures {
            rows: 1,
            slot_ceilings: vec![alone(Pgoutput::Binary, 130.0), alone(Pgoutput::Text, 90.0)],
            broker_ceiling: 200.0,
            shared_ceilings: vec![
                shared(Pgoutput::Binary, 190.0),
                shared(Pgoutput::Text, 80.0),
            ],
            relays: Vec::new(),
            payload_bytes: 1,
            value_bytes: Vec::new(),
            render_nanos: Vec::new(),
        };
        assert_eq!(figures.slot_ceiling(Pgoutput::Binary), Some(190.0));
        assert_eq!(figures.slot_ceiling(Pgoutput::Text), Some(90.0));
        let none = RelayFigures {
            slot_ceilings: Vec::new(),
            shared_ceilings: Vec::new(),
            ..figures
        };
        assert_eq!(none.slot_ceiling(Pgoutput::Binary), None);
    }

    #[test]
    fn the_walsender_is_described_by_its_cores_its_cpu_a_row_and_its_waits() {
        let cpu = WalsenderTime {
            cores: Some(0.5),
            ..WalsenderTime::default()
        };
        assert_eq!(cpu.describe(100_000.0), "0.50 cores, 5.0 µs CPU a row");
        assert_eq!(cpu.describe(0.0), "0.50 cores");
        assert!(WalsenderTime::default().describe(1.0).contains("not read"));
        let waiting = WalsenderTime {
            cores: Some(0.5),
            waiting_for_cpu: Some(0.2),
            waiting_for_client: Some(0.15),
        };
        assert_eq!(
            waiting.describe(100_000.0),
            "0.50 cores, 5.0 µs CPU a row; of the drain, waited 0.20 for a CPU and 0.15 for its client to read"
        );
        let remote = WalsenderTime {
            waiting_for_client: Some(0.05),
            ..WalsenderTime::default()
        };
        assert_eq!(
            remote.describe(1.0),
            "CPU not read (is PostgreSQL on this machine?); of the drain, waited 0.05 for its client to read"
        );
    }

    #[test]
    fn only_a_walsender_is_read_as_one() {
        assert!(walsender_title(
            b"postgres: walsender ledger 127.0.0.1(56344) START_REPLICATION\0\0"
        ));
        assert!(walsender_title(
            b"postgres: 15/main: walsender ledger [local] idle\0"
        ));
        assert!(!walsender_title(b"postgres: checkpointer \0"));
        assert!(!walsender_title(b"/usr/bin/walsender-lookalike\0"));
        assert!(
            !is_walsender(std::process::id()),
            "this test is no walsender"
        );
        assert!(!is_walsender(u32::MAX), "no such process");
    }

    #[test]
    fn schedstat_gives_the_time_on_a_cpu_and_the_time_waiting_for_one() {
        assert_eq!(
            parse_schedstat("1462879794 404313075 871\n"),
            Some(SchedTimes {
                running: 1_462_879_794,
                waiting: 404_313_075,
            })
        );
        assert_eq!(parse_schedstat("12\n"), None);
        assert_eq!(parse_schedstat("x 1 2\n"), None);
    }

    #[test]
    fn the_machine_is_busy_in_every_state_but_idle_and_iowait() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let stat = "cpu  100 20 30 4000 50 6 7 8 90 10\n\
                    cpu0 50 10 15 2000 25 3 3 4 45 5\n\
                    cpu1 50 10 15 2000 25 3 4 4 45 5\n\
                    intr 12345\n\
                    cpufreq 1\n";
        let ticks = parse_machine_ticks(stat).unwrap();
        assert_eq!(ticks.busy, 100 + 20 + 30 + 6 + 7 + 8);
        assert_eq!(ticks.cores, 2);
        assert!(parse_machine_ticks("intr 1\n").is_none());
        assert!(parse_machine_ticks("cpu  1 x 3\n").is_none());
    }
}
