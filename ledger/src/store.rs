//! The event store: appends immutable events to streams, with optimistic concurrency,
//! a per-stream hash chain, and one outbox row per event in the same transaction.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use prost::Message as _;
use ra_ledger_proto::v1::{self, envelope::Event};
use sha2::{Digest, Sha256};

use crate::db::cached;
use tokio_postgres::error::SqlState;
use uuid::Uuid;

/// Schema version of every event this build writes.
pub const SCHEMA_VERSION: i32 = 1;

/// Who and what caused a command's events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// The user or service that asked.
    pub actor: String,
    /// Ties together every event of one user action.
    pub correlation_id: Uuid,
    /// The request or event that directly caused these events.
    pub causation_id: Option<Uuid>,
    /// W3C trace context of the span that appends them ([`crate::trace`]); published as the
    /// Kafka header `traceparent`.
    pub traceparent: Option<String>,
}

/// An event about to be appended.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// Its id (UUID v7).
    pub event_id: Uuid,
    /// The domain event.
    pub event: Event,
    /// Business time.
    pub effective_at: DateTime<Utc>,
}

impl NewEvent {
    /// A new event with a fresh v7 id.
    pub fn new(event: Event, effective_at: DateTime<Utc>) -> Self {
        Self {
            event_id: Uuid::now_v7(),
            event,
            effective_at,
        }
    }
}

/// Events to append to one stream, checked against the version the caller last saw.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamAppend {
    /// Aggregate type (`contact`, `assignment`): picks the Kafka topic.
    pub aggregate_type: &'static str,
    /// Aggregate id: the Kafka key. The stream is `<aggregate_type>-<aggregate_id>`.
    pub aggregate_id: String,
    /// The version the stream must be at (0 for a new stream), or `None` to append at
    /// whatever the head is. Either way, two writers racing for the same version are
    /// settled by `UNIQUE (stream, stream_version)`: one of them gets a conflict.
    pub expected_version: Option<i64>,
    /// The events, in order.
    pub events: Vec<NewEvent>,
}

impl StreamAppend {
    /// The stream name.
    pub fn stream(&self) -> String {
        format!("{}-{}", self.aggregate_type, self.aggregate_id)
    }
}

/// The newest event of a stream.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamHead {
    /// Its version; 0 when the stream is empty.
    pub version: i64,
    /// Its hash, the link the next event chains to.
    pub hash: Option<Vec<u8>>,
    /// Its business time.
    pub effective_at: Option<DateTime<Utc>>,
}

/// An event as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedEvent {
    /// Event id.
    pub event_id: Uuid,
    /// Stream.
    pub stream: String,
    /// Version in the stream.
    pub stream_version: i64,
    /// The full envelope, as stored and published.
    pub envelope: v1::Envelope,
}

/// Why an append was refused.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// Someone else appended to the stream first.
    #[error(
        "stream {stream} is at version {actual}, not the expected {expected}; re-read and retry"
    )]
    Conflict {
        /// The stream.
        stream: String,
        /// The version the caller expected.
        expected: i64,
        /// The version found (or, after a race, "at least expected + 1").
        actual: i64,
    },
    /// An event's business time is earlier than the stream's previous event.
    #[error(
        "effective_at {effective_at} is earlier than the previous event of {stream} ({previous}); history cannot be reordered"
    )]
    Backdated {
        /// The stream.
        stream: String,
        /// The offered business time.
        effective_at: DateTime<Utc>,
        /// Business time of the stream's newest event.
        previous: DateTime<Utc>,
    },
    /// The database failed.
    #[error("database error while appending: {}", crate::db::describe(.0))]
    Database(#[from] tokio_postgres::Error),
}

/// The heads of the streams a transaction appends to, and the transaction's time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heads {
    /// The newest event of each stream read; a stream missing here is empty.
    pub streams: HashMap<String, StreamHead>,
    /// The time the heads were read, after the transaction took its locks: the
    /// `recorded_at` of everything it appends (see `sql/stream_heads.sql`).
    pub now: DateTime<Utc>,
}

impl Heads {
    /// Heads for streams that are new by construction (their ids were just generated), at
    /// the time `now` read after the transaction's locks.
    pub fn fresh(now: DateTime<Utc>) -> Self {
        Self {
            streams: HashMap::new(),
            now,
        }
    }
}

/// Reads the newest event of each stream, and the transaction time that goes with them.
///
/// Call it after the transaction holds every lock that orders its writes: the time it
/// returns is later than the commit of every event it shows, so `recorded_at` never goes
/// backwards along a stream and "as known at" answers never see a later event before an
/// earlier one.
///
/// The transaction gets its id before the time is read, so a digest that waits for the
/// transactions older than its time waits for this one (`digest/build.rs`).
pub async fn read_heads(
    client: &impl GenericClient,
    streams: &[String],
) -> Result<Heads, tokio_postgres::Error> {
    let rows = match streams {
        [one] => cached::query(client, include_str!("sql/stream_head.sql"), &[one]).await?,
        _ => cached::query(client, include_str!("sql/stream_heads.sql"), &[&streams]).await?,
    };
    // One row per stream asked for: the clock is read even for streams with no event yet.
    let Some(now) = rows.iter().map(|row| row.get::<_, DateTime<Utc>>(4)).max() else {
        // As in the statements above: the transaction's recording time (its id first, then
        // the clock), which the events' trigger writes into what it inserts.
        let now = cached::query_one(client, "SELECT recording_clock()", &[]).await?;
        return Ok(Heads::fresh(now.get(0)));
    };
    let streams = rows
        .iter()
        .filter_map(|row| {
            let version: Option<i64> = row.get(1);
            version.map(|version| {
                let head = StreamHead {
                    version,
                    hash: row.get(2),
                    effective_at: row.get(3),
                };
                (row.get(0), head)
            })
        })
        .collect();
    Ok(Heads { streams, now })
}

