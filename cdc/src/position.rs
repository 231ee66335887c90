//! The relay's position: the commit LSN of the last PostgreSQL transaction Kafka holds, on
//! a compacted one-partition topic keyed by slot. Both delivery modes write it before they
//! confirm the slot past it, so the slot is never ahead of the newest position, whichever
//! mode ran last (a slot ahead means something else moved it: [`crate::history`]'s gap).
//!
//! - Exactly once writes it inside the same Kafka transaction as the events. Because the
//!   record and the events commit or abort together, the newest committed record of a slot
//!   names exactly what Kafka holds: every transaction at or below it is in Kafka, whole,
//!   and nothing above it is visible to a `read_committed` reader. At start the relay reads
//!   it back ([`read`], committed) and skips what the slot resends at or below it.
//! - At least once writes it with its idempotent producer once Kafka acknowledged
//!   everything up to it, and confirms the slot only once Kafka acknowledged the record.
//!   At start it reads the newest record (uncommitted too: it skips nothing on its account)
//!   to refuse another server's history or an older timeline.
//!
//! An LSN alone names a place in one server's history only, so the record also names the
//! server it was read from (system identifier, timeline, database) and the newest event it
//! covers; [`crate::history`] decides from them whether it still describes the server the
//! relay reached. A record without them (written before they existed, or by anything but
//! the relay) is not trusted: the relay skips nothing on its account.
//!
//! Encoding ([`Position::encode`], [`Position::decode`]) is pure; reading is blocking
//! librdkafka work, for `spawn_blocking`.

use std::time::{Duration, Instant};

use rdkafka::Message as _;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use crate::config::{DeliveryMode, RelayConfig};
use crate::history::{Identity, NewestEvent, Stored};
use crate::infra::partition_end::PartitionEndContext;
use crate::lsn::{format_lsn, parse_lsn};

/// The position record's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The slot (also the record's key).
    pub slot: String,
    /// Commit LSN of the last PostgreSQL transaction of the Kafka transaction, `X/Y`.
    pub commit_lsn: String,
    /// Its end LSN, `X/Y`: where the slot is confirmed once the Kafka commit succeeded.
    pub end_lsn: String,
    /// The server's system identifier; absent in records of older relays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_id: Option<String>,
    /// The server's timeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<u32>,
    /// The database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    /// The newest event Kafka holds from this slot, in this or an earlier transaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event: Option<LastEvent>,
    /// The slot's heartbeat count (`relay_slots.heartbeats`) as of the newest heartbeat at
    /// or below the position: a database restored from a copy taken before it has a lower
    /// count, whatever LSNs it has written since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeats: Option<u64>,
    /// The delivery mode that wrote it (`at_least_once`, `exactly_once`); absent in records
    /// of relays older than both modes writing positions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<String>,
}

/// The newest event a position covers: at start, an event above the slot's confirmed
/// position must still be in the outbox (retention never removes what the slot has not
/// confirmed), or the database is not the one Kafka heard from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastEvent {
    /// Its event id.
    pub id: String,
    /// The commit LSN of its transaction, `X/Y`.
    pub commit_lsn: String,
}

impl LastEvent {
    /// `id`, committed at `commit_lsn`.
    pub fn new(id: &str, commit_lsn: u64) -> Self {
        Self {
            id: id.to_owned(),
            commit_lsn: format_lsn(commit_lsn),
        }
    }

    /// The commit LSN as a number.
    pub fn commit_lsn(&self) -> u64 {
        parse_lsn(&self.commit_lsn).unwrap_or(0)
    }
}

impl Position {
    /// The position after the transaction that committed at `commit_lsn` and ended at
    /// `end_lsn`, on the server `identity`, `slot` its slot, written by `delivery`.
    pub fn new(
        slot: &str,
        identity: &Identity,
        commit_lsn: u64,
        end_lsn: u64,
        last_event: Option<LastEvent>,
        heartbeats: Option<u64>,
        delivery: DeliveryMode,
    ) -> Self {
        Self {
            slot: slot.to_owned(),
            commit_lsn: format_lsn(commit_lsn),
            end_lsn: format_lsn(end_lsn),
            system_id: Some(identity.system_id.clone()),
            timeline: Some(identity.timeline),
            database: Some(identity.database.clone()),
            last_event,
            heartbeats,
            delivery: Some(delivery.as_str().to_owned()),
        }
    }

