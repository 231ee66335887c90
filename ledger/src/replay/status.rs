//! Where replays stand: one replay's status row with its progress, and the newest ones
//! as the console lists them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use ra_ledger_cdc::replay::replay_topic;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::request::Selection;
use crate::db::cached;

/// Where a replay stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayState {
    /// Waiting for a runner.
    Requested,
    /// Started: past and handoff recorded, events going out.
    Running,
    /// Every event and every marker is on the replay topics.
    Complete,
    /// Stopped for good; `error` says why.
    Failed,
    /// Stopped for good by an operator (`cancelled_by`, `cancelled_at`): nothing more is
    /// published, and its place among the replays open at once is free.
    Cancelled,
}

impl ReplayState {
    /// The name the `replays` table keeps, and the pages show.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::Running => "running",
            Self::Complete => "complete",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether it ended, for good: complete, failed or cancelled.
    pub fn ended(self) -> bool {
        matches!(self, Self::Complete | Self::Failed | Self::Cancelled)
    }

    pub(super) fn parse(text: &str) -> Self {
        match text {
            "running" => Self::Running,
            "complete" => Self::Complete,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            _ => Self::Requested,
        }
    }
}

/// One replay topic and the live topic it hands off to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Target {
    /// The live topic.
    pub live_topic: String,
    /// The replay topic.
    pub replay_topic: String,
    /// Live partition -> first offset after the replay (once started).
    pub handoff: Option<BTreeMap<i32, i64>>,
}

/// A replay's progress, as `GET /v1/replays/{id}` and `ledger replay status` show it.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayStatus {
    /// Replay id.
    pub id: Uuid,
    /// State.
    pub status: ReplayState,
    /// What it selects: aggregate types, event types (all when absent), stream prefix,
    /// recorded from and to, events per second at most (its fields at the top of the JSON,
    /// as before).
    #[serde(flatten)]
    pub selection: Selection,
    /// Replay topics and handoffs.
    pub targets: Vec<Target>,
    /// The snapshot that defines the past (`xmin:xmax:xip`).
    pub snapshot: Option<String>,
    /// Selected events in the past.
    pub total_events: Option<i64>,
    /// Events acknowledged by Kafka (a resumed replay counts the batch it re-sends again).
    pub published: i64,
    /// Every selected event at or below this position is on the replay topics.
    pub checkpoint: i64,
    /// The highest position in the past.
    pub past_end_position: Option<i64>,
    /// Runner starts: 1, plus one per resume.
    pub attempts: i32,
    /// Who asked.
    pub requested_by: String,
    /// When.
    pub requested_at: DateTime<Utc>,
    /// When a runner recorded the past.
    pub started_at: Option<DateTime<Utc>>,
    /// Last checkpoint.
    pub progress_at: Option<DateTime<Utc>>,
    /// When the markers were written.
    pub completed_at: Option<DateTime<Utc>>,
    /// Who cancelled it.
    pub cancelled_by: Option<String>,
    /// When.
    pub cancelled_at: Option<DateTime<Utc>>,
    /// Why it failed, or the last error a runner will retry after.
    pub error: Option<String>,
    /// Published share of the total, 0 to 100.
    pub percent: f64,
    /// Average since start.
    pub events_per_second: Option<f64>,
    /// At that pace.
    pub eta_seconds: Option<f64>,
}

/// The replay `id`, if any.
pub async fn status(
    client: &impl GenericClient,
    id: Uuid,
) -> Result<Option<ReplayStatus>, tokio_postgres::Error> {
    let Some(row) = client
        .query_opt(include_str!("../sql/replay/status.sql"), &[&id])
        .await?
    else {
        return Ok(None);
    };
    let status = ReplayState::parse(row.get("status"));
    let aggregate_types: Vec<String> = row.get("aggregate_types");
    let topic_prefix: String = row.get("topic_prefix");
    let template: String = row.get("target_template");
    let handoff: Option<serde_json::Value> = row.get("handoff");
    let targets = targets(id, &aggregate_types, &topic_prefix, &template, handoff);
    let total: Option<i64> = row.get("total_events");
    let published: i64 = row.get("published");
    let started_at: Option<DateTime<Utc>> = row.get("started_at");
    let progress_at: Option<DateTime<Utc>> = row.get("progress_at");
    let Progress {
        percent,
        events_per_second,
        eta_seconds,
    } = progress(status, total, published, started_at.zip(progress_at));
    Ok(Some(ReplayStatus {
        id,
        status,
        selection: Selection {
            aggregate_types,
            event_types: row.get("event_types"),
            stream_prefix: row.get("stream_prefix"),
            recorded_from: row.get("recorded_from"),
            recorded_to: row.get("recorded_to"),
            rate: row.get::<_, i32>("rate") as u32,
            topic_prefix,
            target: template,
        },
        targets,
        snapshot: row.get("snapshot"),
        total_events: total,
        published,
        checkpoint: row.get("checkpoint"),
        past_end_position: row.get("past_end_position"),
        attempts: row.get("attempts"),
        requested_by: row.get("requested_by"),
        requested_at: row.get("requested_at"),
        started_at,
        progress_at,
        completed_at: row.get("completed_at"),
        cancelled_by: row.get("cancelled_by"),
        cancelled_at: row.get("cancelled_at"),
        error: row.get("error"),
        percent,
        events_per_second,
        eta_seconds,
    }))
}

