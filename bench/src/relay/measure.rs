//! One run of `ledger-bench relay`: a slot and topics per relay under test (value format,
//! pgoutput format, delivery mode), the backlog inserted once, each format's value rendered,
//! then the drains one after the other: rdkafka alone, each relay, `pg_recvlogical` beside
//! rdkafka, and `pg_recvlogical` alone last.

use std::collections::BTreeMap;

use prost::Message as _;
use ra_ledger::db;
use ra_ledger_cdc::config::{DeliveryMode, RelayConfig, position_topic};
use ra_ledger_cdc::value_format::ValueFormat;
use ra_ledger_testing::ScratchDatabase;

use super::ceilings::{SharedCeiling, SlotCeiling, recvlogical_drain};
use super::sampler::{CpuClock, WalsenderSampler};
use super::{
    Backlog, Inserted, Pgoutput, RelayFigures, RelayRun, backlog_keys, insert_backlog,
    rdkafka_alone, relay_drain, render_nanos, sample_envelope,
};
use crate::scratch;

/// Drains `backlog` through rdkafka alone, through the relay (each mode in each pgoutput
/// format) and through `pg_recvlogical` (each format), in one run.
pub(super) async fn measure(
    url: &str,
    brokers: &str,
    backlog: &Backlog,
    modes: &[DeliveryMode],
    formats: &[Pgoutput],
) -> anyhow::Result<RelayFigures> {
    let payload = bytes::Bytes::from(sample_envelope().encode_to_vec());
    let scratch = scratch::database(url).await?;
    let client = db::connect(&scratch.url, "ledger-bench").await?;
    let mut recvlogical_slots = Vec::new();
    let mut shared_slots = Vec::new();
    for format in formats {
        let purpose = format!("recv_{}", format.as_str());
        recvlogical_slots.push((*format, scratch.create_slot(&client, &purpose).await?));
        let purpose = format!("both_{}", format.as_str());
        shared_slots.push((*format, scratch.create_slot(&client, &purpose).await?));
    }
    let prefix = scratch::topic_prefix(brokers, "");
    let under_test = Measured {
        scratch: &scratch,
        client: &client,
        brokers,
        prefix: &prefix,
    };
    let configs = under_test.relay_configs(backlog, modes, formats).await?;
    let per_transaction = backlog.per_transaction;
    let backlog = insert_backlog(&client, backlog.clone(), &payload).await?;
    let raw_topic = format!("{prefix}raw.assignment");
    ra_ledger_testing::create_topics(brokers, std::slice::from_ref(&raw_topic), 3).await?;
    let baseline = configs
        .first()
        .map(|(_, config)| config.clone())
        .ok_or_else(|| anyhow::anyhow!("no delivery mode to measure"))?;
    let values = rendered_values(&configs, &payload).await?;
    // The ceiling produces the values the relay publishes, in the topic's format.
    let keys = backlog_keys(&client).await?;
    let value = &values.first;
    let broker_ceiling =
        rdkafka_alone(&baseline, &raw_topic, &keys, per_transaction, value).await?;
    let relays = relay_runs(&scratch, configs, backlog.rows).await?;
    let mut shared_ceilings = Vec::new();
    for (format, slot) in shared_slots {
        let clock = CpuClock::start();
        let (slot, broker) = tokio::try_join!(
            recvlogical_drain(&scratch, &slot, &backlog, format),
            rdkafka_alone(&baseline, &raw_topic, &keys, per_transaction, value),
        )?;
        shared_ceilings.push(SharedCeiling {
            format,
            slot,
            broker,
            cpu: clock.finish(),
        });
    }
    let slot_ceilings = slot_ceilings(&scratch, recvlogical_slots, &backlog).await?;
    drop(client);
    scratch.drop().await?;
    Ok(RelayFigures {
        rows: backlog.rows,
        slot_ceilings,
        broker_ceiling,
        shared_ceilings,
        relays,
        payload_bytes: payload.len(),
        value_bytes: values.bytes,
        render_nanos: values.render_nanos,
    })
}

/// Where the relays under test get their slots and topics.
struct Measured<'a> {
    scratch: &'a ScratchDatabase,
    client: &'a tokio_postgres::Client,
    brokers: &'a str,
    prefix: &'a str,
}