/// Appends every batch in one statement, inside the caller's transaction, together with
/// one outbox row per event, on top of `heads` and at their time.
///
/// Versions are checked twice: against the heads read before, and by the database's
/// `UNIQUE (stream, stream_version)` when two writers race, so exactly one wins.
pub async fn append_at(
    client: &impl GenericClient,
    appends: &[StreamAppend],
    heads: &Heads,
    metadata: &Metadata,
) -> Result<Vec<RecordedEvent>, AppendError> {
    let mut columns = Columns::default();
    let mut recorded = Vec::new();
    for append in appends {
        let stream = append.stream();
        let head = heads.streams.get(&stream).cloned().unwrap_or_default();
        if let Some(expected) = append.expected_version
            && head.version != expected
        {
            return Err(AppendError::Conflict {
                stream,
                expected,
                actual: head.version,
            });
        }
        let mut previous = head.clone();
        for new in &append.events {
            if let Some(effective) = previous.effective_at
                && new.effective_at < effective
            {
                return Err(AppendError::Backdated {
                    stream,
                    effective_at: new.effective_at,
                    previous: effective,
                });
            }
            let event = seal(&stream, &previous, new, metadata, heads.now);
            columns.push(&event, previous.hash.take(), append, metadata);
            previous = StreamHead {
                version: event.stream_version,
                hash: Some(event.hash.clone()),
                effective_at: Some(new.effective_at),
            };
            recorded.push(event.recorded);
        }
    }
    cached::execute(
        client,
        include_str!("sql/insert_events.sql"),
        &[
            &columns.event_id,
            &columns.stream,
            &columns.stream_version,
            &columns.event_type,
            &columns.schema_version,
            &columns.payload,
            &columns.effective_at,
            &columns.actor,
            &columns.correlation_id,
            &columns.causation_id,
            &columns.prev_hash,
            &columns.hash,
            &columns.aggregate_type,
            &columns.aggregate_id,
            &heads.now,
            &columns.traceparent,
        ],
    )
    .await
    .map_err(|error| version_race(error, &columns))?;
    Ok(recorded)
}

/// An event ready to insert: its envelope, payload and hash, chained to `previous`.
struct Sealed {
    recorded: RecordedEvent,
    stream_version: i64,
    payload: Vec<u8>,
    hash: Vec<u8>,
    effective_at: DateTime<Utc>,
}

/// Builds the envelope of `new` as the next event after `previous` in `stream`, and its
/// link of the hash chain.
fn seal(
    stream: &str,
    previous: &StreamHead,
    new: &NewEvent,
    metadata: &Metadata,
    recorded_at: DateTime<Utc>,
) -> Sealed {
    let envelope = v1::Envelope {
        event_id: new.event_id.to_string(),
        stream: stream.to_owned(),
        stream_version: previous.version + 1,
        event_type: event_type(&new.event).to_owned(),
        schema_version: SCHEMA_VERSION as u32,
        recorded_at_micros: recorded_at.timestamp_micros(),
        effective_at_micros: new.effective_at.timestamp_micros(),
        actor: metadata.actor.clone(),
        correlation_id: metadata.correlation_id.to_string(),
        causation_id: metadata
            .causation_id
            .map(|id| id.to_string())
            .unwrap_or_default(),
        event: Some(new.event.clone()),
    };
    let payload = envelope.encode_to_vec();
    let row = EventRow {
        event_id: new.event_id,
        stream,
        stream_version: envelope.stream_version,
        event_type: &envelope.event_type,
        schema_version: SCHEMA_VERSION,
        payload: &payload,
        recorded_at,
        effective_at: new.effective_at,
        actor: &metadata.actor,
        correlation_id: metadata.correlation_id,
        causation_id: metadata.causation_id,
    };
    let hash = event_hash(previous.hash.as_deref(), &row).to_vec();
    Sealed {
        stream_version: envelope.stream_version,
        effective_at: new.effective_at,
        recorded: RecordedEvent {
            event_id: new.event_id,
            stream: stream.to_owned(),
            stream_version: envelope.stream_version,
            envelope,
        },
        payload,
        hash,
    }
}

