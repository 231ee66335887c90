//! Decoder for PostgreSQL's `pgoutput` logical replication protocol (version 1).
//!
//! `pgwire-replication` hands us Begin, Commit and Message already parsed and every other
//! message as raw `XLogData` bytes. This module turns those bytes into typed messages. It is
//! a pure function of its input: no I/O, no state, no panics on malformed input, so unit
//! tests and a fuzzer can drive it without a database.
//!
//! Reference: <https://www.postgresql.org/docs/15/protocol-logicalrep-message-formats.html>

use bytes::Bytes;

/// A decoded `pgoutput` message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogicalMessage {
    /// Start of a transaction.
    Begin {
        /// LSN of the transaction's commit record.
        final_lsn: u64,
        /// Commit timestamp, microseconds since 2000-01-01 UTC.
        commit_time_micros: i64,
        /// Transaction id.
        xid: u32,
    },
    /// End of a transaction.
    Commit {
        /// Flags (currently unused by PostgreSQL).
        flags: u8,
        /// LSN of the commit record.
        commit_lsn: u64,
        /// End LSN of the transaction: the position to confirm once it is durable downstream.
        end_lsn: u64,
        /// Commit timestamp, microseconds since 2000-01-01 UTC.
        commit_time_micros: i64,
    },
    /// Replication origin of the following changes.
    Origin {
        /// LSN of the commit on the origin server.
        lsn: u64,
        /// Origin name.
        name: String,
    },
    /// Describes a table; always sent before the first change of that table in a session
    /// and again after its definition changed.
    Relation(Relation),
    /// Describes a non-built-in data type.
    Type {
        /// Type OID.
        oid: u32,
        /// Schema of the type.
        namespace: String,
        /// Type name.
        name: String,
    },
    /// A row was inserted.
    Insert {
        /// OID of the relation, as announced by an earlier [`LogicalMessage::Relation`].
        relation_oid: u32,
        /// The new row.
        new: TupleData,
    },
    /// A row was updated.
    Update {
        /// OID of the relation.
        relation_oid: u32,
        /// The old key (`K`) or old row (`O`), when the replica identity sends one.
        old: Option<TupleData>,
        /// The new row.
        new: TupleData,
    },
    /// A row was deleted.
    Delete {
        /// OID of the relation.
        relation_oid: u32,
        /// The old key or old row.
        old: TupleData,
    },
    /// Tables were truncated.
    Truncate {
        /// Bit 1: CASCADE, bit 2: RESTART IDENTITY.
        options: u8,
        /// OIDs of the truncated relations.
        relation_oids: Vec<u32>,
    },
    /// A message from `pg_logical_emit_message`.
    Message {
        /// Whether it was emitted inside a transaction.
        transactional: bool,
        /// LSN of the message.
        lsn: u64,
        /// Application-defined prefix.
        prefix: String,
        /// Content bytes.
        content: Bytes,
    },
}

/// A table description from a Relation message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    /// Relation OID; changes refer to the table by it.
    pub oid: u32,
    /// Schema name (empty for `pg_catalog`).
    pub namespace: String,
    /// Table name.
    pub name: String,
    /// Replica identity setting (`d`efault, `n`othing, `f`ull, `i`ndex).
    pub replica_identity: u8,
    /// Columns in the order tuples carry them.
    pub columns: Vec<RelationColumn>,
}

impl Relation {
    /// Position of the column named `name` in this relation's tuples.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|column| column.name == name)
    }
}

/// One column of a [`Relation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationColumn {
    /// Flags; 1 marks a column that is part of the key.
    pub flags: u8,
    /// Column name.
    pub name: String,
    /// OID of the column's data type.
    pub type_oid: u32,
    /// Type modifier (`atttypmod`).
    pub type_modifier: i32,
}

/// The column values of one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TupleData(pub Vec<ColumnValue>);

/// One column value in a [`TupleData`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnValue {
    /// SQL NULL.
    Null,
    /// A TOASTed value that did not change (updates only); the value itself is not sent.
    UnchangedToast,
    /// The value in PostgreSQL's text output format.
    Text(Bytes),
    /// The value in PostgreSQL's binary send format (`binary 'true'` option).
    Binary(Bytes),
}

