//! Replays, as a consuming team sees them: the ledger's past events republished to a replay
//! topic, ended on every partition by a completion marker that names where to start reading
//! the live topic.
//!
//! A team that joins late bootstraps in two phases:
//! 1. read every partition of the replay topic from the beginning, applying each event once
//!    through the inbox ([`crate::consumer::apply_once`]), until each partition delivered its
//!    marker ([`Bootstrap`]);
//! 2. read the live topic from the marker's handoff offsets ([`CompletionMarker::live_assignment`])
//!    and go on as any consumer does.
//!
//! Every event outside the replay's past is on the live topic at or after the handoff offsets
//! (the ledger records the offsets before the snapshot that defines the past). Some events of
//! the past may also be there: one the relay had not published yet when the offsets were
//! read (it runs a little behind the database), or a second copy of one (it delivers at
//! least once). The inbox absorbs them: nothing is missing, nothing is applied twice.

use std::collections::{BTreeMap, BTreeSet};

use rdkafka::message::Headers as _;
use rdkafka::{Message, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

/// Header names a replay adds to the live stream's.
pub mod header {
    /// The replay's id, on every message of a replay topic.
    pub const REPLAY_ID: &str = "replay_id";
    /// On a completion marker only: [`super::MARKER_KIND`].
    pub const MARKER: &str = "replay_marker";
}

/// Value of the [`header::MARKER`] header of a completion marker.
pub const MARKER_KIND: &str = "complete";

/// The default name of a replay topic: `{live}` and `{id}` are substituted.
pub const DEFAULT_TARGET: &str = "{live}.replay.{id}";

/// The name of the replay topic of `live_topic` for replay `id`, after `template`.
pub fn replay_topic(template: &str, live_topic: &str, id: &str) -> String {
    template.replace("{live}", live_topic).replace("{id}", id)
}

/// The last message of every partition of a replay topic; its value is this, as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionMarker {
    /// The replay.
    pub replay_id: String,
    /// The topic the marker is on.
    pub replay_topic: String,
    /// The live topic the replayed events came from.
    pub live_topic: String,
    /// Live partition -> the first offset to read after the replay.
    pub handoff: BTreeMap<i32, i64>,
    /// Events of the past replayed to this topic (all partitions; a resumed replay may have
    /// written some twice).
    pub events: u64,
    /// The PostgreSQL snapshot (`pg_snapshot`) that defined the past.
    pub snapshot: String,
}

impl CompletionMarker {
    /// The live topic's partitions at their handoff offsets, to `assign`.
    pub fn live_assignment(&self) -> Result<TopicPartitionList, rdkafka::error::KafkaError> {
        let mut list = TopicPartitionList::new();
        for (&partition, &offset) in &self.handoff {
            list.add_partition_offset(&self.live_topic, partition, Offset::Offset(offset))?;
        }
        Ok(list)
    }
}

/// Why a replay topic's message cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A marker whose value is not a [`CompletionMarker`].
    #[error("completion marker at {topic}/{partition}@{offset} is not readable: {error}")]
    Marker {
        /// Where.
        topic: String,
        /// Partition.
        partition: i32,
        /// Offset.
        offset: i64,
        /// Why.
        error: serde_json::Error,
    },
    /// Two partitions' markers disagree (they are written from one record).
    #[error("completion markers of {topic} disagree: {first:?} and {other:?}")]
    Disagree {
        /// The replay topic.
        topic: String,
        /// The first marker seen.
        first: Box<CompletionMarker>,
        /// The disagreeing one.
        other: Box<CompletionMarker>,
    },
    /// A marker of another replay.
    #[error("{topic} carries a marker of replay {found}, not of {expected}")]
    OtherReplay {
        /// The replay topic.
        topic: String,
        /// The replay asked for.
        expected: String,
        /// The replay found.
        found: String,
    },
}

/// What one message of a replay topic is.
#[derive(Debug)]
pub enum Delivery<'a> {
    /// A replayed event: its value is the envelope, as on the live topic.
    Event(&'a [u8]),
    /// The end of its partition.
    Marker(CompletionMarker),
}

/// Tells an event from a completion marker.
pub fn classify<'a, M: Message>(message: &'a M) -> Result<Delivery<'a>, ReplayError> {
    let is_marker = message.headers().is_some_and(|headers| {
        headers
            .iter()
            .any(|h| h.key == header::MARKER && h.value == Some(MARKER_KIND.as_bytes()))
    });
    let payload = message.payload().unwrap_or_default();
    if !is_marker {
        return Ok(Delivery::Event(payload));
    }
    serde_json::from_slice(payload)
        .map(Delivery::Marker)
        .map_err(|error| ReplayError::Marker {
            topic: message.topic().to_owned(),
            partition: message.partition(),
            offset: message.offset(),
            error,
        })
}

/// Phase 1 of a bootstrap: which partitions of the replay topic still owe their marker.
#[derive(Debug, Clone)]
pub struct Bootstrap {
    replay_id: String,
    topic: String,
    waiting: BTreeSet<i32>,
    marker: Option<CompletionMarker>,
}

