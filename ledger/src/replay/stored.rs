//! A replay as stored, read by the runner, and why a run stops short: what the run, its
//! Kafka side and the handoff all share.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::Object;
use ra_ledger_cdc::replay::replay_topic;
use uuid::Uuid;

use super::ReplayState;

/// Why a run stopped short.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No such replay.
    #[error("no replay {0}")]
    NotFound(Uuid),
    /// The database failed; the replay resumes from its checkpoint.
    #[error("database: {}", crate::db::describe(.0))]
    Database(#[from] tokio_postgres::Error),
    /// No connection.
    #[error("no database connection: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// Kafka failed; the replay resumes from its checkpoint.
    #[error("Kafka: {0}")]
    Kafka(String),
    /// Older transactions did not end in time; the start is retried.
    #[error(
        "transactions older than the replay are still open after {0:?} ({1}); the start is retried"
    )]
    OlderTransactions(Duration, String),
    /// The replay cannot go on; it is marked failed.
    #[error("{0}")]
    Failed(String),
}

/// The stored replay, as a runner needs it.
pub(super) struct Replay {
    pub(super) id: Uuid,
    pub(super) status: ReplayState,
    pub(super) aggregate_types: Vec<String>,
    pub(super) event_types: Option<Vec<String>>,
    pub(super) stream_prefix: Option<String>,
    pub(super) recorded_from: Option<DateTime<Utc>>,
    pub(super) recorded_to: Option<DateTime<Utc>>,
    pub(super) topic_prefix: String,
    pub(super) template: String,
    pub(super) rate: u32,
    pub(super) handoff: BTreeMap<String, BTreeMap<i32, i64>>,
    pub(super) topic_events: BTreeMap<String, u64>,
    pub(super) snapshot: Option<String>,
    pub(super) past_end: i64,
    pub(super) total: i64,
    pub(super) checkpoint: i64,
}

impl Replay {
    pub(super) async fn load(client: &Object, id: Uuid) -> Result<Self, RunError> {
        let row = client
            .query_opt(include_str!("../sql/replay/replay_row.sql"), &[&id])
            .await?
            .ok_or(RunError::NotFound(id))?;
        let json = |column: &str| -> Option<serde_json::Value> { row.get(column) };
        Ok(Self {
            id,
            status: ReplayState::parse(row.get("status")),
            aggregate_types: row.get("aggregate_types"),
            event_types: row.get("event_types"),
            stream_prefix: row.get("stream_prefix"),
            recorded_from: row.get("recorded_from"),
            recorded_to: row.get("recorded_to"),
            topic_prefix: row.get("topic_prefix"),
            template: row.get("target_template"),
            rate: row.get::<_, i32>("rate").max(1) as u32,
            handoff: json("handoff")
                .and_then(|value| serde_json::from_value(value).ok())
                .unwrap_or_default(),
            topic_events: json("topic_events")
                .and_then(|value| serde_json::from_value(value).ok())
                .unwrap_or_default(),
            snapshot: row.get("snapshot"),
            past_end: row.get::<_, Option<i64>>("past_end_position").unwrap_or(0),
            total: row.get::<_, Option<i64>>("total_events").unwrap_or(0),
            checkpoint: row.get("checkpoint"),
        })
    }

    pub(super) fn live_topic(&self, aggregate: &str) -> String {
        format!("{}{aggregate}", self.topic_prefix)
    }

    pub(super) fn replay_topic(&self, live_topic: &str) -> String {
        replay_topic(&self.template, live_topic, &self.id.to_string())
    }
}