/// Why a buffer is not a valid `pgoutput` message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The buffer ended in the middle of a field.
    #[error("pgoutput message truncated: needed {needed} more bytes at offset {offset}")]
    Truncated {
        /// Offset of the field that did not fit.
        offset: usize,
        /// Bytes missing.
        needed: usize,
    },
    /// A string was not terminated by a NUL byte.
    #[error("pgoutput string at offset {offset} has no NUL terminator")]
    UnterminatedString {
        /// Offset where the string starts.
        offset: usize,
    },
    /// A string was not valid UTF-8.
    #[error("pgoutput string at offset {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// Offset where the string starts.
        offset: usize,
    },
    /// The message tag is not one this decoder knows (streaming messages of protocol v2+
    /// land here, since the relay asks for protocol v1).
    #[error("unknown pgoutput message tag {tag:?} (0x{code:02x})", tag = *.0 as char, code = .0)]
    UnknownTag(u8),
    /// A sub-message marker or a column kind had an unexpected value.
    #[error("unexpected byte {found:?} at offset {offset}, expected {expected}", found = *found as char)]
    Unexpected {
        /// Offset of the byte.
        offset: usize,
        /// The byte found.
        found: u8,
        /// What was allowed there.
        expected: &'static str,
    },
    /// A length field was negative.
    #[error("negative length {length} at offset {offset}")]
    NegativeLength {
        /// Offset of the length field.
        offset: usize,
        /// The length read.
        length: i32,
    },
    /// The message was empty.
    #[error("empty pgoutput message")]
    Empty,
}

/// Decodes one `pgoutput` message.
///
/// The buffer is shared, not copied: column values and message contents are slices of it.
///
/// One arm per message type of the protocol, in one match (longer than our usual
/// function): read next to PostgreSQL's documentation of the format, the whole protocol is
/// on one screen, which splitting it would lose.
pub fn decode(message: &Bytes) -> Result<LogicalMessage, DecodeError> {
    let mut reader = Reader::new(message);
    let tag = reader.u8().map_err(|_| DecodeError::Empty)?;
    let decoded = match tag {
        b'B' => LogicalMessage::Begin {
            final_lsn: reader.u64()?,
            commit_time_micros: reader.i64()?,
            xid: reader.u32()?,
        },
        b'C' => LogicalMessage::Commit {
            flags: reader.u8()?,
            commit_lsn: reader.u64()?,
            end_lsn: reader.u64()?,
            commit_time_micros: reader.i64()?,
        },
        b'O' => LogicalMessage::Origin {
            lsn: reader.u64()?,
            name: reader.string()?,
        },
        b'R' => LogicalMessage::Relation(decode_relation(&mut reader)?),
        b'Y' => LogicalMessage::Type {
            oid: reader.u32()?,
            namespace: reader.string()?,
            name: reader.string()?,
        },
        b'I' => {
            let relation_oid = reader.u32()?;
            reader.expect(b"N", "'N' (new tuple)")?;
            LogicalMessage::Insert {
                relation_oid,
                new: decode_tuple(&mut reader)?,
            }
        }
        b'U' => decode_update(&mut reader)?,
        b'D' => {
            let relation_oid = reader.u32()?;
            reader.expect(b"KO", "'K' or 'O'")?;
            LogicalMessage::Delete {
                relation_oid,
                old: decode_tuple(&mut reader)?,
            }
        }
        b'T' => decode_truncate(&mut reader)?,
        b'M' => decode_message(&mut reader)?,
        other => return Err(DecodeError::UnknownTag(other)),
    };
    Ok(decoded)
}

/// An Update's body: the old tuple when the replica identity sends one, then the new.
fn decode_update(reader: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
    let relation_oid = reader.u32()?;
    let marker = reader.expect(b"KON", "'K', 'O' or 'N'")?;
    let old = if marker == b'N' {
        None
    } else {
        let old = decode_tuple(reader)?;
        reader.expect(b"N", "'N' (new tuple)")?;
        Some(old)
    };
    Ok(LogicalMessage::Update {
        relation_oid,
        old,
        new: decode_tuple(reader)?,
    })
}

/// A Truncate's body: its options and the relations it truncates.
fn decode_truncate(reader: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
    let count = reader.u32()?;
    let options = reader.u8()?;
    // Each OID takes four bytes: refuse counts the buffer cannot hold before allocating.
    reader.ensure(count as usize * 4)?;
    let relation_oids = (0..count).map(|_| reader.u32()).collect::<Result<_, _>>()?;
    Ok(LogicalMessage::Truncate {
        options,
        relation_oids,
    })
}