impl Bootstrap {
    /// Waits for a marker on each of `partitions` of replay `replay_id`'s `topic`.
    pub fn new(replay_id: &str, topic: &str, partitions: impl IntoIterator<Item = i32>) -> Self {
        Self {
            replay_id: replay_id.to_owned(),
            topic: topic.to_owned(),
            waiting: partitions.into_iter().collect(),
            marker: None,
        }
    }

    /// The replay topic's partitions from the beginning, to `assign`.
    pub fn replay_assignment(&self) -> Result<TopicPartitionList, rdkafka::error::KafkaError> {
        let mut list = TopicPartitionList::new();
        for &partition in &self.waiting {
            list.add_partition_offset(&self.topic, partition, Offset::Beginning)?;
        }
        Ok(list)
    }

    /// Records `partition`'s marker. A partition may deliver its marker twice (a replay that
    /// resumed after a crash writes them again): the same content is fine.
    pub fn marker_seen(
        &mut self,
        partition: i32,
        marker: CompletionMarker,
    ) -> Result<(), ReplayError> {
        if marker.replay_id != self.replay_id {
            return Err(ReplayError::OtherReplay {
                topic: self.topic.clone(),
                expected: self.replay_id.clone(),
                found: marker.replay_id,
            });
        }
        match &self.marker {
            Some(first) if *first != marker => {
                return Err(ReplayError::Disagree {
                    topic: self.topic.clone(),
                    first: Box::new(first.clone()),
                    other: Box::new(marker),
                });
            }
            Some(_) => {}
            None => self.marker = Some(marker),
        }
        self.waiting.remove(&partition);
        Ok(())
    }

    /// Partitions whose marker has not come yet.
    pub fn waiting(&self) -> &BTreeSet<i32> {
        &self.waiting
    }

    /// The marker, once every partition delivered it: phase 2 starts at its handoff.
    pub fn complete(&self) -> Option<&CompletionMarker> {
        self.marker.as_ref().filter(|_| self.waiting.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::message::{Header, OwnedHeaders, OwnedMessage, Timestamp};

    use super::*;

    fn marker(handoff: &[(i32, i64)]) -> CompletionMarker {
        CompletionMarker {
            replay_id: "r1".into(),
            replay_topic: "live.replay.r1".into(),
            live_topic: "live".into(),
            handoff: handoff.iter().copied().collect(),
            events: 10,
            snapshot: "10:12:".into(),
        }
    }

    fn message(partition: i32, value: Vec<u8>, is_marker: bool) -> OwnedMessage {
        let headers = OwnedHeaders::new().insert(Header {
            key: if is_marker {
                header::MARKER
            } else {
                header::REPLAY_ID
            },
            value: Some(if is_marker { MARKER_KIND } else { "r1" }),
        });
        OwnedMessage::new(
            Some(value),
            None,
            "live.replay.r1".into(),
            Timestamp::NotAvailable,
            partition,
            0,
            Some(headers),
        )
    }

    #[test]
    fn complete_only_once_every_partition_delivered_the_same_marker() {
        let mut bootstrap = Bootstrap::new("r1", "live.replay.r1", [0, 1]);
        let done = marker(&[(0, 5), (1, 7)]);
        let value = serde_json::to_vec(&done).unwrap();
        let Delivery::Marker(first) = classify(&message(0, value.clone(), true)).unwrap() else {
            panic!("a marker");
        };
        bootstrap.marker_seen(0, first.clone()).unwrap();
        assert!(bootstrap.complete().is_none());
        // A resumed replay wrote partition 0's marker again.
        bootstrap.marker_seen(0, first).unwrap();
        assert_eq!(bootstrap.waiting(), &BTreeSet::from([1]));
        bootstrap.marker_seen(1, done.clone()).unwrap();
        assert_eq!(bootstrap.complete(), Some(&done));
        let live = done.live_assignment().unwrap();
        assert_eq!(
            live.find_partition("live", 1).unwrap().offset(),
            Offset::Offset(7)
        );
    }

    #[test]
    fn events_markers_and_bad_markers_are_told_apart() {
        assert!(matches!(
            classify(&message(0, b"envelope".to_vec(), false)).unwrap(),
            Delivery::Event(b"envelope")
        ));
        let error = classify(&message(2, b"{".to_vec(), true)).unwrap_err();
        assert!(error.to_string().contains("live.replay.r1/2@0"), "{error}");
        let mut bootstrap = Bootstrap::new("r1", "live.replay.r1", [0, 1]);
        bootstrap.marker_seen(0, marker(&[(0, 5)])).unwrap();
        let disagree = bootstrap.marker_seen(1, marker(&[(0, 6)])).unwrap_err();
        assert!(matches!(disagree, ReplayError::Disagree { .. }));
        let mut other = marker(&[(0, 5)]);
        other.replay_id = "r2".into();
        assert!(matches!(
            bootstrap.marker_seen(1, other).unwrap_err(),
            ReplayError::OtherReplay { .. }
        ));
    }

    #[test]
    fn default_target_names_the_live_topic_and_the_replay() {
        assert_eq!(
            replay_topic(DEFAULT_TARGET, "outbox.event.assignment", "abc"),
            "outbox.event.assignment.replay.abc"
        );
    }
}
