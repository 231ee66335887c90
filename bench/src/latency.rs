//! `ledger-bench latency`: commit -> consumer receipt under a steady load through the relay.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use ra_ledger::db;
use ra_ledger_cdc::config::{DeliveryMode, RelayConfig, position_topic};
use ra_ledger_cdc::value_format::ValueFormat;
use rdkafka::Message as _;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Headers as _;
use uuid::Uuid;

use crate::figures::{Latencies, delivery_summary};
use crate::scratch;

/// One relay setting to measure: its delivery mode, and the latency settings under test.
#[derive(Debug, Clone)]
pub(super) struct Variant {
    /// The delivery mode.
    pub(super) delivery: DeliveryMode,
    /// `linger.ms`, when not the relay's default.
    pub(super) linger_ms: Option<u64>,
    /// `flush_when_idle`, when not the relay's default.
    pub(super) flush_when_idle: Option<bool>,
    /// The topic's value format.
    pub(super) value_format: ValueFormat,
    /// The schema registry of a framed topic.
    pub(super) schema_registry_url: Option<String>,
}

impl Variant {
    /// `delivery` with the relay's defaults.
    pub(super) fn of(delivery: DeliveryMode) -> Self {
        Self {
            delivery,
            linger_ms: None,
            flush_when_idle: None,
            value_format: ValueFormat::Protobuf,
            schema_registry_url: None,
        }
    }

    /// Every combination of `modes` and the settings under test (the defaults where none),
    /// each value format in turn, framed ones registered in `registry`.
    pub(super) fn every(
        modes: Vec<DeliveryMode>,
        lingers: Option<Vec<u64>>,
        flushes: Option<Vec<bool>>,
        formats: &[ValueFormat],
        registry: &str,
    ) -> Vec<Self> {
        let lingers: Vec<Option<u64>> = lingers.map_or(vec![None], |lingers| {
            lingers.into_iter().map(Some).collect()
        });
        let flushes: Vec<Option<bool>> = flushes.map_or(vec![None], |flushes| {
            flushes.into_iter().map(Some).collect()
        });
        let mut variants = Vec::new();
        for delivery in modes {
            for linger_ms in &lingers {
                for flush_when_idle in &flushes {
                    for value_format in formats {
                        variants.push(Self {
                            delivery,
                            linger_ms: *linger_ms,
                            flush_when_idle: *flush_when_idle,
                            value_format: *value_format,
                            schema_registry_url: value_format
                                .is_framed()
                                .then(|| registry.to_owned()),
                        });
                    }
                }
            }
        }
        variants
    }

    fn apply(&self, config: &mut RelayConfig) {
        config.value_formats = BTreeMap::from([("assignment".into(), self.value_format)]);
        config
            .schema_registry_url
            .clone_from(&self.schema_registry_url);
        if let Some(linger) = self.linger_ms {
            config.kafka.insert("linger.ms".into(), linger.to_string());
        }
        if let Some(flush) = self.flush_when_idle {
            config.flush_when_idle = flush;
        }
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut config = RelayConfig::default();
        self.apply(&mut config);
        write!(
            f,
            "{} (linger.ms {}, flush_when_idle {}, values {})",
            self.delivery.as_str(),
            config.linger_ms(),
            config.flush_when_idle,
            self.value_format.as_str()
        )
    }
}

/// Parses `--linger-ms`: a comma-separated list of milliseconds.
pub(super) fn parse_lingers(text: &str) -> Result<Vec<u64>, String> {
    text.split(',')
        .map(|part| {
            part.trim()
                .parse()
                .map_err(|_| format!("{part:?}: expected milliseconds, e.g. 0,1,2,5,10"))
        })
        .collect()
}

/// Parses `--flush-when-idle`: on, off or both.
pub(super) fn parse_flush(text: &str) -> Result<Vec<bool>, String> {
    match text {
        "on" => Ok(vec![true]),
        "off" => Ok(vec![false]),
        "both" => Ok(vec![false, true]),
        _ => Err(format!("{text:?}: expected on, off or both")),
    }
}

/// The load of a run: its rates, each measured `runs` times, for `seconds` each.
#[derive(Debug, Clone)]
pub(super) struct Load {
    /// Events per second, each in turn.
    pub(super) rates: Vec<u64>,
    /// Seconds of each measurement.
    pub(super) seconds: u64,
    /// Measurements of every variant at each rate, the variants alternating.
    pub(super) runs: usize,
}

/// Parses `--rate`: events per second, or several separated by commas.
pub(super) fn parse_rates(text: &str) -> Result<Vec<u64>, String> {
    text.split(',')
        .map(|part| match part.trim().parse() {
            Ok(rate) if rate > 0 => Ok(rate),
            _ => Err(format!(
                "{part:?}: expected events per second above 0, e.g. 2000,10000"
            )),
        })
        .collect()
}

