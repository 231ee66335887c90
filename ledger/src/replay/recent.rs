//! The newest replays, as the console's operations page lists them.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::ReplayState;
use crate::db::cached;

/// A replay in a list: where it stands, without its targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplaySummary {
    /// Replay id.
    pub id: Uuid,
    /// Where it stands.
    pub status: ReplayState,
    /// Events published so far.
    pub published: i64,
    /// Events it selects, once a runner counted them.
    pub total_events: Option<i64>,
    /// When it was asked for.
    pub requested_at: DateTime<Utc>,
}

/// The newest `limit` replays, newest first.
pub async fn recent(
    client: &impl GenericClient,
    limit: i64,
) -> Result<Vec<ReplaySummary>, tokio_postgres::Error> {
    Ok(
        cached::query(client, include_str!("../sql/replay/recent.sql"), &[&limit])
            .await?
            .iter()
            .map(|row| ReplaySummary {
                id: row.get(0),
                status: ReplayState::parse(row.get(1)),
                published: row.get(2),
                total_events: row.get(3),
                requested_at: row.get(4),
            })
            .collect(),
    )
}
