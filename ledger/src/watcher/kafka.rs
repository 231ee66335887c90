//! The watcher's Kafka side, blocking (each call runs on a blocking thread): the event
//! topics' partitions with their log start and end, and reading records' `id` headers from
//! given offsets to given ends as a `read_committed` consumer. Only headers are read: the
//! value may be protobuf, JSON or framed for a schema registry, and the id is all the
//! watcher needs.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ra_ledger_cdc::infra::partition_end::PartitionEndContext;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::message::Headers as _;
use rdkafka::{Message as _, Offset, TopicPartitionList};

/// The consumer the watcher keeps.
pub type WatchConsumer = BaseConsumer<PartitionEndContext>;

/// How long a metadata or offsets request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A consumer of its own group that commits nothing (the watcher keeps its offsets in the
/// database) and reads only committed records.
pub fn consumer(mut config: rdkafka::ClientConfig) -> Result<WatchConsumer, KafkaError> {
    config
        .set("group.id", "ra-ledger-watcher")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create_with_context(PartitionEndContext)
}

/// One partition of an event topic as Kafka has it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// Its log start offset.
    pub low: i64,
    /// Its end: with `read_committed`, the last stable offset.
    pub high: i64,
}

/// Every partition of `topics`, with its log start and end. A topic that does not exist
/// has no partitions here (the caller decides what that means).
pub fn list(consumer: &WatchConsumer, topics: &[String]) -> Result<Vec<Listed>, KafkaError> {
    let mut listed = Vec::new();
    for topic in topics {
        let metadata = consumer.fetch_metadata(Some(topic), TIMEOUT)?;
        for found in metadata.topics().iter().filter(|t| t.name() == topic) {
            if found.error().is_some() {
                continue;
            }
            for partition in found.partitions() {
                let (low, high) = consumer.fetch_watermarks(topic, partition.id(), TIMEOUT)?;
                listed.push(Listed {
                    topic: topic.clone(),
                    partition: partition.id(),
                    low,
                    high,
                });
            }
        }
    }
    Ok(listed)
}

/// What one read brought.
#[derive(Debug, Default)]
pub struct Read {
    /// `(partition index, offset, event id)` of each record with an event id.
    pub records: Vec<(usize, i64, u128)>,
    /// Where each partition's read stands now.
    pub positions: Vec<i64>,
    /// Whether every partition reached its end.
    pub reached: bool,
}

/// Reads `partitions` (topic and partition, by index) from `from` to `ends`, for at most
/// `budget` or `max_records` records, whichever comes first.
pub fn read(
    consumer: &WatchConsumer,
    partitions: &[(String, i32)],
    from: &[i64],
    ends: &[i64],
    budget: Duration,
    max_records: usize,
) -> Result<Read, KafkaError> {
    let mut read = Read {
        records: Vec::new(),
        positions: from.to_vec(),
        reached: false,
    };
    let index: HashMap<(&str, i32), usize> = partitions
        .iter()
        .enumerate()
        .map(|(i, (topic, partition))| ((topic.as_str(), *partition), i))
        .collect();
    let mut assignment = TopicPartitionList::new();
    for (i, (topic, partition)) in partitions.iter().enumerate() {
        if from[i] < ends[i] {
            assignment.add_partition_offset(topic, *partition, Offset::Offset(from[i]))?;
        }
    }
    let behind = |positions: &[i64]| (0..ends.len()).any(|i| positions[i] < ends[i]);
    if assignment.count() == 0 {
        read.reached = true;
        return Ok(read);
    }
    consumer.assign(&assignment)?;
    let started = Instant::now();
    while behind(&read.positions) && started.elapsed() < budget && read.records.len() < max_records
    {
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(_))) => {
                // A transaction's commit marker takes an offset no record shows: ask where
                // each partition stands.
                for element in consumer.position()?.elements() {
                    let key = (element.topic(), element.partition());
                    if let (Some(&i), Offset::Offset(offset)) = (index.get(&key), element.offset())
                    {
                        read.positions[i] = read.positions[i].max(offset);
                    }
                }
            }
            Some(Err(error)) => return Err(error),
            Some(Ok(message)) => {
                let Some(&i) = index.get(&(message.topic(), message.partition())) else {
                    continue;
                };
                read.positions[i] = read.positions[i].max(message.offset() + 1);
                if let Some(id) = event_id(&message) {
                    read.records.push((i, message.offset(), id));
                }
            }
        }
    }
    consumer.unassign()?;
    read.reached = !behind(&read.positions);
    Ok(read)
}

/// The record's event id, from its `id` header.
fn event_id(message: &rdkafka::message::BorrowedMessage<'_>) -> Option<u128> {
    let headers = message.headers()?;
    let value = headers
        .iter()
        .find(|header| header.key == ra_ledger_cdc::publish::header::ID)?
        .value?;
    let text = std::str::from_utf8(value).ok()?;
    uuid::Uuid::parse_str(text).ok().map(|id| id.as_u128())
}
