//! The Kafka side of a replay: its topics, the live topics' partitions and end offsets, and
//! the producer that publishes the past and the completion markers.

use std::collections::BTreeMap;
use std::time::Duration;

use ra_ledger_cdc::publish::{DeliveryFailure, Origin, classify, event_headers, kafka_headers};
use ra_ledger_cdc::replay::{CompletionMarker, MARKER_KIND, header};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tracing::info;

use super::framing::Framing;
use super::stored::{Replay, RunError};
use crate::topics::{self, Outcome, TopicError};

/// The replay's producer: idempotent, every message acknowledged by all in-sync replicas.
pub(super) fn producer(config: &ClientConfig) -> Result<FutureProducer, RunError> {
    config
        .clone()
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "120000")
        .create()
        .map_err(|error| RunError::Kafka(error.to_string()))
}

/// Each live topic of the replay with its partition count, its replay topic created (or
/// checked) with as many.
pub(super) async fn prepare_topics(
    config: &ClientConfig,
    replay: &Replay,
) -> Result<BTreeMap<String, i32>, RunError> {
    let mut partitions = BTreeMap::new();
    for aggregate in &replay.aggregate_types {
        let live = replay.live_topic(aggregate);
        let count = topic_partitions(config, &live).await?;
        ensure_replay_topic(config, &replay.replay_topic(&live), count).await?;
        partitions.insert(live, count);
    }
    Ok(partitions)
}

/// A delivery in flight, with the event it carries (to name it if Kafka refuses it).
pub(super) type Delivery = (String, rdkafka::producer::DeliveryFuture);

/// Hands every event of a batch to the producer, with the live message's headers, its value
/// framed as its live topic's values are ([`Framing`]).
pub(super) fn produce_batch(
    producer: &FutureProducer,
    replay: &Replay,
    id_text: &str,
    rows: &[tokio_postgres::Row],
    framing: &Framing,
) -> Result<Vec<Delivery>, RunError> {
    let mut deliveries = Vec::with_capacity(rows.len());
    for row in rows {
        let stream: &str = row.get("stream");
        let (aggregate, key) = stream.split_once('-').unwrap_or((stream, ""));
        let live = replay.live_topic(aggregate);
        let topic = replay.replay_topic(&live);
        let event_id: &str = row.get("event_id");
        // The live message's headers, as far as the events table holds their facts
        // (`Origin::Events` says which it cannot), plus the replay's id.
        let xid = row
            .get::<_, Option<i64>>("xid")
            .and_then(|xid| u32::try_from(xid).ok());
        let mut headers = event_headers(
            event_id,
            row.get("event_type"),
            row.get("traceparent"),
            &Origin::Events { xid },
        );
        headers.push((header::REPLAY_ID, id_text.to_owned()));
        let payload = framing.value(&live, row.get("payload"));
        let record = FutureRecord::to(&topic)
            .key(key.as_bytes())
            .payload(payload.as_ref())
            .headers(kafka_headers(&headers));
        match producer.send_result(record) {
            Ok(delivery) => deliveries.push((event_id.to_owned(), delivery)),
            Err((error, _)) => return Err(kafka_failure(&error, event_id)),
        }
    }
    Ok(deliveries)
}

/// Waits until Kafka acknowledged every delivery; the first refusal is the batch's error.
pub(super) async fn await_deliveries(deliveries: Vec<Delivery>) -> Result<(), RunError> {
    for (event_id, delivery) in deliveries {
        match delivery.await {
            Ok(Ok(_)) => {}
            Ok(Err((error, _))) => return Err(kafka_failure(&error, &event_id)),
            Err(_canceled) => return Err(RunError::Kafka("producer closed".into())),
        }
    }
    Ok(())
}

fn text_header<'a>(key: &'a str, value: &'a str) -> Header<'a, &'a [u8]> {
    Header {
        key,
        value: Some(value.as_bytes()),
    }
}

fn kafka_failure(error: &KafkaError, event_id: &str) -> RunError {
    match classify(error) {
        DeliveryFailure::Permanent => RunError::Refused {
            event_id: event_id.to_owned(),
            reason: error.to_string(),
        },
        DeliveryFailure::Transient => RunError::Kafka(format!("event {event_id}: {error}")),
    }
}

