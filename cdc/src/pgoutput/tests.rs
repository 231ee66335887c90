//! Unit tests of the pgoutput decoder, on messages built byte by byte from the protocol
//! documentation.

use super::*;

/// Builds pgoutput messages the way the walsender writes them.
#[derive(Default)]
struct Wire(Vec<u8>);

impl Wire {
    fn tag(tag: u8) -> Self {
        Self(vec![tag])
    }
    fn u8(mut self, value: u8) -> Self {
        self.0.push(value);
        self
    }
    fn u16(mut self, value: u16) -> Self {
        self.0.extend_from_slice(&value.to_be_bytes());
        self
    }
    fn u32(mut self, value: u32) -> Self {
        self.0.extend_from_slice(&value.to_be_bytes());
        self
    }
    fn i32(mut self, value: i32) -> Self {
        self.0.extend_from_slice(&value.to_be_bytes());
        self
    }
    fn u64(mut self, value: u64) -> Self {
        self.0.extend_from_slice(&value.to_be_bytes());
        self
    }
    fn string(mut self, value: &str) -> Self {
        self.0.extend_from_slice(value.as_bytes());
        self.0.push(0);
        self
    }
    fn text(self, value: &[u8]) -> Self {
        let mut wire = self.u8(b't').i32(value.len() as i32);
        wire.0.extend_from_slice(value);
        wire
    }
    fn bytes(self) -> Bytes {
        Bytes::from(self.0)
    }
}

fn outbox_relation() -> Wire {
    Wire::tag(b'R')
        .u32(16_384)
        .string("public")
        .string("outbox")
        .u8(b'd')
        .u16(3)
        .u8(1)
        .string("id")
        .u32(20)
        .i32(-1)
        .u8(0)
        .string("aggregate_type")
        .u32(25)
        .i32(-1)
        .u8(0)
        .string("payload")
        .u32(17)
        .i32(-1)
}

#[test]
fn decodes_a_relation_and_finds_columns_by_name() {
    let LogicalMessage::Relation(relation) = decode(&outbox_relation().bytes()).unwrap() else {
        panic!("not a relation");
    };
    assert_eq!(relation.oid, 16_384);
    assert_eq!(relation.namespace, "public");
    assert_eq!(relation.name, "outbox");
    assert_eq!(relation.replica_identity, b'd');
    assert_eq!(
        relation.columns[0],
        RelationColumn {
            flags: 1,
            name: "id".into(),
            type_oid: 20,
            type_modifier: -1
        }
    );
    assert_eq!(relation.column_index("payload"), Some(2));
    assert_eq!(relation.column_index("aggregate_type"), Some(1));
    assert_eq!(relation.column_index("missing"), None);
}

#[test]
fn decodes_an_insert_with_text_null_binary_and_toast_values() {
    let message = Wire::tag(b'I')
        .u32(16_384)
        .u8(b'N')
        .u16(4)
        .text(b"42")
        .u8(b'n')
        .u8(b'b')
        .i32(2)
        .u8(0xde)
        .u8(0xad)
        .u8(b'u')
        .bytes();
    assert_eq!(
        decode(&message).unwrap(),
        LogicalMessage::Insert {
            relation_oid: 16_384,
            new: TupleData(vec![
                ColumnValue::Text(Bytes::from_static(b"42")),
                ColumnValue::Null,
                ColumnValue::Binary(Bytes::from_static(&[0xde, 0xad])),
                ColumnValue::UnchangedToast,
            ]),
        }
    );
}

#[test]
fn decodes_updates_with_and_without_an_old_tuple() {
    let without_old = Wire::tag(b'U').u32(7).u8(b'N').u16(1).text(b"new").bytes();
    assert_eq!(
        decode(&without_old).unwrap(),
        LogicalMessage::Update {
            relation_oid: 7,
            old: None,
            new: TupleData(vec![ColumnValue::Text(Bytes::from_static(b"new"))]),
        }
    );

    let with_key = Wire::tag(b'U')
        .u32(7)
        .u8(b'K')
        .u16(1)
        .text(b"old")
        .u8(b'N')
        .u16(1)
        .text(b"new")
        .bytes();
    let LogicalMessage::Update { old, .. } = decode(&with_key).unwrap() else {
        panic!("not an update");
    };
    assert_eq!(
        old,
        Some(TupleData(vec![ColumnValue::Text(Bytes::from_static(
            b"old"
        ))]))
    );
}

