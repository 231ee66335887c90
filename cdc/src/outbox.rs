//! The outbox row as the relay sees it: columns found by name in the Relation message, so
//! adding or reordering outbox columns does not break decoding.

use bytes::Bytes;

use crate::pgoutput::{ColumnValue, Relation, TupleData};

/// The outbox columns the relay needs, by their name in `migrations/`.
pub mod column {
    /// Outbox sequence number (not commit order).
    pub const ID: &str = "id";
    /// Event id; consumers deduplicate on it.
    pub const EVENT_ID: &str = "event_id";
    /// Aggregate type; selects the topic.
    pub const AGGREGATE_TYPE: &str = "aggregate_type";
    /// Aggregate id; the Kafka key.
    pub const AGGREGATE_ID: &str = "aggregate_id";
    /// Event type name.
    pub const EVENT_TYPE: &str = "event_type";
    /// Protobuf payload; the Kafka value.
    pub const PAYLOAD: &str = "payload";
    /// W3C trace context of the request that wrote the row; optional (an outbox without
    /// the column, or a NULL, publishes no `traceparent` header).
    pub const TRACEPARENT: &str = "traceparent";
}

/// The OIDs PostgreSQL gives the built-in types the relay reads (fixed in `pg_type.dat`,
/// the same on every server).
pub mod type_oid {
    /// `bigint`.
    pub const INT8: u32 = 20;
    /// `text`.
    pub const TEXT: u32 = 25;
    /// `bytea`.
    pub const BYTEA: u32 = 17;
    /// `uuid`.
    pub const UUID: u32 = 2950;
}

/// Every column the relay reads: its name, its type, and whether it must be there. The one
/// list: decoding ([`OutboxLayout::from_relation`]) and the publication check
/// (`relay::publication`) both hold the outbox to it, so a column whose type changed is a
/// refusal, not a mangled key (in binary mode any 8 bytes would pass as a `bigint`).
pub const COLUMNS: [(&str, u32, bool); 7] = [
    (column::ID, type_oid::INT8, true),
    (column::EVENT_ID, type_oid::UUID, true),
    (column::AGGREGATE_TYPE, type_oid::TEXT, true),
    (column::AGGREGATE_ID, type_oid::TEXT, true),
    (column::EVENT_TYPE, type_oid::TEXT, true),
    (column::PAYLOAD, type_oid::BYTEA, true),
    (column::TRACEPARENT, type_oid::TEXT, false),
];

/// The name of a type of [`type_oid`], for messages.
pub fn type_name(oid: u32) -> &'static str {
    match oid {
        type_oid::INT8 => "bigint",
        type_oid::TEXT => "text",
        type_oid::BYTEA => "bytea",
        type_oid::UUID => "uuid",
        _ => "another type",
    }
}

/// One outbox row, decoded from an Insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    /// Outbox sequence number.
    pub id: i64,
    /// Event id in canonical UUID text form.
    pub event_id: String,
    /// Aggregate type, e.g. `contact`.
    pub aggregate_type: String,
    /// Aggregate id.
    pub aggregate_id: String,
    /// Event type, e.g. `ContactCreated`.
    pub event_type: String,
    /// Protobuf payload.
    pub payload: Bytes,
    /// W3C trace context, when the writer recorded one.
    pub traceparent: Option<String>,
}

/// Why an outbox relation or row cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutboxError {
    /// The relation lacks a column the relay needs.
    #[error(
        "outbox table {table} has no column {column:?}; was a migration skipped or the column renamed?"
    )]
    MissingColumn {
        /// Qualified table name.
        table: String,
        /// The missing column.
        column: &'static str,
    },
    /// A column the relay reads is of another type than it reads.
    #[error(
        "outbox table {table} column {column:?} is of type OID {found}, and the relay reads {expected}; was the column's type changed?"
    )]
    ColumnType {
        /// Qualified table name.
        table: String,
        /// The column.
        column: &'static str,
        /// Its type's OID.
        found: u32,
        /// The type the relay reads.
        expected: &'static str,
    },
    /// A row carries fewer values than its relation announced.
    #[error("outbox row has {found} values but column {column:?} is at position {index}")]
    ShortRow {
        /// Column looked for.
        column: &'static str,
        /// Its position in the relation.
        index: usize,
        /// Values in the row.
        found: usize,
    },
    /// A required value is NULL or was not sent.
    #[error("outbox column {column:?} is NULL or missing")]
    Missing {
        /// The column.
        column: &'static str,
    },
    /// A value could not be parsed.
    #[error("outbox column {column:?} has an invalid value: {reason}")]
    Invalid {
        /// The column.
        column: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// Where each needed column sits in the outbox relation's tuples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxLayout {
    id: usize,
    event_id: usize,
    aggregate_type: usize,
    aggregate_id: usize,
    event_type: usize,
    payload: usize,
    traceparent: Option<usize>,
}

