//! `ledger-bench relay`: the relay draining an outbox backlog, against the two ceilings it
//! sits between: PostgreSQL's own `pg_recvlogical` reading the slot, and rdkafka alone
//! producing the same messages. Every row's payload is one real `AssignmentStarted`
//! envelope, so `--value-format json` measures the rendering of a real event; several
//! formats (`--value-format protobuf,confluent_protobuf`) drain the same backlog one after
//! the other in one run, side by side.
//!
//! - [`ceilings`]: the two ends alone, `pg_recvlogical` on the slot and rdkafka producing.
//! - [`measure`]: one run: the slots and topics of each relay under test, the backlog, the
//!   drains one after the other.
//! - [`sampler`]: the walsender's and the machine's CPU over a drain, read from `/proc`.
//! - here: the backlog, the run of each drain, and the figures side by side.

mod ceilings;
mod measure;
mod sampler;

use std::time::{Duration, Instant};

use ra_ledger_cdc::config::{DeliveryMode, RelayConfig};
use ra_ledger_cdc::value_format::ValueFormat;
use ra_ledger_proto::v1;
use uuid::Uuid;

use ceilings::{SharedCeiling, SlotCeiling};
pub(crate) use ceilings::{backlog_keys, rdkafka_alone};
use sampler::{CpuUse, WalsenderTime};

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
    let figures = measure::measure(database_url, brokers, &backlog, &modes, &formats).await?;
    figures.print_ceilings(backlog.per_transaction, &formats);
    figures.print_relays();
    figures.print_comparisons(&backlog.value_formats[0], &formats);
    Ok(())
}

impl RelayFigures {
    /// The backlog, the cost of each value format, and the ceilings the relays sit between.
    fn print_ceilings(&self, per_transaction: u64, formats: &[Pgoutput]) {
        outln!(
            "backlog: {} outbox rows, {} per transaction, {}-byte envelopes; topic value formats {}",
            self.rows,
            per_transaction,
            self.payload_bytes,
            self.value_bytes
                .iter()
                .map(|(format, bytes)| format!("{} ({bytes} bytes a value)", format.as_str()))
                .collect::<Vec<_>>()
                .join(", "),
        );
        for (format, nanos) in &self.render_nanos {
            outln!(
                "rendering a value ({}, in this process, {RENDERINGS} times): {nanos:.0} ns a value",
                format.as_str()
            );
        }
        outln!(
            "broker ceiling (rdkafka alone, same messages): {:.0} rows/s",
            self.broker_ceiling
        );
        for ceiling in &self.slot_ceilings {
            outln!(
                "slot, alone    (pg_recvlogical to /dev/null, pgoutput {}): {:.0} rows/s; walsender {}",
                ceiling.format.as_str(),
                ceiling.rate,
                ceiling.walsender.describe(ceiling.rate)
            );
        }
        for shared in &self.shared_ceilings {
            outln!(
                "shared ceiling (both at once, sharing the machine, pgoutput {}): slot {:.0}, broker {:.0} rows/s; {}",
                shared.format.as_str(),
                shared.slot,
                shared.broker,
                shared.cpu.describe(None),
            );
        }
        for format in formats {
            if let Some(slot) = self.slot_ceiling(*format) {
                outln!(
                    "slot ceiling   (the faster of pg_recvlogical's two drains, pgoutput {}): {:.0} rows/s",
                    format.as_str(),
                    slot
                );
            }
        }
    }

    /// Each relay's drain against the lower ceiling and the shared one.
    fn print_relays(&self) {
        for run in &self.relays {
            let slot_ceiling = self.slot_ceiling(run.format).unwrap_or(f64::INFINITY);
            let ceiling = slot_ceiling.min(self.broker_ceiling);
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
            let shared = self
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
    }

    /// Each run of another value format over the run of the first format before it, and
    /// exactly once over at least once in each pgoutput format.
    fn print_comparisons(&self, first_format: &ValueFormat, formats: &[Pgoutput]) {
        // Each run of another value format over the last run of the first format before it
        // (`protobuf,confluent_protobuf,protobuf,confluent_protobuf` pairs each framed drain
        // with the bare one just before it).
        for (index, run) in self.relays.iter().enumerate() {
            let first = self.relays[..index].iter().rev().find(|other| {
                other.delivery == run.delivery
                    && other.format == run.format
                    && other.value_format.as_str() == first_format.as_str()
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
        for format in formats {
            let rate = |mode| {
                self.relays
                    .iter()
                    .find(|run| {
                        run.delivery == mode
                            && run.format == *format
                            && run.value_format.as_str() == first_format.as_str()
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
    }
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
                include_str!("../sql/outbox_envelopes.sql"),
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

/// The relay draining the backlog until Kafka acknowledged (exactly once: committed) every
/// row. Rows/s, and how it delivered ([`delivery_summary`](crate::figures::delivery_summary)).
async fn relay_drain(relay_config: RelayConfig, rows: u64) -> anyhow::Result<(f64, String)> {
    let delivery = relay_config.delivery;
    let metrics = std::sync::Arc::new(ra_ledger_cdc::metrics::RelayMetrics::default());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let started = Instant::now();
    let task = tokio::spawn(ra_ledger_cdc::relay::run(
        relay_config,
        std::sync::Arc::clone(&metrics),
        shutdown.clone(),
    ));
    while metrics.events_published() < rows {
        anyhow::ensure!(!task.is_finished(), "the relay stopped early");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rate = rows as f64 / started.elapsed().as_secs_f64();
    shutdown.cancel();
    task.await??;
    Ok((rate, crate::figures::delivery_summary(delivery, &metrics)))
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
}