#[test]
fn decodes_delete_truncate_type_and_origin() {
    let delete = Wire::tag(b'D').u32(7).u8(b'O').u16(1).u8(b'n').bytes();
    assert_eq!(
        decode(&delete).unwrap(),
        LogicalMessage::Delete {
            relation_oid: 7,
            old: TupleData(vec![ColumnValue::Null]),
        }
    );

    let truncate = Wire::tag(b'T').u32(2).u8(1).u32(7).u32(8).bytes();
    assert_eq!(
        decode(&truncate).unwrap(),
        LogicalMessage::Truncate {
            options: 1,
            relation_oids: vec![7, 8],
        }
    );

    let type_message = Wire::tag(b'Y')
        .u32(99)
        .string("public")
        .string("mood")
        .bytes();
    assert_eq!(
        decode(&type_message).unwrap(),
        LogicalMessage::Type {
            oid: 99,
            namespace: "public".into(),
            name: "mood".into(),
        }
    );

    let origin = Wire::tag(b'O').u64(0x10).string("node_a").bytes();
    assert_eq!(
        decode(&origin).unwrap(),
        LogicalMessage::Origin {
            lsn: 0x10,
            name: "node_a".into(),
        }
    );
}

#[test]
fn decodes_begin_commit_and_logical_messages() {
    let begin = Wire::tag(b'B').u64(0x0100).u64(5).u32(731).bytes();
    assert_eq!(
        decode(&begin).unwrap(),
        LogicalMessage::Begin {
            final_lsn: 0x0100,
            commit_time_micros: 5,
            xid: 731,
        }
    );

    let commit = Wire::tag(b'C').u8(0).u64(0x0100).u64(0x0130).u64(5).bytes();
    assert_eq!(
        decode(&commit).unwrap(),
        LogicalMessage::Commit {
            flags: 0,
            commit_lsn: 0x0100,
            end_lsn: 0x0130,
            commit_time_micros: 5,
        }
    );

    let message = Wire::tag(b'M')
        .u8(1)
        .u64(0x0200)
        .string("ra-ledger.heartbeat")
        .i32(2)
        .u8(b'h')
        .u8(b'i')
        .bytes();
    assert_eq!(
        decode(&message).unwrap(),
        LogicalMessage::Message {
            transactional: true,
            lsn: 0x0200,
            prefix: "ra-ledger.heartbeat".into(),
            content: Bytes::from_static(b"hi"),
        }
    );
}

#[test]
fn every_truncation_of_a_valid_message_is_an_error_not_a_panic() {
    let full = outbox_relation().bytes();
    for end in 0..full.len() {
        let prefix = full.slice(..end);
        assert!(
            decode(&prefix).is_err(),
            "prefix of {end} bytes decoded as a whole message"
        );
    }
    assert_eq!(decode(&Bytes::new()), Err(DecodeError::Empty));
}

#[test]
fn names_what_is_wrong_with_a_bad_message() {
    assert_eq!(
        decode(&Bytes::from_static(b"S")),
        Err(DecodeError::UnknownTag(b'S'))
    );
    let bad_marker = Wire::tag(b'I').u32(1).u8(b'X').bytes();
    assert_eq!(
        decode(&bad_marker),
        Err(DecodeError::Unexpected {
            offset: 5,
            found: b'X',
            expected: "'N' (new tuple)",
        })
    );
    let negative = Wire::tag(b'I')
        .u32(1)
        .u8(b'N')
        .u16(1)
        .u8(b't')
        .i32(-4)
        .bytes();
    assert_eq!(
        decode(&negative),
        Err(DecodeError::NegativeLength {
            offset: 9,
            length: -4
        })
    );
    let unterminated = Bytes::from_static(b"O\0\0\0\0\0\0\0\x01abc");
    assert_eq!(
        decode(&unterminated),
        Err(DecodeError::UnterminatedString { offset: 9 })
    );
}

#[test]
fn a_huge_column_count_is_refused_before_allocating() {
    let message = Wire::tag(b'T').u32(u32::MAX).u8(0).bytes();
    assert!(matches!(
        decode(&message),
        Err(DecodeError::Truncated { .. })
    ));
}

#[test]
fn random_bytes_never_panic() {
    // A tiny xorshift generator keeps this deterministic and dependency-free; the fuzz
    // target explores far more of the input space.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let tags = b"BCORYIUDTMx";
    for _ in 0..20_000 {
        let length = (next() % 64) as usize;
        let mut buffer: Vec<u8> = (0..length).map(|_| next() as u8).collect();
        if let Some(first) = buffer.first_mut() {
            *first = tags[(next() % tags.len() as u64) as usize];
        }
        let _ = decode(&Bytes::from(buffer));
    }
}