/// The replay `id`'s topics: a replay topic per aggregate type, with the live topic it hands
/// off to and, once started, the offsets of the handoff (`handoff`, as stored).
fn targets(
    id: Uuid,
    aggregate_types: &[String],
    topic_prefix: &str,
    template: &str,
    handoff: Option<serde_json::Value>,
) -> Vec<Target> {
    let handoffs: BTreeMap<String, BTreeMap<i32, i64>> = handoff
        .and_then(|value| serde_json::from_value(value).ok())
        .unwrap_or_default();
    aggregate_types
        .iter()
        .map(|aggregate| {
            let live_topic = format!("{topic_prefix}{aggregate}");
            Target {
                replay_topic: replay_topic(template, &live_topic, &id.to_string()),
                handoff: handoffs.get(&live_topic).cloned(),
                live_topic,
            }
        })
        .collect()
}

/// How far a replay got, and at what pace.
#[derive(Debug, PartialEq)]
struct Progress {
    percent: f64,
    events_per_second: Option<f64>,
    eta_seconds: Option<f64>,
}

/// The progress of a replay in `status` that published `published` of `total` events,
/// between its start and its last checkpoint (`started_and_last`). Pure.
fn progress(
    status: ReplayState,
    total: Option<i64>,
    published: i64,
    started_and_last: Option<(DateTime<Utc>, DateTime<Utc>)>,
) -> Progress {
    let percent = match (status, total) {
        (ReplayState::Complete, _) => 100.0,
        (_, Some(total)) if total > 0 => (published.min(total) as f64 * 100.0) / total as f64,
        _ => 0.0,
    };
    let events_per_second = started_and_last.and_then(|(start, last)| {
        let seconds = (last - start).num_milliseconds() as f64 / 1000.0;
        (seconds > 0.0).then(|| published as f64 / seconds)
    });
    let eta_seconds = match (status, total, events_per_second) {
        (ReplayState::Running, Some(total), Some(rate)) if rate > 0.0 => {
            Some((total - published).max(0) as f64 / rate)
        }
        _ => None,
    };
    Progress {
        percent,
        events_per_second,
        eta_seconds,
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_the_published_share_and_the_pace_since_the_start() {
        let start = DateTime::from_timestamp(1_000, 0).unwrap();
        let ten_seconds = Some((start, start + chrono::Duration::seconds(10)));
        assert_eq!(
            progress(ReplayState::Running, Some(1_000), 250, ten_seconds),
            Progress {
                percent: 25.0,
                events_per_second: Some(25.0),
                eta_seconds: Some(30.0),
            }
        );
        assert_eq!(
            progress(ReplayState::Complete, Some(1_000), 1_200, ten_seconds),
            Progress {
                percent: 100.0,
                events_per_second: Some(120.0),
                eta_seconds: None,
            },
            "complete: a resend counted twice does not pass 100, and nothing is left"
        );
        assert_eq!(
            progress(ReplayState::Failed, Some(1_000), 1_200, None).percent,
            100.0,
            "the share is capped at the total"
        );
        assert_eq!(
            progress(ReplayState::Requested, None, 0, None),
            Progress {
                percent: 0.0,
                events_per_second: None,
                eta_seconds: None,
            },
            "not counted yet"
        );
        assert_eq!(
            progress(ReplayState::Running, Some(0), 0, Some((start, start))),
            Progress {
                percent: 0.0,
                events_per_second: None,
                eta_seconds: None,
            },
            "an empty past, no time yet"
        );
    }
}
