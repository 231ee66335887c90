//! Reading a message in the shape of Debezium's Outbox Event Router
//! (`io.debezium.transforms.outbox.EventRouter`) with a string key converter, the byte-array
//! value converter and Connect's default header converter: the record key is the
//! aggregate id as UTF-8, the `id` header is the event id as UTF-8 text, and the value is the
//! outbox row's payload bytes, unchanged.
//!
//! It is written against that shape only and looks at no header of the relay's own, so a
//! consumer built for Debezium's topics reads the relay's with no change: the
//! compatibility test and `ledger-bench peers` read both systems' topics with it.

use rdkafka::Message;
use rdkafka::message::Headers as _;

/// The header carrying the event id, as the Event Router names it.
pub const ID_HEADER: &str = "id";

/// One routed outbox event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutedEvent<'a> {
    /// The record key: the aggregate id.
    pub key: &'a str,
    /// The `id` header: the event id.
    pub id: &'a str,
    /// The value: the payload bytes.
    pub payload: &'a [u8],
}

/// Why a message is not in the Event Router's shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoutedEventError {
    /// No record key.
    #[error("message at {topic}/{partition}@{offset} has no key")]
    NoKey {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// Offset.
        offset: i64,
    },
    /// No `id` header, or one without a value.
    #[error("message at {topic}/{partition}@{offset} has no `id` header")]
    NoId {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// Offset.
        offset: i64,
    },
    /// A key or `id` that is not UTF-8.
    #[error("message at {topic}/{partition}@{offset}: its {part} is not UTF-8")]
    NotText {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// Offset.
        offset: i64,
        /// `key` or `id header`.
        part: &'static str,
    },
}

/// Reads `message` as an Event Router record. A message without a value reads as an empty
/// payload (the Event Router's tombstone for an empty payload).
pub fn read<M: Message>(message: &M) -> Result<RoutedEvent<'_>, RoutedEventError> {
    let position = || {
        (
            message.topic().to_owned(),
            message.partition(),
            message.offset(),
        )
    };
    let not_text = |part| {
        let (topic, partition, offset) = position();
        RoutedEventError::NotText {
            topic,
            partition,
            offset,
            part,
        }
    };
    let key = message.key().ok_or_else(|| {
        let (topic, partition, offset) = position();
        RoutedEventError::NoKey {
            topic,
            partition,
            offset,
        }
    })?;
    let key = std::str::from_utf8(key).map_err(|_| not_text("key"))?;
    let id = message
        .headers()
        .and_then(|headers| headers.iter().find(|header| header.key == ID_HEADER))
        .and_then(|header| header.value)
        .ok_or_else(|| {
            let (topic, partition, offset) = position();
            RoutedEventError::NoId {
                topic,
                partition,
                offset,
            }
        })?;
    let id = std::str::from_utf8(id).map_err(|_| not_text("id header"))?;
    Ok(RoutedEvent {
        key,
        id,
        payload: message.payload().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use rdkafka::Timestamp;
    use rdkafka::message::{Header, OwnedHeaders, OwnedMessage};

    use super::*;

    fn message(key: Option<&[u8]>, headers: OwnedHeaders) -> OwnedMessage {
        OwnedMessage::new(
            Some(vec![0, 0xff, b'A']),
            key.map(<[u8]>::to_vec),
            "outbox.event.contact".into(),
            Timestamp::NotAvailable,
            2,
            7,
            Some(headers),
        )
    }

    /// A record as Debezium 3.6.1 wrote it in `ledger-bench peers` (headers copied from
    /// its topic, context headers first).
    #[test]
    fn reads_a_debezium_record() {
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "__debezium.context.connectorLogicalName",
                value: Some(b"dbztry"),
            })
            .insert(Header {
                key: "id",
                value: Some(b"2bafabd5-70bf-480d-8231-ce976c936e2d"),
            })
            .insert(Header {
                key: "event_type",
                value: Some(b"AssignmentStarted"),
            });
        let record = message(Some(b"agg-1"), headers);
        assert_eq!(
            read(&record),
            Ok(RoutedEvent {
                key: "agg-1",
                id: "2bafabd5-70bf-480d-8231-ce976c936e2d",
                payload: &[0, 0xff, b'A'],
            })
        );
    }

    #[test]
    fn names_what_is_missing_and_where() {
        let no_key = message(None, OwnedHeaders::new());
        assert_eq!(
            read(&no_key).unwrap_err().to_string(),
            "message at outbox.event.contact/2@7 has no key"
        );
        let no_id = message(Some(b"agg-1"), OwnedHeaders::new());
        assert_eq!(
            read(&no_id).unwrap_err().to_string(),
            "message at outbox.event.contact/2@7 has no `id` header"
        );
        let binary_id = message(
            Some(b"agg-1"),
            OwnedHeaders::new().insert(Header {
                key: "id",
                value: Some(&[0xff, 0xfe]),
            }),
        );
        assert_eq!(
            read(&binary_id).unwrap_err().to_string(),
            "message at outbox.event.contact/2@7: its id header is not UTF-8"
        );
    }
}