/// A unique violation on `(stream, stream_version)` means another writer appended the
/// same version first.
fn version_race(error: tokio_postgres::Error, columns: &Columns) -> AppendError {
    let race = error.code() == Some(&SqlState::UNIQUE_VIOLATION)
        && error
            .as_db_error()
            .and_then(|db| db.constraint())
            .is_some_and(|constraint| constraint == "events_stream_stream_version_key");
    if !race {
        return AppendError::Database(error);
    }
    // The detail names the key, e.g. `Key (stream, stream_version)=(contact-…, 2) already exists.`
    let detail = error
        .as_db_error()
        .and_then(|db| db.detail())
        .unwrap_or_default();
    let position = columns
        .stream
        .iter()
        .zip(&columns.stream_version)
        .position(|(stream, version)| detail.contains(&format!("({stream}, {version})")))
        .unwrap_or(0);
    let version = columns.stream_version.get(position).copied().unwrap_or(1);
    AppendError::Conflict {
        stream: columns.stream.get(position).cloned().unwrap_or_default(),
        expected: version - 1,
        actual: version,
    }
}

/// The name of an event's type, as stored and sent in the `event_type` header.
pub fn event_type(event: &Event) -> &'static str {
    match event {
        Event::ContactCreated(_) => "ContactCreated",
        Event::ContactSuperseded(_) => "ContactSuperseded",
        Event::AssignmentStarted(_) => "AssignmentStarted",
        Event::AssignmentEnded(_) => "AssignmentEnded",
        Event::ReassignmentPageRequested(_) => "ReassignmentPageRequested",
        Event::ReassignmentRowFailed(_) => "ReassignmentRowFailed",
        Event::ReassignmentCompleted(_) => "ReassignmentCompleted",
    }
}

/// The fields of one event that the hash chain covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRow<'a> {
    /// Event id.
    pub event_id: Uuid,
    /// Stream.
    pub stream: &'a str,
    /// Version in the stream.
    pub stream_version: i64,
    /// Event type.
    pub event_type: &'a str,
    /// Schema version.
    pub schema_version: i32,
    /// Protobuf envelope.
    pub payload: &'a [u8],
    /// Transaction time.
    pub recorded_at: DateTime<Utc>,
    /// Business time.
    pub effective_at: DateTime<Utc>,
    /// Actor.
    pub actor: &'a str,
    /// Correlation id.
    pub correlation_id: Uuid,
    /// Causation id.
    pub causation_id: Option<Uuid>,
}

/// `sha256("ra-ledger/event/v1" ‖ previous hash ‖ every field)`, each part length-prefixed
/// so no two different events can produce the same byte stream.
pub fn event_hash(previous: Option<&[u8]>, row: &EventRow<'_>) -> [u8; 32] {
    let mut hasher = Sha256::new();
    let mut part = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_be_bytes());
        hasher.update(bytes);
    };
    part(b"ra-ledger/event/v1");
    part(previous.unwrap_or_default());
    part(row.event_id.as_bytes());
    part(row.stream.as_bytes());
    part(&row.stream_version.to_be_bytes());
    part(row.event_type.as_bytes());
    part(&row.schema_version.to_be_bytes());
    part(row.payload);
    part(&row.recorded_at.timestamp_micros().to_be_bytes());
    part(&row.effective_at.timestamp_micros().to_be_bytes());
    part(row.actor.as_bytes());
    part(row.correlation_id.as_bytes());
    part(
        row.causation_id
            .as_ref()
            .map(Uuid::as_bytes)
            .map_or(&[][..], |b| &b[..]),
    );
    hasher.finalize().into()
}

/// Column arrays of one batch insert.
#[derive(Debug, Default)]
struct Columns {
    event_id: Vec<Uuid>,
    stream: Vec<String>,
    stream_version: Vec<i64>,
    event_type: Vec<String>,
    schema_version: Vec<i32>,
    payload: Vec<Vec<u8>>,
    effective_at: Vec<DateTime<Utc>>,
    actor: Vec<String>,
    correlation_id: Vec<Uuid>,
    causation_id: Vec<Option<Uuid>>,
    prev_hash: Vec<Option<Vec<u8>>>,
    hash: Vec<Vec<u8>>,
    aggregate_type: Vec<&'static str>,
    aggregate_id: Vec<String>,
    traceparent: Vec<Option<String>>,
}

impl Columns {
    fn push(
        &mut self,
        event: &Sealed,
        prev_hash: Option<Vec<u8>>,
        append: &StreamAppend,
        metadata: &Metadata,
    ) {
        let envelope = &event.recorded.envelope;
        self.event_id.push(event.recorded.event_id);
        self.stream.push(event.recorded.stream.clone());
        self.stream_version.push(event.stream_version);
        self.event_type.push(envelope.event_type.clone());
        self.schema_version.push(SCHEMA_VERSION);
        self.payload.push(event.payload.clone());
        self.effective_at.push(event.effective_at);
        self.actor.push(metadata.actor.clone());
        self.correlation_id.push(metadata.correlation_id);
        self.causation_id.push(metadata.causation_id);
        self.prev_hash.push(prev_hash);
        self.hash.push(event.hash.clone());
        self.aggregate_type.push(append.aggregate_type);
        self.aggregate_id.push(append.aggregate_id.clone());
        self.traceparent.push(metadata.traceparent.clone());
    }
}