    /// The record's value: JSON, so an operator can read it with any console consumer.
    pub fn encode(&self) -> Vec<u8> {
        // A struct of strings always serialises.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Decodes a record's value; `None` for anything that is not a position.
    pub fn decode(value: &[u8]) -> Option<Self> {
        let position: Self = serde_json::from_slice(value).ok()?;
        parse_lsn(&position.commit_lsn)?;
        parse_lsn(&position.end_lsn)?;
        if let Some(event) = &position.last_event {
            parse_lsn(&event.commit_lsn)?;
        }
        Some(position)
    }

    /// The commit LSN as a number.
    pub fn commit_lsn(&self) -> u64 {
        parse_lsn(&self.commit_lsn).unwrap_or(0)
    }

    /// The end LSN as a number.
    pub fn end_lsn(&self) -> u64 {
        parse_lsn(&self.end_lsn).unwrap_or(0)
    }

    /// What the position says of the server it came from; `None` for a record without an
    /// identity, which the relay does not trust.
    pub fn stored(&self) -> Option<Stored> {
        Some(Stored {
            identity: Identity {
                system_id: self.system_id.clone()?,
                timeline: self.timeline?,
                database: self.database.clone()?,
            },
            end_lsn: self.end_lsn(),
            heartbeats: self.heartbeats,
            last_event: self.last_event.as_ref().map(|event| NewestEvent {
                id: event.id.clone(),
                commit_lsn: event.commit_lsn(),
            }),
        })
    }
}

/// Why the position could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PositionError {
    /// Kafka failed.
    #[error("reading the position topic {topic}: {error}")]
    Kafka {
        /// The position topic.
        topic: String,
        /// What Kafka said.
        error: KafkaError,
    },
    /// The settings cannot build a consumer.
    #[error("position reader settings: {0}")]
    Settings(#[from] crate::infra::settings::ConfigError),
    /// Transactions older than the relay's start stayed open on the topic too long.
    #[error(
        "the position topic {0} kept an open transaction for longer than the transaction timeout; is another relay writing to it?"
    )]
    Undecided(String),
}

/// [`read`] on a blocking thread, for the relay's async code.
pub async fn read_in_background(
    config: &RelayConfig,
    which: Read,
) -> Result<Option<Position>, PositionError> {
    let reader = config.clone();
    tokio::task::spawn_blocking(move || read(&reader, which))
        .await
        .map_err(|_| PositionError::Kafka {
            topic: config.position_topic(),
            error: KafkaError::Canceled,
        })?
}

/// How far back from the end the first read looks for the slot's record; multiplied by 16
/// until found or the whole partition is read.
const FIRST_WINDOW: i64 = 256;

/// Which records [`read`] looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// Committed records only, once every transaction begun before the read is decided:
    /// what Kafka holds for sure (exactly once, after `init_transactions`).
    Committed,
    /// The newest record, committed or not, without waiting: what a relay about to check
    /// that the position is of this server's history needs (at least once at start, and
    /// exactly once before it fences anyone).
    Newest,
}