impl Measured<'_> {
    /// A relay configuration, with a slot and topics of its own, per value format, pgoutput
    /// format and delivery mode, all made before the backlog so each slot holds it all.
    async fn relay_configs(
        &self,
        backlog: &Backlog,
        modes: &[DeliveryMode],
        formats: &[Pgoutput],
    ) -> anyhow::Result<Vec<(Pgoutput, RelayConfig)>> {
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
                    let purpose = slot_purpose(*delivery, *format, value_format, round);
                    let (slot, topic_prefix) = self.slot_and_topics(&purpose).await?;
                    configs.push((
                        *format,
                        RelayConfig {
                            delivery: *delivery,
                            pgoutput_binary: format.binary(),
                            value_formats: BTreeMap::from([("assignment".into(), *value_format)]),
                            schema_registry_url: value_format
                                .is_framed()
                                .then(|| backlog.schema_registry_url.clone()),
                            ..self.scratch.relay_config(slot, topic_prefix, self.brokers)
                        },
                    ));
                }
            }
        }
        Ok(configs)
    }

    /// A slot for `purpose`, and its topic prefix with the assignment and position topics
    /// created.
    async fn slot_and_topics(&self, purpose: &str) -> anyhow::Result<(String, String)> {
        let slot = self.scratch.create_slot(self.client, purpose).await?;
        let topic_prefix = format!("{}{purpose}.", self.prefix);
        ra_ledger_testing::create_topics(self.brokers, &[format!("{topic_prefix}assignment")], 3)
            .await?;
        ra_ledger_testing::create_topics(self.brokers, &[position_topic(&topic_prefix)], 1).await?;
        Ok((slot, topic_prefix))
    }
}

/// The slot and topics' name of a relay under test: its mode, pgoutput format and value
/// format, and how many times that value format came before (`round`). Short: a slot name
/// has at most 63 characters, the scratch name takes 45. Pure.
fn slot_purpose(
    delivery: DeliveryMode,
    format: Pgoutput,
    value_format: &ValueFormat,
    round: usize,
) -> String {
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
    match round {
        0 => format!("{mode}_{values}"),
        round => format!("{mode}_{values}{round}"),
    }
}

/// Each value format's rendering of the payload: its size and cost, and the first one's
/// bytes (what the broker ceiling produces).
struct Values {
    bytes: Vec<(ValueFormat, usize)>,
    render_nanos: Vec<(ValueFormat, f64)>,
    first: bytes::Bytes,
}

/// Each format's value, a framed one with the id its subject gets (registered here as the
/// relay registers it at start, and found there again by the relay).
async fn rendered_values(
    configs: &[(Pgoutput, RelayConfig)],
    payload: &bytes::Bytes,
) -> anyhow::Result<Values> {
    let mut values = Values {
        bytes: Vec::new(),
        render_nanos: Vec::new(),
        first: bytes::Bytes::new(),
    };
    for (_, config) in configs {
        let registered = ra_ledger_cdc::registry::register_topics(config.clone()).await?;
        let format = registered.value_format("assignment");
        if values
            .bytes
            .iter()
            .any(|(seen, _)| seen.as_str() == format.as_str())
        {
            continue;
        }
        let rendered = format.render(payload)?;
        if values.bytes.is_empty() {
            values.first = rendered.clone();
        }
        values.bytes.push((format, rendered.len()));
        values
            .render_nanos
            .push((format, render_nanos(format, payload)?));
    }
    Ok(values)
}

/// Each relay configured drains the backlog of `rows`, one after the other.
async fn relay_runs(
    scratch: &ScratchDatabase,
    configs: Vec<(Pgoutput, RelayConfig)>,
    rows: u64,
) -> anyhow::Result<Vec<RelayRun>> {
    let mut relays = Vec::new();
    for (format, config) in configs {
        let delivery = config.delivery;
        let slot = config.slot.clone();
        let sampler = WalsenderSampler::start(&scratch.url, &slot).await?;
        let clock = CpuClock::start();
        let value_format = config.value_format("assignment");
        let (rate, summary) = relay_drain(config, rows).await?;
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
    Ok(relays)
}

/// The slot itself, read by PostgreSQL's own client. It runs last, so the relay, not this
/// ceiling, pays for any cold start of decoding.
async fn slot_ceilings(
    scratch: &ScratchDatabase,
    slots: Vec<(Pgoutput, String)>,
    backlog: &Inserted,
) -> anyhow::Result<Vec<SlotCeiling>> {
    let mut ceilings = Vec::new();
    for (format, slot) in slots {
        let sampler = WalsenderSampler::start(&scratch.url, &slot).await?;
        let rate = recvlogical_drain(scratch, &slot, backlog, format).await?;
        ceilings.push(SlotCeiling {
            format,
            rate,
            walsender: sampler.finish().await,
        });
    }
    Ok(ceilings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relay_under_test_is_named_by_mode_format_and_round_within_a_slot_name() {
        let framed = ValueFormat::ConfluentProtobuf { schema_id: None };
        assert_eq!(
            slot_purpose(
                DeliveryMode::AtLeastOnce,
                Pgoutput::Text,
                &ValueFormat::Json,
                0
            ),
            "alo_text_js"
        );
        assert_eq!(
            slot_purpose(DeliveryMode::ExactlyOnce, Pgoutput::Binary, &framed, 2),
            "eos_bin_cf2"
        );
        let longest = slot_purpose(DeliveryMode::ExactlyOnce, Pgoutput::Text, &framed, 99);
        assert!(45 + longest.len() <= 63, "{longest}");
    }
}
