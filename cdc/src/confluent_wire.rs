//! Confluent's wire format for Protobuf values, the framing every schema-registry
//! deserializer expects (Confluent's `KafkaProtobufDeserializer`, `confluent-kafka`'s
//! `ProtobufDeserializer`, Apicurio's serde in its Confluent mode):
//!
//! ```text
//! 0x00 | schema id, 4 bytes big-endian | message indexes | the protobuf bytes
//! ```
//!
//! The *message indexes* say which message of the registered `.proto` the bytes hold: the
//! path of positions from the file's top-level messages down, written as a count and then
//! each position, every number a zig-zag varint (Kafka's `ByteUtils.writeVarint`, as
//! Confluent's `MessageIndexes.toByteArray` writes them). The first top-level message,
//! `[0]`, the common case and the envelope's, is written as a count of 0 alone: the single
//! byte `0x00`. So a framed envelope is its protobuf bytes with six bytes before them.
//!
//! Pure: bytes in, bytes out, no I/O; [`Framed::parse`] never panics on any input.

use bytes::{BufMut, Bytes, BytesMut};

/// The first byte of every framed value.
pub const MAGIC: u8 = 0;

/// A schema's id in the registry, the 4 bytes after the magic byte.
pub type SchemaId = u32;

/// Frames `payload`, a message of the schema `schema_id` at `indexes` in its file.
pub fn frame(schema_id: SchemaId, indexes: &[i32], payload: &[u8]) -> Bytes {
    let mut framed = BytesMut::with_capacity(5 + 1 + 5 * indexes.len() + payload.len());
    framed.put_u8(MAGIC);
    framed.put_u32(schema_id);
    write_indexes(indexes, &mut framed);
    framed.put_slice(payload);
    framed.freeze()
}

/// Confluent's `MessageIndexes.toByteArray`: `[0]` as one `0x00`, any other path as its
/// length and then its positions, each a zig-zag varint.
fn write_indexes(indexes: &[i32], out: &mut BytesMut) {
    if indexes == [0] {
        out.put_u8(0);
        return;
    }
    // A path is a handful of nesting levels; a protobuf file cannot nest 2^31 deep.
    write_zigzag(i32::try_from(indexes.len()).unwrap_or(i32::MAX), out);
    for &index in indexes {
        write_zigzag(index, out);
    }
}

fn write_zigzag(value: i32, out: &mut BytesMut) {
    let mut zigzag = ((value << 1) ^ (value >> 31)) as u32;
    while zigzag >= 0x80 {
        out.put_u8((zigzag as u8 & 0x7f) | 0x80);
        zigzag >>= 7;
    }
    out.put_u8(zigzag as u8);
}

/// A framed value, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framed<'a> {
    /// The registry's id of the writer's schema.
    pub schema_id: SchemaId,
    /// Where the message is in that schema's file (`[0]`: its first top-level message).
    pub indexes: Vec<i32>,
    /// The protobuf bytes.
    pub payload: &'a [u8],
}

/// Why bytes are not a framed value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Not the magic byte first: a bare protobuf value, or JSON (what a deserializer reports
    /// as "Invalid magic byte").
    #[error("not in Confluent's wire format: the first byte is {0:#04x}, not the magic byte 0x00")]
    NoMagicByte(u8),
    /// Cut short, or a count or position that does not fit.
    #[error("not in Confluent's wire format: {0}")]
    Malformed(&'static str),
}

impl<'a> Framed<'a> {
    /// Takes `value` apart; the inverse of [`frame`].
    pub fn parse(value: &'a [u8]) -> Result<Self, WireError> {
        let (&magic, rest) = value
            .split_first()
            .ok_or(WireError::Malformed("an empty value"))?;
        if magic != MAGIC {
            return Err(WireError::NoMagicByte(magic));
        }
        let (id, mut rest) = rest
            .split_first_chunk::<4>()
            .ok_or(WireError::Malformed("no 4-byte schema id"))?;
        let count = read_zigzag(&mut rest)?;
        let indexes = match count {
            0 => vec![0],
            count if count < 0 => return Err(WireError::Malformed("a negative index count")),
            // Each position takes at least one byte: a count beyond what is left is garbage,
            // and refusing it keeps a hostile count from sizing an allocation.
            count if count as usize > rest.len() => {
                return Err(WireError::Malformed("more message indexes than bytes"));
            }
            count => (0..count)
                .map(|_| read_zigzag(&mut rest))
                .collect::<Result<_, _>>()?,
        };
        Ok(Self {
            schema_id: u32::from_be_bytes(*id),
            indexes,
            payload: rest,
        })
    }
}