/// The newest position of `config.slot` (see [`Read`]), or `None` when it has none (the
/// slot's first start). Blocking.
///
/// [`Read::Committed`]: call it after `init_transactions`, which waits until the slot's
/// previous transaction (committed or aborted, by a crashed or fenced instance) is decided.
/// The reader then waits until the partition's last stable offset reaches the end the
/// partition had when it started, so that no transaction begun before then (another
/// slot's, sharing the topic) is still undecided, and reads back from there:
/// `read_committed` skips aborted records, so the newest record keyed by the slot is the
/// committed position.
pub fn read(config: &RelayConfig, which: Read) -> Result<Option<Position>, PositionError> {
    let topic = config.position_topic();
    let kafka = |error| PositionError::Kafka {
        topic: topic.clone(),
        error,
    };
    let base = config.consumer_settings().client_config()?;
    let mut uncommitted_config = base.clone();
    let uncommitted: BaseConsumer = uncommitted_config
        .set("group.id", "ra-ledger-relay-position")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_uncommitted")
        .create()
        .map_err(kafka)?;
    let isolation = match which {
        Read::Committed => "read_committed",
        Read::Newest => "read_uncommitted",
    };
    let mut reader_config = base;
    reader_config
        .set("group.id", "ra-ledger-relay-position")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", isolation);
    let timeout = Duration::from_secs(10);
    // With read_uncommitted the high watermark is the log's end; with read_committed,
    // librdkafka's ListOffsets returns the last stable offset.
    let (low, end) = uncommitted
        .fetch_watermarks(&topic, 0, timeout)
        .map_err(kafka)?;
    if end <= low {
        return Ok(None);
    }
    if which == Read::Committed {
        let committed: BaseConsumer<PartitionEndContext> = reader_config
            .create_with_context(PartitionEndContext)
            .map_err(kafka)?;
        let deadline = Instant::now() + config.transaction_timeout() + Duration::from_secs(10);
        loop {
            let (_, stable) = committed
                .fetch_watermarks(&topic, 0, timeout)
                .map_err(kafka)?;
            if stable >= end {
                break;
            }
            if Instant::now() > deadline {
                return Err(PositionError::Undecided(topic.clone()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let mut window = FIRST_WINDOW;
    loop {
        let start = (end - window).max(low);
        // A consumer of its own per read: partition EOF is signalled once per offset.
        // Its partition's end is no error (logged at debug).
        let reader: BaseConsumer<PartitionEndContext> = reader_config
            .create_with_context(PartitionEndContext)
            .map_err(kafka)?;
        if let Some(position) =
            newest_of_slot(&reader, &topic, &config.slot, start, end).map_err(kafka)?
        {
            return Ok(Some(position));
        }
        if start == low {
            return Ok(None);
        }
        window = window.saturating_mul(16);
    }
}

/// The newest position of `slot` among the committed records from `start` up to at least
/// `end` (partition EOF, or a record at or past it).
fn newest_of_slot(
    consumer: &BaseConsumer<PartitionEndContext>,
    topic: &str,
    slot: &str,
    start: i64,
    end: i64,
) -> Result<Option<Position>, KafkaError> {
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, 0, Offset::Offset(start))?;
    consumer.assign(&assignment)?;
    let mut newest = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            None => continue,
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(newest),
            Some(Err(error)) => return Err(error),
            Some(Ok(message)) => {
                if message.key() == Some(slot.as_bytes())
                    && let Some(position) = message.payload().and_then(Position::decode)
                {
                    newest = Some(position);
                }
                if message.offset() + 1 >= end {
                    return Ok(newest);
                }
            }
        }
    }
    Err(KafkaError::Canceled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_round_trips_and_garbage_is_not_one() {
        let identity = Identity {
            system_id: "7321".into(),
            timeline: 2,
            database: "ledger".into(),
        };
        let position = Position::new(
            "relay_a",
            &identity,
            0x1_0000_00A0,
            0x1_0000_00F0,
            Some(LastEvent::new("e1", 0x1_0000_0010)),
            Some(42),
            DeliveryMode::AtLeastOnce,
        );
        assert_eq!(position.commit_lsn, "1/A0");
        let decoded = Position::decode(&position.encode()).unwrap();
        assert_eq!(decoded, position);
        assert_eq!(decoded.commit_lsn(), 0x1_0000_00A0);
        assert_eq!(
            decoded.stored(),
            Some(Stored {
                identity,
                end_lsn: 0x1_0000_00F0,
                heartbeats: Some(42),
                last_event: Some(NewestEvent {
                    id: "e1".into(),
                    commit_lsn: 0x1_0000_0010,
                }),
            })
        );
        assert_eq!(Position::decode(b"not json"), None);
        assert_eq!(
            Position::decode(br#"{"slot":"s","commit_lsn":"zz","end_lsn":"0/1"}"#),
            None
        );
        assert_eq!(parse_lsn("16/B374D848"), Some(0x16_B374_D848));
        assert_eq!(parse_lsn("1"), None);
    }

    #[test]
    fn a_record_without_an_identity_is_not_trusted() {
        // What relays wrote before positions named their server, or anything else that
        // writes to the topic.
        let legacy =
            Position::decode(br#"{"slot":"s","commit_lsn":"4/0","end_lsn":"4/10"}"#).unwrap();
        assert_eq!(legacy.end_lsn(), 0x4_0000_0010);
        assert_eq!(legacy.stored(), None);
        let partial = Position::decode(
            br#"{"slot":"s","commit_lsn":"4/0","end_lsn":"4/10","system_id":"1"}"#,
        )
        .unwrap();
        assert_eq!(partial.stored(), None);
    }
}