pub async fn run(
    database_url: &str,
    brokers: &str,
    load: Load,
    variants: Vec<Variant>,
) -> anyhow::Result<()> {
    if load.seconds == 0 || load.runs == 0 {
        anyhow::bail!("--seconds and --runs must be at least 1");
    }
    for &rate in &load.rates {
        let mut ratios = Vec::new();
        for round in 1..=load.runs {
            if load.runs > 1 {
                outln!("{rate} events/s, run {round} of {}:", load.runs);
            }
            let mut p99s = Vec::new();
            for variant in &variants {
                let figures =
                    measure(database_url, brokers, rate, load.seconds, variant.clone()).await?;
                outln!(
                    "{variant}: steady load {rate} events/s for {} s: {} sent, {} received; commit -> consumer receipt {} (target p99 <= 15 ms at 10,000 events/s)",
                    load.seconds,
                    figures.sent,
                    figures.latencies.count,
                    figures.latencies
                );
                outln!("{}: {}", variant.delivery.as_str(), figures.summary);
                p99s.push((variant.clone(), figures.latencies.p99));
            }
            compare_formats(&p99s);
            if let Some(ratio) = mode_ratio(&p99s) {
                outln!(
                    "p99 exactly_once / at_least_once = {ratio:.2} (exactly once is the default while <= 2.00)"
                );
                ratios.push(ratio);
            }
        }
        if ratios.len() > 1 {
            let listed: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            outln!(
                "{rate} events/s: median p99 exactly_once / at_least_once = {:.2} of {} runs ({}) (the bar: <= 2.00)",
                median(&mut ratios),
                ratios.len(),
                listed.join(", ")
            );
        }
    }
    Ok(())
}

/// The same settings in another value format: its p99 over that of the run of the first
/// format just before it (`protobuf,confluent_protobuf,protobuf,confluent_protobuf` pairs
/// each framed run with the bare one before it).
fn compare_formats(p99s: &[(Variant, Duration)]) {
    for (index, (variant, p99)) in p99s.iter().enumerate() {
        let before = p99s[..index].iter().rev().find(|(other, _)| {
            other.delivery == variant.delivery
                && other.linger_ms == variant.linger_ms
                && other.flush_when_idle == variant.flush_when_idle
                && other.value_format != variant.value_format
        });
        if let Some((first, first_p99)) = before
            && first.value_format == p99s[0].0.value_format
        {
            outln!(
                "{}: p99 values {} / {} (the run before) = {:.2}",
                variant.delivery.as_str(),
                variant.value_format.as_str(),
                first.value_format.as_str(),
                p99.as_secs_f64() / first_p99.as_secs_f64()
            );
        }
    }
}

/// Exactly once's p99 over at least once's, when a run measured the two (in that order)
/// and nothing else.
fn mode_ratio(p99s: &[(Variant, Duration)]) -> Option<f64> {
    let [(first, at_least_once), (second, exactly_once)] = p99s else {
        return None;
    };
    (first.delivery == DeliveryMode::AtLeastOnce && second.delivery == DeliveryMode::ExactlyOnce)
        .then(|| exactly_once.as_secs_f64() / at_least_once.as_secs_f64())
}

/// The median of `values` (the lower middle one of an even count), sorting them.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[(values.len() - 1) / 2]
}

/// Figures of the steady-load benchmark.
#[derive(Debug, Clone)]
pub(super) struct LatencyFigures {
    /// Events committed.
    pub(super) sent: u64,
    /// Commit → consumer receipt, one sample per event received.
    pub(super) latencies: Latencies,
    /// How the relay delivered ([`delivery_summary`]).
    pub(super) summary: String,
}

