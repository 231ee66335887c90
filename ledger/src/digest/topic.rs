//! Reading a whole topic from its beginning to its end, without joining a consumer group:
//! how `ledger verify --digests` gets every digest the relay published.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ra_ledger_cdc::infra::partition_end::PartitionEndContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

/// Why a topic could not be read to its end.
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    /// The client could not be made, or refused the partitions to read.
    #[error("Kafka client: {0}")]
    Client(KafkaError),
    /// The broker did not describe the topic.
    #[error("reading metadata of {topic}: {source}")]
    Metadata {
        /// The topic.
        topic: String,
        /// What the client said.
        source: KafkaError,
    },
    /// The topic has no partitions: it does not exist.
    #[error("topic {0} has no partitions: does it exist (ledger topics create)?")]
    NoPartitions(String),
    /// The partitions could not be assigned.
    #[error("assigning {topic}: {source}")]
    Assign {
        /// The topic.
        topic: String,
        /// What the client said.
        source: KafkaError,
    },
    /// The end of some partitions was not reached in time.
    #[error(
        "read {read} messages of {topic} in {timeout:?}, but partitions {partitions} did not reach their end"
    )]
    Unfinished {
        /// Messages read.
        read: usize,
        /// The topic.
        topic: String,
        /// How long the read went on.
        timeout: Duration,
        /// The partitions unfinished, with the position reached in each.
        partitions: String,
    },
}

/// Every message of `topic`, read from the beginning up to each partition's end (no
/// consumer group is joined, nothing is committed). Blocking.
///
/// A partition is read when librdkafka reports its end (`enable.partition.eof`): that
/// happens once the consumer's fetch position equals the end offset the broker returned
/// with the fetch, and after every message before it was handed over. Apache Kafka's end
/// offset is exact: under `read_committed`, the last stable offset, which with no
/// transaction open is the high watermark, one past the last record every in-sync replica
/// holds. The position is compared, not the last message's offset, because the offsets at
/// a partition's end may hold no message this consumer sees (a transaction's commit marker,
/// an aborted transaction's records): the position moves past them, the last message does
/// not. The end is the one known at that fetch, so a digest published meanwhile may be read
/// too, never one fewer than the partition held when the read started. `read_committed` is
/// set here, not left to librdkafka's default or the operator's settings: a digest
/// written in a transaction that aborted was never published.
pub fn read_blocking(
    mut config: rdkafka::ClientConfig,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<(String, Vec<u8>)>, TopicError> {
    let consumer: BaseConsumer<PartitionEndContext> = config
        .set(
            "group.id",
            format!("ledger-verify-{}", uuid::Uuid::new_v4().simple()),
        )
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create_with_context(PartitionEndContext)
        .map_err(TopicError::Client)?;
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|source| TopicError::Metadata {
            topic: topic.to_owned(),
            source,
        })?;
    let mut unread: BTreeSet<i32> = metadata
        .topics()
        .iter()
        .flat_map(|t| t.partitions())
        .map(|partition| partition.id())
        .collect();
    if unread.is_empty() {
        return Err(TopicError::NoPartitions(topic.to_owned()));
    }
    let mut assignment = TopicPartitionList::new();
    for &partition in &unread {
        assignment
            .add_partition_offset(topic, partition, Offset::Beginning)
            .map_err(TopicError::Client)?;
    }
    consumer
        .assign(&assignment)
        .map_err(|source| TopicError::Assign {
            topic: topic.to_owned(),
            source,
        })?;
    let started = Instant::now();
    let mut messages = Vec::new();
    while !unread.is_empty() {
        if started.elapsed() > timeout {
            return Err(TopicError::Unfinished {
                read: messages.len(),
                topic: topic.to_owned(),
                timeout,
                partitions: positions(&consumer, topic, &unread),
            });
        }
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                unread.remove(&partition);
            }
            Some(Err(error)) => tracing::warn!(%error, "reading {topic}"),
            Some(Ok(message)) => messages.push((
                format!("{topic}/{}@{}", message.partition(), message.offset()),
                message.payload().unwrap_or_default().to_vec(),
            )),
        }
    }
    Ok(messages)
}

/// `partitions` of `topic` with the consumer's position in each, e.g. `1 (at offset 4), 2
/// (nothing read)`, for an operator to see how far the read came.
fn positions(
    consumer: &BaseConsumer<PartitionEndContext>,
    topic: &str,
    partitions: &BTreeSet<i32>,
) -> String {
    let known = consumer.position().ok();
    partitions
        .iter()
        .map(|&partition| {
            let offset = known
                .as_ref()
                .and_then(|list| list.find_partition(topic, partition))
                .map(|element| element.offset());
            match offset {
                Some(Offset::Offset(offset)) => format!("{partition} (at offset {offset})"),
                _ => format!("{partition} (nothing read)"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}