/// A logical decoding message's body (`pg_logical_emit_message`: the relay's heartbeats).
fn decode_message(reader: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
    let transactional = reader.u8()? & 1 == 1;
    let lsn = reader.u64()?;
    let prefix = reader.string()?;
    let length = reader.length()?;
    Ok(LogicalMessage::Message {
        transactional,
        lsn,
        prefix,
        content: reader.bytes(length)?,
    })
}

fn decode_relation(reader: &mut Reader<'_>) -> Result<Relation, DecodeError> {
    let oid = reader.u32()?;
    let namespace = reader.string()?;
    let name = reader.string()?;
    let replica_identity = reader.u8()?;
    let count = reader.u16()?;
    // A column takes at least 10 bytes on the wire.
    reader.ensure(count as usize * 10)?;
    let mut columns = Vec::with_capacity(count as usize);
    for _ in 0..count {
        columns.push(RelationColumn {
            flags: reader.u8()?,
            name: reader.string()?,
            type_oid: reader.u32()?,
            type_modifier: reader.i32()?,
        });
    }
    Ok(Relation {
        oid,
        namespace,
        name,
        replica_identity,
        columns,
    })
}

fn decode_tuple(reader: &mut Reader<'_>) -> Result<TupleData, DecodeError> {
    let count = reader.u16()?;
    // A column takes at least one byte on the wire.
    reader.ensure(count as usize)?;
    let mut values = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let value = match reader.expect(b"nutb", "column kind 'n', 'u', 't' or 'b'")? {
            b'n' => ColumnValue::Null,
            b'u' => ColumnValue::UnchangedToast,
            b't' => {
                let length = reader.length()?;
                ColumnValue::Text(reader.bytes(length)?)
            }
            _ => {
                let length = reader.length()?;
                ColumnValue::Binary(reader.bytes(length)?)
            }
        };
        values.push(value);
    }
    Ok(TupleData(values))
}

/// A bounds-checked big-endian cursor over a shared buffer.
struct Reader<'a> {
    buffer: &'a Bytes,
    offset: usize,
}

impl<'a> Reader<'a> {
    fn new(buffer: &'a Bytes) -> Self {
        Self { buffer, offset: 0 }
    }

    fn ensure(&self, needed: usize) -> Result<(), DecodeError> {
        let remaining = self.buffer.len() - self.offset;
        if remaining < needed {
            return Err(DecodeError::Truncated {
                offset: self.offset,
                needed: needed - remaining,
            });
        }
        Ok(())
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        self.ensure(N)?;
        let mut out = [0; N];
        out.copy_from_slice(&self.buffer[self.offset..self.offset + N]);
        self.offset += N;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        self.array().map(u16::from_be_bytes)
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_be_bytes)
    }

    fn i32(&mut self) -> Result<i32, DecodeError> {
        self.array().map(i32::from_be_bytes)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_be_bytes)
    }

    fn i64(&mut self) -> Result<i64, DecodeError> {
        self.array().map(i64::from_be_bytes)
    }

    /// Reads an Int32 length that must not be negative.
    fn length(&mut self) -> Result<usize, DecodeError> {
        let offset = self.offset;
        let length = self.i32()?;
        usize::try_from(length).map_err(|_| DecodeError::NegativeLength { offset, length })
    }

    fn bytes(&mut self, length: usize) -> Result<Bytes, DecodeError> {
        self.ensure(length)?;
        let slice = self.buffer.slice(self.offset..self.offset + length);
        self.offset += length;
        Ok(slice)
    }

    /// Reads one byte that must be one of `allowed`.
    fn expect(&mut self, allowed: &[u8], expected: &'static str) -> Result<u8, DecodeError> {
        let offset = self.offset;
        let found = self.u8()?;
        if allowed.contains(&found) {
            Ok(found)
        } else {
            Err(DecodeError::Unexpected {
                offset,
                found,
                expected,
            })
        }
    }

    /// Reads a NUL-terminated UTF-8 string.
    fn string(&mut self) -> Result<String, DecodeError> {
        let offset = self.offset;
        let rest = &self.buffer[offset..];
        let end = rest
            .iter()
            .position(|&byte| byte == 0)
            .ok_or(DecodeError::UnterminatedString { offset })?;
        let text = std::str::from_utf8(&rest[..end])
            .map_err(|_| DecodeError::InvalidUtf8 { offset })?
            .to_owned();
        self.offset += end + 1;
        Ok(text)
    }
}

#[cfg(test)]
mod tests;