impl OutboxLayout {
    /// Finds the needed columns of `relation` by name, each of the type the relay reads
    /// ([`COLUMNS`]).
    pub fn from_relation(relation: &Relation) -> Result<Self, OutboxError> {
        let table = || format!("{}.{}", relation.namespace, relation.name);
        let mut found = [None; COLUMNS.len()];
        for (place, (name, expected, required)) in found.iter_mut().zip(COLUMNS) {
            let Some(index) = relation.column_index(name) else {
                if required {
                    return Err(OutboxError::MissingColumn {
                        table: table(),
                        column: name,
                    });
                }
                continue;
            };
            let type_oid = relation.columns[index].type_oid;
            if type_oid != expected {
                return Err(OutboxError::ColumnType {
                    table: table(),
                    column: name,
                    found: type_oid,
                    expected: type_name(expected),
                });
            }
            *place = Some(index);
        }
        let [
            Some(id),
            Some(event_id),
            Some(aggregate_type),
            Some(aggregate_id),
            Some(event_type),
            Some(payload),
            traceparent,
        ] = found
        else {
            unreachable!("every required column was found above");
        };
        Ok(Self {
            id,
            event_id,
            aggregate_type,
            aggregate_id,
            event_type,
            payload,
            traceparent,
        })
    }

    /// Decodes one inserted tuple.
    pub fn row(&self, tuple: &TupleData) -> Result<OutboxRow, OutboxError> {
        let value = |column: &'static str, index: usize| -> Result<&ColumnValue, OutboxError> {
            let value = tuple.0.get(index).ok_or(OutboxError::ShortRow {
                column,
                index,
                found: tuple.0.len(),
            })?;
            match value {
                ColumnValue::Null | ColumnValue::UnchangedToast => {
                    Err(OutboxError::Missing { column })
                }
                present => Ok(present),
            }
        };
        Ok(OutboxRow {
            id: bigint(column::ID, value(column::ID, self.id)?)?,
            event_id: uuid(column::EVENT_ID, value(column::EVENT_ID, self.event_id)?)?,
            aggregate_type: text(
                column::AGGREGATE_TYPE,
                value(column::AGGREGATE_TYPE, self.aggregate_type)?,
            )?,
            aggregate_id: text(
                column::AGGREGATE_ID,
                value(column::AGGREGATE_ID, self.aggregate_id)?,
            )?,
            event_type: text(
                column::EVENT_TYPE,
                value(column::EVENT_TYPE, self.event_type)?,
            )?,
            payload: bytea(column::PAYLOAD, value(column::PAYLOAD, self.payload)?)?,
            traceparent: match self.traceparent.and_then(|index| tuple.0.get(index)) {
                None | Some(ColumnValue::Null | ColumnValue::UnchangedToast) => None,
                Some(present) => Some(text(column::TRACEPARENT, present)?),
            },
        })
    }
}

fn invalid(column: &'static str, reason: impl Into<String>) -> OutboxError {
    OutboxError::Invalid {
        column,
        reason: reason.into(),
    }
}

fn text(column: &'static str, value: &ColumnValue) -> Result<String, OutboxError> {
    match value {
        ColumnValue::Text(bytes) | ColumnValue::Binary(bytes) => std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| invalid(column, "not UTF-8")),
        _ => Err(OutboxError::Missing { column }),
    }
}

fn bigint(column: &'static str, value: &ColumnValue) -> Result<i64, OutboxError> {
    match value {
        ColumnValue::Binary(bytes) => <[u8; 8]>::try_from(bytes.as_ref())
            .map(i64::from_be_bytes)
            .map_err(|_| invalid(column, format!("{} bytes, expected 8", bytes.len()))),
        _ => text(column, value)?
            .parse()
            .map_err(|error| invalid(column, format!("{error}"))),
    }
}