fn read_zigzag(input: &mut &[u8]) -> Result<i32, WireError> {
    let mut value: u32 = 0;
    for shift in (0..35).step_by(7) {
        let (&byte, rest) = input
            .split_first()
            .ok_or(WireError::Malformed("a message index cut short"))?;
        *input = rest;
        value |= u32::from(byte & 0x7f)
            .checked_shl(shift)
            .ok_or(WireError::Malformed("a message index too long"))?;
        if byte & 0x80 == 0 {
            return Ok(((value >> 1) as i32) ^ -((value & 1) as i32));
        }
    }
    Err(WireError::Malformed("a message index too long"))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_first_message_is_six_bytes_before_the_protobuf() {
        let framed = frame(0x0102_0304, &[0], b"\x0a\x03e-1");
        assert_eq!(framed.as_ref(), b"\x00\x01\x02\x03\x04\x00\x0a\x03e-1");
        let parsed = Framed::parse(&framed).unwrap();
        assert_eq!(parsed.schema_id, 0x0102_0304);
        assert_eq!(parsed.indexes, vec![0]);
        assert_eq!(parsed.payload, b"\x0a\x03e-1");
    }

    #[test]
    fn other_paths_are_a_count_and_zigzag_positions() {
        // What Confluent's MessageIndexes writes for [1] and [0, 2]: zig-zag doubles them.
        assert_eq!(
            frame(7, &[1], b"").as_ref(),
            b"\x00\x00\x00\x00\x07\x02\x02"
        );
        assert_eq!(
            frame(7, &[0, 2], b"").as_ref(),
            b"\x00\x00\x00\x00\x07\x04\x00\x04"
        );
        // Position 64 needs two varint bytes once zig-zagged (128).
        assert_eq!(
            frame(7, &[64], b"x").as_ref(),
            b"\x00\x00\x00\x00\x07\x02\x80\x01x"
        );
        assert_eq!(
            Framed::parse(&frame(7, &[64], b"x")).unwrap().indexes,
            vec![64]
        );
    }

    #[test]
    fn a_bare_or_short_value_is_refused_by_name() {
        assert_eq!(
            Framed::parse(b"\x0a\x03e-1").unwrap_err(),
            WireError::NoMagicByte(0x0a)
        );
        assert_eq!(
            Framed::parse(b"{}").unwrap_err().to_string(),
            "not in Confluent's wire format: the first byte is 0x7b, not the magic byte 0x00"
        );
        assert!(matches!(
            Framed::parse(b"\x00\x00\x01").unwrap_err(),
            WireError::Malformed(_)
        ));
        assert!(matches!(
            Framed::parse(b"\x00\x00\x00\x00\x01").unwrap_err(),
            WireError::Malformed(_)
        ));
        // A count of 60 with three bytes left.
        assert!(matches!(
            Framed::parse(b"\x00\x00\x00\x00\x01\x78\x00\x00\x00").unwrap_err(),
            WireError::Malformed(_)
        ));
        assert!(matches!(
            Framed::parse(b"\x00\x00\x00\x00\x01\x02\xff\xff\xff\xff\xff\xff").unwrap_err(),
            WireError::Malformed(_)
        ));
    }

    proptest! {
        #[test]
        fn parse_undoes_frame(
            id: u32,
            indexes in proptest::collection::vec(0..100_000i32, 1..5),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let framed = frame(id, &indexes, &payload);
            let parsed = Framed::parse(&framed).unwrap();
            prop_assert_eq!(parsed.schema_id, id);
            prop_assert_eq!(parsed.indexes, indexes);
            prop_assert_eq!(parsed.payload, payload.as_slice());
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..32)) {
            let _ = Framed::parse(&bytes);
        }
    }
}