/// A completion marker on every partition of each replay topic, carrying its live topic's
/// handoff offsets.
pub(super) async fn write_markers(
    producer: &FutureProducer,
    replay: &Replay,
    partitions: &BTreeMap<String, i32>,
) -> Result<(), RunError> {
    for (live, &count) in partitions {
        let replay_topic = replay.replay_topic(live);
        let marker = CompletionMarker {
            replay_id: replay.id.to_string(),
            replay_topic: replay_topic.clone(),
            live_topic: live.clone(),
            handoff: replay.handoff.get(live).cloned().ok_or_else(|| {
                RunError::Inconsistent(format!("no handoff offsets recorded for {live}"))
            })?,
            events: replay.topic_events.get(live).copied().unwrap_or(0),
            snapshot: replay.snapshot.clone().unwrap_or_default(),
        };
        let value = serde_json::to_vec(&marker).expect("marker serializes");
        let id = replay.id.to_string();
        for partition in 0..count {
            let headers = OwnedHeaders::new_with_capacity(2)
                .insert(text_header(header::REPLAY_ID, &id))
                .insert(text_header(header::MARKER, MARKER_KIND));
            let record = FutureRecord::<(), _>::to(&replay_topic)
                .partition(partition)
                .payload(&value)
                .headers(headers);
            match producer.send(record, Duration::from_secs(120)).await {
                Ok(_) => {}
                Err((error, _)) => {
                    return Err(RunError::Kafka(format!(
                        "completion marker on {replay_topic}/{partition}: {error}"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Runs `query` with a metadata client of `config` on a blocking thread (librdkafka's
/// metadata calls block). Its end offsets are read under `read_committed` whatever the
/// operator's settings: the last stable offset is never above the high watermark, so it is
/// the safe handoff however a team reads the live topic (the two are equal while no
/// transaction is open, and the relay writes none).
async fn with_metadata_client<T: Send + 'static>(
    config: &ClientConfig,
    query: impl FnOnce(&BaseConsumer) -> Result<T, RunError> + Send + 'static,
) -> Result<T, RunError> {
    let config = config.clone();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = config
            .clone()
            .set("group.id", "ra-ledger-replay-metadata")
            .set("isolation.level", "read_committed")
            .create()
            .map_err(|error| RunError::Kafka(error.to_string()))?;
        query(&consumer)
    })
    .await
    .map_err(|error| RunError::Kafka(error.to_string()))?
}

/// The partition count of `topic`; an error names a missing topic.
async fn topic_partitions(config: &ClientConfig, topic: &str) -> Result<i32, RunError> {
    let topic = topic.to_owned();
    with_metadata_client(config, move |consumer| {
        let metadata = consumer
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .map_err(|error| RunError::Kafka(format!("metadata of {topic}: {error}")))?;
        let count = metadata
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| t.partitions().len())
            .sum::<usize>();
        if count == 0 {
            return Err(RunError::LiveTopicMissing(topic));
        }
        Ok(count as i32)
    })
    .await
}

/// Each partition's end offset of `topic`, as the broker reports it: one past its last
/// message (see the module docs).
pub(super) async fn end_offsets(
    config: &ClientConfig,
    topic: &str,
    count: i32,
) -> Result<BTreeMap<i32, i64>, RunError> {
    let topic = topic.to_owned();
    with_metadata_client(config, move |consumer| {
        (0..count)
            .map(|partition| {
                consumer
                    .fetch_watermarks(&topic, partition, Duration::from_secs(10))
                    .map(|(_, high)| (partition, high))
                    .map_err(|error| {
                        RunError::Kafka(format!("end offset of {topic}/{partition}: {error}"))
                    })
            })
            .collect()
    })
    .await
}

/// Creates the replay topic with as many partitions as its live topic, or checks the one
/// a previous attempt created.
async fn ensure_replay_topic(
    config: &ClientConfig,
    topic: &str,
    partitions: i32,
) -> Result<(), RunError> {
    let spec = topics::replay(topic, partitions);
    let created = topics::create(config, std::slice::from_ref(&spec))
        .await
        .map_err(|error| match error {
            TopicError::Kafka(error) => RunError::Kafka(format!("creating {topic}: {error}")),
            TopicError::Refused { code, .. } => {
                RunError::Kafka(format!("creating {topic}: {code}"))
            }
            error => RunError::Kafka(format!("creating {topic}: {error}")),
        })?;
    for (_, outcome) in created.topics {
        match outcome {
            Outcome::Created => info!(%topic, partitions, "replay topic created"),
            Outcome::Existed => {
                let existing = topic_partitions(config, topic).await?;
                if existing != partitions {
                    return Err(RunError::PartitionsDiffer {
                        topic: topic.to_owned(),
                        existing,
                        live: partitions,
                    });
                }
            }
        }
    }
    Ok(())
}