/// Steady load of `rate` events/s for `seconds` s (10 ms ticks of rate/100 rows per
/// transaction) through the relay to a consumer; measures commit → consumer receipt using
/// the `commit_timestamp` header (same machine clock).
pub(super) async fn measure(
    url: &str,
    brokers: &str,
    rate: u64,
    seconds: u64,
    variant: Variant,
) -> anyhow::Result<LatencyFigures> {
    let scratch = scratch::database(url).await?;
    let client = db::connect(&scratch.url, "ledger-bench").await?;
    let slot = scratch.create_slot(&client, "latency").await?;
    let prefix = scratch::topic_prefix(brokers, "");
    let topic = format!("{prefix}assignment");
    ra_ledger_testing::create_topics(brokers, std::slice::from_ref(&topic), 3).await?;
    ra_ledger_testing::create_topics(brokers, &[position_topic(&prefix)], 1).await?;
    let consumer = assigned_consumer(brokers, &topic)?;
    let mut relay_config = RelayConfig {
        status_interval_ms: 100,
        delivery: variant.delivery,
        ..scratch.relay_config(slot, prefix, brokers)
    };
    variant.apply(&mut relay_config);
    let metrics = std::sync::Arc::new(ra_ledger_cdc::metrics::RelayMetrics::default());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let relay = tokio::spawn(ra_ledger_cdc::relay::run(
        relay_config,
        std::sync::Arc::clone(&metrics),
        shutdown.clone(),
    ));
    let per_tick = (rate / 100).max(1) as i32;
    let ticks = seconds * 100;
    let expected = per_tick as u64 * ticks;
    // Warm up: one row through relay, broker and consumer, so connecting, producer id
    // negotiation and the consumer's first fetch are not in the figures.
    client.execute(INSERT, &[&1i32, &"WarmUp"]).await?;
    tokio::time::timeout(Duration::from_secs(60), consumer.stream().next())
        .await
        .map_err(|_| anyhow::anyhow!("warm-up row did not arrive within 60 s"))?;
    let receiver = tokio::spawn(receive(consumer, expected));
    eprintln!("steady load: {rate} events/s for {seconds} s ({per_tick} rows every 10 ms)…");
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for _ in 0..ticks {
        tick.tick().await;
        client
            .execute(INSERT, &[&per_tick, &"AssignmentStarted"])
            .await?;
    }
    let latencies = receiver.await?;
    let summary = delivery_summary(variant.delivery, &metrics);
    // The relay's own share (commit → Kafka acknowledgement), to tell it from the consumer's.
    for line in metrics
        .render()
        .lines()
        .filter(|line| line.starts_with(ra_ledger_cdc::metrics::COMMIT_TO_ACK.name))
    {
        eprintln!("{line}");
    }
    shutdown.cancel();
    relay.await??;
    drop(client);
    scratch.drop().await?;
    let latencies = Latencies::from_samples(latencies)
        .ok_or_else(|| anyhow::anyhow!("the consumer received nothing"))?;
    Ok(LatencyFigures {
        sent: expected,
        latencies,
        summary,
    })
}

/// Rows of the load: `$1` outbox rows of event type `$2`.
const INSERT: &str = include_str!("sql/outbox_rows.sql");

/// A consumer of `topic`'s three partitions from the beginning, assigned rather than in a
/// group: no rebalance pauses in the figures. `read_committed`, as the consumers of an
/// exactly-once relay read (the same for an at-least-once one: it writes no transactions).
pub(super) fn assigned_consumer(brokers: &str, topic: &str) -> anyhow::Result<StreamConsumer> {
    let mut config = ra_ledger_testing::kafka_client(brokers)?;
    ra_ledger_cdc::consumer::read_committed(&mut config);
    let consumer: StreamConsumer = config
        .set("group.id", format!("bench-{}", Uuid::new_v4().simple()))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "5")
        .create()?;
    let mut assignment = rdkafka::TopicPartitionList::new();
    for partition in 0..3 {
        assignment.add_partition_offset(topic, partition, rdkafka::Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;
    Ok(consumer)
}

/// Commit -> receipt of each of `expected` messages, from their `commit_timestamp` header
/// (the same machine's clock).
async fn receive(consumer: StreamConsumer, expected: u64) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(expected as usize);
    let mut stream = consumer.stream();
    while (latencies.len() as u64) < expected {
        let Ok(Some(Ok(message))) =
            tokio::time::timeout(Duration::from_secs(60), stream.next()).await
        else {
            break;
        };
        let received = chrono::Utc::now();
        let committed = message
            .headers()
            .and_then(|headers| headers.iter().find(|h| h.key == "commit_timestamp"))
            .and_then(|h| std::str::from_utf8(h.value?).ok().map(str::to_owned))
            .and_then(|text| chrono::DateTime::parse_from_rfc3339(&text).ok());
        if let Some(committed) = committed {
            latencies.push(
                (received - committed.with_timezone(&chrono::Utc))
                    .to_std()
                    .unwrap_or_default(),
            );
        }
    }
    latencies
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_as_a_list_and_refuse_zero_naming_the_part() {
        assert_eq!(parse_rates("2000, 10000"), Ok(vec![2_000, 10_000]));
        assert!(parse_rates("2000,0").unwrap_err().contains("\"0\""));
        assert!(parse_rates("fast").unwrap_err().contains("2000,10000"));
    }

    #[test]
    fn the_median_of_the_ratios_is_the_middle_one() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0, 9.0, 1.5]), 2.0);
        assert_eq!(
            median(&mut [2.5, 1.0]),
            1.0,
            "the lower middle of an even count"
        );
    }

    #[test]
    fn the_mode_ratio_needs_at_least_once_then_exactly_once() {
        let at_least_once = Variant::of(DeliveryMode::AtLeastOnce);
        let exactly_once = Variant::of(DeliveryMode::ExactlyOnce);
        let ms = Duration::from_millis;
        let pair = [
            (at_least_once.clone(), ms(4)),
            (exactly_once.clone(), ms(6)),
        ];
        assert_eq!(mode_ratio(&pair), Some(1.5));
        let swapped = [(exactly_once, ms(6)), (at_least_once.clone(), ms(4))];
        assert_eq!(mode_ratio(&swapped), None);
        assert_eq!(mode_ratio(&[(at_least_once, ms(4))]), None);
    }
}
