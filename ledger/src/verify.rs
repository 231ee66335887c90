//! `ledger verify`: recomputes every stream's hash chain and names the first broken link.

use std::pin::pin;

use futures::TryStreamExt;
use tokio_postgres::Client;
use uuid::Uuid;

use crate::store::{EventRow, event_hash};

/// The first problem found in the chains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokenLink {
    /// The stream.
    pub stream: String,
    /// The event's version in it.
    pub stream_version: i64,
    /// The event.
    pub event_id: Uuid,
    /// What is wrong.
    pub problem: String,
}

impl std::fmt::Display for BrokenLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stream {} version {} (event {}): {}",
            self.stream, self.stream_version, self.event_id, self.problem
        )
    }
}

/// The outcome of a verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Events checked.
    pub events: u64,
    /// Streams checked.
    pub streams: u64,
    /// The first broken link, if any.
    pub broken: Option<BrokenLink>,
}

/// Walks every stream in version order, streaming rows so memory stays flat, and calls
/// `progress` every 100,000 events.
pub async fn verify(
    client: &Client,
    mut progress: impl FnMut(u64),
) -> Result<VerifyReport, tokio_postgres::Error> {
    let rows = client
        .query_raw(
            include_str!("sql/tools/verify_events.sql"),
            std::iter::empty::<i32>(),
        )
        .await?;
    let mut rows = pin!(rows);
    let mut report = VerifyReport {
        events: 0,
        streams: 0,
        broken: None,
    };
    let mut previous: Option<(String, i64, Vec<u8>)> = None;
    while let Some(row) = rows.try_next().await? {
        let stream: String = row.get(1);
        let version: i64 = row.get(2);
        let payload: Vec<u8> = row.get(5);
        let prev_hash: Option<Vec<u8>> = row.get(11);
        let hash: Vec<u8> = row.get(12);
        let event = EventRow {
            event_id: row.get(0),
            stream: &stream,
            stream_version: version,
            event_type: row.get(3),
            schema_version: row.get(4),
            payload: &payload,
            recorded_at: row.get(6),
            effective_at: row.get(7),
            actor: row.get(8),
            correlation_id: row.get(9),
            causation_id: row.get(10),
        };
        report.events += 1;
        if report.events.is_multiple_of(100_000) {
            progress(report.events);
        }
        let same_stream = previous
            .as_ref()
            .is_some_and(|(name, _, _)| *name == stream);
        if !same_stream {
            report.streams += 1;
        }
        let (expected_version, expected_link) = match &previous {
            Some((_, last, link)) if same_stream => (last + 1, Some(link.clone())),
            _ => (1, None),
        };
        let broken = |problem: String| BrokenLink {
            stream: stream.clone(),
            stream_version: version,
            event_id: event.event_id,
            problem,
        };
        if version != expected_version {
            report.broken = Some(broken(format!(
                "version {version} follows {}: events are missing",
                expected_version - 1
            )));
            break;
        }
        if prev_hash != expected_link {
            report.broken = Some(broken(
                "prev_hash does not match the previous event's hash".into(),
            ));
            break;
        }
        if event_hash(prev_hash.as_deref(), &event).as_slice() != hash.as_slice() {
            report.broken = Some(broken(
                "stored hash does not match its contents: the event was altered".into(),
            ));
            break;
        }
        previous = Some((stream.clone(), version, hash));
    }
    Ok(report)
}