fn uuid(column: &'static str, value: &ColumnValue) -> Result<String, OutboxError> {
    match value {
        ColumnValue::Binary(bytes) => {
            let raw = <[u8; 16]>::try_from(bytes.as_ref())
                .map_err(|_| invalid(column, format!("{} bytes, expected 16", bytes.len())))?;
            Ok(canonical_uuid(&raw))
        }
        _ => text(column, value),
    }
}

/// A UUID's 16 bytes in canonical text form (`8-4-4-4-12` lowercase hex digits), built in
/// one allocation: the relay does this for every row.
fn canonical_uuid(raw: &[u8; 16]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(36);
    for (index, byte) in raw.iter().enumerate() {
        if matches!(index, 4 | 6 | 8 | 10) {
            text.push('-');
        }
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

/// `bytea` arrives in text format as `\x` followed by hex digits.
fn bytea(column: &'static str, value: &ColumnValue) -> Result<Bytes, OutboxError> {
    match value {
        ColumnValue::Binary(bytes) => Ok(bytes.clone()),
        ColumnValue::Text(text) => decode_bytea_hex(text).map_err(|reason| invalid(column, reason)),
        _ => Err(OutboxError::Missing { column }),
    }
}

/// Decodes PostgreSQL's hex `bytea` output (`\x0a1b…`).
pub fn decode_bytea_hex(text: &[u8]) -> Result<Bytes, String> {
    let digits = text
        .strip_prefix(b"\\x")
        .ok_or("bytea text does not start with \\x; is bytea_output set to 'escape'?")?;
    if digits.len() % 2 != 0 {
        return Err(format!("odd number of hex digits ({})", digits.len()));
    }
    let nibble = |digit: u8| match digit {
        b'0'..=b'9' => Ok(digit - b'0'),
        b'a'..=b'f' => Ok(digit - b'a' + 10),
        b'A'..=b'F' => Ok(digit - b'A' + 10),
        other => Err(format!("{:?} is not a hex digit", other as char)),
    };
    digits
        .chunks_exact(2)
        .map(|pair| Ok(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect::<Result<Vec<u8>, String>>()
        .map(Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pgoutput::RelationColumn;

    /// The outbox relation with `names` as columns, each of the type the relay reads (a
    /// column it does not read is a `timestamptz`).
    fn relation(names: &[&str]) -> Relation {
        Relation {
            oid: 1,
            namespace: "public".into(),
            name: "outbox".into(),
            replica_identity: b'd',
            columns: names
                .iter()
                .map(|name| RelationColumn {
                    flags: 0,
                    name: (*name).into(),
                    type_oid: COLUMNS
                        .iter()
                        .find(|(column, _, _)| column == name)
                        .map_or(1184, |(_, type_oid, _)| *type_oid),
                    type_modifier: -1,
                })
                .collect(),
        }
    }

    #[test]
    fn a_column_of_another_type_is_refused_not_mangled() {
        let mut changed = relation(&[
            "id",
            "event_id",
            "aggregate_type",
            "aggregate_id",
            "event_type",
            "payload",
        ]);
        // `ALTER TABLE outbox ALTER COLUMN aggregate_id TYPE bigint`: in binary mode its
        // 8 bytes would pass as text of control characters, a mangled Kafka key.
        changed.columns[3].type_oid = type_oid::INT8;
        let error = OutboxLayout::from_relation(&changed).unwrap_err();
        assert_eq!(
            error,
            OutboxError::ColumnType {
                table: "public.outbox".into(),
                column: "aggregate_id",
                found: type_oid::INT8,
                expected: "text",
            }
        );
        let mut traceparent = relation(&[
            "id",
            "event_id",
            "aggregate_type",
            "aggregate_id",
            "event_type",
            "payload",
            "traceparent",
        ]);
        traceparent.columns[6].type_oid = type_oid::BYTEA;
        assert!(matches!(
            OutboxLayout::from_relation(&traceparent),
            Err(OutboxError::ColumnType {
                column: "traceparent",
                ..
            })
        ));
    }

    fn text(value: &str) -> ColumnValue {
        ColumnValue::Text(Bytes::copy_from_slice(value.as_bytes()))
    }

    #[test]
    fn finds_columns_by_name_whatever_their_order() {
        // Reordered, with an extra column the relay does not know about.
        let relation = relation(&[
            "payload",
            "created_at",
            "event_type",
            "aggregate_id",
            "aggregate_type",
            "event_id",
            "id",
        ]);
        let layout = OutboxLayout::from_relation(&relation).unwrap();
        let row = layout
            .row(&TupleData(vec![
                text("\\x0aff"),
                text("2026-11-29 10:00:00+00"),
                text("ContactCreated"),
                text("c-1"),
                text("contact"),
                text("0192f0c4-0000-7000-8000-000000000001"),
                text("17"),
            ]))
            .unwrap();
        assert_eq!(
            row,
            OutboxRow {
                id: 17,
                event_id: "0192f0c4-0000-7000-8000-000000000001".into(),
                aggregate_type: "contact".into(),
                aggregate_id: "c-1".into(),
                event_type: "ContactCreated".into(),
                payload: Bytes::from_static(&[0x0a, 0xff]),
                traceparent: None,
            }
        );
    }

    #[test]
    fn decodes_binary_format_values() {
        let layout = OutboxLayout::from_relation(&relation(&[
            "id",
            "event_id",
            "aggregate_type",
            "aggregate_id",
            "event_type",
            "payload",
        ]))
        .unwrap();
        let uuid: Vec<u8> = (0..16).collect();
        let row = layout
            .row(&TupleData(vec![
                ColumnValue::Binary(Bytes::copy_from_slice(&5i64.to_be_bytes())),
                ColumnValue::Binary(Bytes::from(uuid)),
                text("contact"),
                text("c-1"),
                text("ContactCreated"),
                ColumnValue::Binary(Bytes::from_static(&[1, 2])),
            ]))
            .unwrap();
        assert_eq!(row.id, 5);
        assert_eq!(row.event_id, "00010203-0405-0607-0809-0a0b0c0d0e0f");
        let high: [u8; 16] = std::array::from_fn(|index| 0xf0 + index as u8);
        assert_eq!(
            canonical_uuid(&high),
            "f0f1f2f3-f4f5-f6f7-f8f9-fafbfcfdfeff"
        );
        assert_eq!(row.payload, Bytes::from_static(&[1, 2]));
    }

    #[test]
    fn a_missing_column_names_the_column_and_table() {
        let error = OutboxLayout::from_relation(&relation(&["id", "event_id"])).unwrap_err();
        assert_eq!(
            error,
            OutboxError::MissingColumn {
                table: "public.outbox".into(),
                column: "aggregate_type",
            }
        );
        assert!(error.to_string().contains("public.outbox"));
    }

    #[test]
    fn null_short_and_invalid_values_are_named() {
        let layout = OutboxLayout::from_relation(&relation(&[
            "id",
            "event_id",
            "aggregate_type",
            "aggregate_id",
            "event_type",
            "payload",
        ]))
        .unwrap();
        let mut values = vec![
            text("1"),
            text("e"),
            text("contact"),
            text("c"),
            text("T"),
            text("\\x00"),
        ];
        values[5] = ColumnValue::Null;
        assert_eq!(
            layout.row(&TupleData(values.clone())),
            Err(OutboxError::Missing { column: "payload" })
        );
        assert!(matches!(
            layout.row(&TupleData(values[..3].to_vec())),
            Err(OutboxError::ShortRow {
                column: "aggregate_id",
                index: 3,
                found: 3
            })
        ));
        values[0] = text("one");
        assert!(matches!(
            layout.row(&TupleData(values)),
            Err(OutboxError::Invalid { column: "id", .. })
        ));
    }

    #[test]
    fn bytea_hex_decoding() {
        assert_eq!(decode_bytea_hex(b"\\x").unwrap(), Bytes::new());
        assert_eq!(
            decode_bytea_hex(b"\\x00Ff10").unwrap(),
            Bytes::from_static(&[0x00, 0xff, 0x10])
        );
        assert!(decode_bytea_hex(b"\\x0").unwrap_err().contains("odd"));
        assert!(
            decode_bytea_hex(b"\\xzz")
                .unwrap_err()
                .contains("hex digit")
        );
        assert!(decode_bytea_hex(b"abc").unwrap_err().contains("escape"));
    }
}
