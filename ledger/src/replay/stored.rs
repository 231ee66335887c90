//! A replay as stored, read by the runner, and why a run stops short: what the run, its
//! Kafka side and the handoff all share.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::Object;
use ra_ledger_cdc::replay::replay_topic;
use uuid::Uuid;

use super::ReplayState;
use crate::error::Disclosed;

/// Why a run stopped short. Its `Display` is for the runner's log and the terminal of
/// `ledger replay`, with every cause; what the replay's `error` shows anyone who reads it
/// is [`RunError::disclosed`]. Whether the replay is retried or stopped for good is
/// [`RunError::ends_the_replay`].
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
    /// A live topic of the replay does not exist; the start is retried.
    #[error("live topic {0} does not exist (ledger topics create)")]
    LiveTopicMissing(String),
    /// Older transactions did not end in time; the start is retried.
    #[error(
        "transactions older than the replay are still open after {0:?} ({1}); the start is retried"
    )]
    OlderTransactions(Duration, String),
    /// Kafka refuses an event for good; the replay is marked failed.
    #[error("Kafka refuses event {event_id} for good: {reason}")]
    Refused {
        /// The event.
        event_id: String,
        /// Kafka's reason.
        reason: String,
    },
    /// The replay topic exists with another partition count than its live topic; the
    /// replay is marked failed.
    #[error("replay topic {topic} exists with {existing} partitions, its live topic has {live}")]
    PartitionsDiffer {
        /// The replay topic.
        topic: String,
        /// Its partitions.
        existing: i32,
        /// The live topic's.
        live: i32,
    },
    /// The runner's Kafka settings make no client; the replay is marked failed.
    #[error("Kafka settings: {0}")]
    Settings(String),
    /// The schema registry did not answer which live topics are framed; the replay
    /// resumes from its checkpoint.
    #[error("schema registry: {0}")]
    Registry(String),
    /// The stored replay contradicts itself; it is marked failed.
    #[error("{0}")]
    Inconsistent(String),
}

impl RunError {
    /// Whether the replay cannot go on: it is marked failed. Every other error leaves it
    /// to be retried from its checkpoint, by this runner or the next.
    pub fn ends_the_replay(&self) -> bool {
        // The message, the topic or the settings are wrong: the same request fails again.
        matches!(
            self,
            Self::Refused { .. }
                | Self::PartitionsDiffer { .. }
                | Self::Settings(_)
                | Self::Inconsistent(_)
        )
    }

    /// What a replay's `error` discloses: a stable code and a sentence, the shape of the
    /// API's errors, written `code: sentence`. Never the database's or Kafka's text, a
    /// SQLSTATE, a table name or a PID: those go to the runner's log under a reference
    /// the sentence names (the codes: docs/security.md).
    pub fn disclosed(&self) -> Disclosed {
        let retried = "the replay is retried from its checkpoint";
        match self {
            Self::NotFound(id) => said("not_found", format!("no replay {id}")),
            Self::Pool(_) => said(
                "unavailable",
                format!("the ledger database is unavailable; {retried}"),
            ),
            Self::Database(_) => logged(
                "internal",
                &format!("a database statement of the replay failed; {retried}"),
                self,
            ),
            Self::Kafka(_) => logged(
                "kafka_unavailable",
                &format!("Kafka did not take or answer a request of the replay; {retried}"),
                self,
            ),
            Self::Registry(_) => logged(
                "registry_unavailable",
                &format!(
                    "the schema registry did not answer which live topics are framed; {retried}"
                ),
                self,
            ),
            Self::LiveTopicMissing(topic) => said(
                "live_topic_missing",
                format!(
                    "live topic {topic} does not exist: create it (ledger topics create), and \
                     the replay starts"
                ),
            ),
            Self::OlderTransactions(waited, _) => logged(
                "older_transactions",
                &format!(
                    "transactions older than the replay were still open after {} s; the start \
                     is retried",
                    waited.as_secs()
                ),
                self,
            ),
            Self::Refused { event_id, .. } => logged(
                "kafka_refused",
                &format!("Kafka refuses event {event_id} for good; the replay is stopped"),
                self,
            ),
            Self::PartitionsDiffer {
                topic,
                existing,
                live,
            } => said(
                "replay_topic_mismatch",
                format!(
                    "replay topic {topic} exists with {existing} partitions and its live topic \
                     has {live}; delete it, or ask for a replay with another target"
                ),
            ),
            Self::Settings(_) => logged(
                "invalid_settings",
                "the runner's Kafka settings make no client; the replay is stopped",
                self,
            ),
            Self::Inconsistent(_) => logged(
                "internal",
                "the stored replay contradicts itself; the replay is stopped",
                self,
            ),
        }
    }
}

/// A disclosure whose sentence is all there is to it.
fn said(code: &'static str, message: String) -> Disclosed {
    Disclosed { code, message }
}

/// A disclosure whose cause is for the runner's log only, under a fresh reference.
fn logged(code: &'static str, sentence: &str, cause: &RunError) -> Disclosed {
    let reference = Uuid::now_v7();
    tracing::warn!(%reference, code, cause = %cause, "replay error: {sentence}");
    Disclosed {
        code,
        message: format!(
            "{sentence}; the runner's log (ledger worker, or the ledger replay command) has the \
             cause under reference {reference}"
        ),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disclosed_run_error_is_a_code_and_a_sentence_without_the_cause() {
        let cases = [
            (
                RunError::Kafka("metadata of t: Local: Broker transport failure".into()),
                "kafka_unavailable",
                "Local:",
            ),
            (
                RunError::OlderTransactions(Duration::from_secs(60), "xid 1234 (pid 5678)".into()),
                "older_transactions",
                "5678",
            ),
            (
                RunError::Refused {
                    event_id: "e1".into(),
                    reason: "Broker: Message size too large".into(),
                },
                "kafka_refused",
                "Broker",
            ),
            (
                RunError::Settings("ssl.ca.location: No such file".into()),
                "invalid_settings",
                "ssl.ca",
            ),
            (
                RunError::Inconsistent("a running replay without a snapshot".into()),
                "internal",
                "snapshot",
            ),
        ];
        for (error, code, cause) in cases {
            let disclosed = error.disclosed();
            let text = disclosed.to_string();
            assert_eq!(disclosed.code, code, "{text}");
            assert!(text.starts_with(&format!("{code}: ")), "{text}");
            assert!(text.contains("under reference "), "{text}");
            assert!(!text.contains(cause), "{cause:?} disclosed: {text}");
            assert!(error.to_string().contains(cause), "the log keeps {cause:?}");
        }
        let missing = RunError::LiveTopicMissing("outbox.event.contact".into()).disclosed();
        assert_eq!(missing.code, "live_topic_missing");
        assert!(
            missing.message.contains("ledger topics create"),
            "{missing}"
        );
        // What ends the replay and what is retried.
        assert!(RunError::Settings(String::new()).ends_the_replay());
        assert!(!RunError::Kafka(String::new()).ends_the_replay());
        assert!(!RunError::LiveTopicMissing(String::new()).ends_the_replay());
    }
}
