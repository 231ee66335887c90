//! Replay requests: what an operator asks for, checked field by field, and recorded for a
//! runner (at most [`MAX_OPEN_REPLAYS`] at once).

use chrono::{DateTime, Utc};
use ra_ledger_cdc::replay::{DEFAULT_TARGET, replay_topic};
use serde::Deserialize;
use uuid::Uuid;

use crate::domain::{
    ASSIGNMENT_AGGREGATE, CONTACT_AGGREGATE, REASSIGNMENT_AGGREGATE, ValidationError,
};

/// Aggregate types a replay can select.
pub const AGGREGATES: [&str; 3] = [
    CONTACT_AGGREGATE,
    ASSIGNMENT_AGGREGATE,
    REASSIGNMENT_AGGREGATE,
];
/// What a replay selects when not told: the event topics consuming teams project from.
pub const DEFAULT_AGGREGATES: [&str; 2] = [ASSIGNMENT_AGGREGATE, CONTACT_AGGREGATE];
/// Event types a replay can select.
pub const EVENT_TYPES: [&str; 7] = [
    "ContactCreated",
    "ContactSuperseded",
    "AssignmentStarted",
    "AssignmentEnded",
    "ReassignmentPageRequested",
    "ReassignmentRowFailed",
    "ReassignmentCompleted",
];
/// Events per second when not told: a sixth of what one replay publishes unthrottled on the
/// 2-core dev machine (about 33,000 events/s on Apache Kafka), so the live relay keeps its
/// pace: beside a replay at 5,000 events/s the live p99 at 500 events/s was 13.9 ms, against
/// 13.3 ms alone (docs/benchmarks.md, "Replays beside the live load"). A full ledger of 10
/// million events takes 33 minutes.
pub const DEFAULT_RATE: u32 = 5_000;
/// The fastest a replay may be asked to go: the fastest rate measured beside the live load
/// (a replay asked for 20,000 events/s reached 18,576 on the 2-core dev machine, and the
/// live p99 was 14.1 ms against 13.3 ms alone; docs/benchmarks.md, "Replays beside the live
/// load"). Unthrottled, one replay publishes about 33,700 events/s there, and what that does
/// to the live path was not measured: a bound above the measured one would be a guess.
/// Four replays at once (`MAX_OPEN_REPLAYS`) add at most 80,000 events/s.
pub const MAX_RATE: u32 = 20_000;
/// The live topics' prefix when not told (the relay's default).
pub const DEFAULT_TOPIC_PREFIX: &str = ra_ledger_cdc::infra::settings::local::TOPIC_PREFIX;
/// Longest stream prefix accepted.
const MAX_STREAM_PREFIX: usize = 300;

/// What to replay, as an operator asks for it (JSON body of `POST /v1/replays`, or the
/// flags of `ledger replay start`). Unknown fields are refused.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// Aggregate types (`contact`, `assignment`, `reassignment`); default contact and
    /// assignment. One replay topic per aggregate type.
    #[serde(default)]
    pub aggregate_types: Option<Vec<String>>,
    /// Only these event types.
    #[serde(default)]
    pub event_types: Option<Vec<String>>,
    /// Only streams starting with this, e.g. `assignment-<business id>`.
    #[serde(default)]
    pub stream_prefix: Option<String>,
    /// Only events recorded at or after this instant.
    #[serde(default, deserialize_with = "crate::domain::rfc3339::option")]
    pub recorded_from: Option<DateTime<Utc>>,
    /// Only events recorded before this instant.
    #[serde(default, deserialize_with = "crate::domain::rfc3339::option")]
    pub recorded_to: Option<DateTime<Utc>>,
    /// At most this many events per second (default 5,000).
    #[serde(default)]
    pub rate: Option<u32>,
    /// The live topics' prefix (default `outbox.event.`).
    #[serde(default)]
    pub topic_prefix: Option<String>,
    /// Replay topic names, with `{live}` and `{id}` (default `{live}.replay.{id}`).
    #[serde(default)]
    pub target: Option<String>,
}

/// A checked [`ReplayRequest`]. As part of a [`super::ReplayStatus`] it shows what the
/// replay selects; its topics show there as the status's `targets`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Selection {
    /// Aggregate types, sorted, without repeats.
    pub aggregate_types: Vec<String>,
    /// Event types, or all.
    pub event_types: Option<Vec<String>>,
    /// Stream prefix, or all.
    pub stream_prefix: Option<String>,
    /// Recorded at or after.
    pub recorded_from: Option<DateTime<Utc>>,
    /// Recorded before.
    pub recorded_to: Option<DateTime<Utc>>,
    /// Events per second.
    pub rate: u32,
    /// Live topics' prefix.
    #[serde(skip)]
    pub topic_prefix: String,
    /// Replay topics' template.
    #[serde(skip)]
    pub target: String,
}

/// A Kafka topic name: 1 to 249 of `[A-Za-z0-9._-]`.
fn check_topic(field: &str, topic: &str) -> Result<(), ValidationError> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if topic.is_empty() || topic.len() > 249 || !topic.chars().all(legal) || topic == "." {
        return Err(ValidationError::new(
            field,
            format!(
                "{topic:?} is not a Kafka topic name (1 to 249 of letters, digits, '.', '_', '-')"
            ),
        ));
    }
    Ok(())
}

/// Sorted, without repeats, each one of `known`.
fn list(field: &str, values: Vec<String>, known: &[&str]) -> Result<Vec<String>, ValidationError> {
    if values.is_empty() {
        return Err(ValidationError::new(
            field,
            "must name at least one (leave it out for all)",
        ));
    }
    let mut values: Vec<String> = values
        .into_iter()
        .map(|value| {
            let trimmed = value.trim();
            known
                .iter()
                .find(|known| known.eq_ignore_ascii_case(trimmed))
                .map(|known| (*known).to_owned())
                .ok_or_else(|| {
                    ValidationError::new(
                        field,
                        format!("{value:?} is not one of {}", known.join(", ")),
                    )
                })
        })
        .collect::<Result<_, _>>()?;
    values.sort();
    values.dedup();
    Ok(values)
}

impl ReplayRequest {
    /// Checks every field; the error names the first bad one.
    pub fn validate(self) -> Result<Selection, ValidationError> {
        let aggregate_types = match self.aggregate_types {
            Some(values) => list("aggregate_types", values, &AGGREGATES)?,
            None => DEFAULT_AGGREGATES.iter().map(|a| (*a).to_owned()).collect(),
        };
        let event_types = self
            .event_types
            .map(|values| list("event_types", values, &EVENT_TYPES))
            .transpose()?;
        if let Some(prefix) = &self.stream_prefix {
            if prefix.is_empty() || prefix.len() > MAX_STREAM_PREFIX {
                return Err(ValidationError::new(
                    "stream_prefix",
                    format!("must be 1 to {MAX_STREAM_PREFIX} bytes (leave it out for all)"),
                ));
            }
            // Stream names are ASCII (`assignment-<uuid>-TX`): anything else matches none.
            if !prefix.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
                return Err(ValidationError::new(
                    "stream_prefix",
                    "must be printable ASCII, as stream names are",
                ));
            }
        }
        let within = |field, time| crate::domain::instant(field, time);
        let recorded_from = self
            .recorded_from
            .map(|time| within("recorded_from", time))
            .transpose()?;
        let recorded_to = self
            .recorded_to
            .map(|time| within("recorded_to", time))
            .transpose()?;
        if let (Some(from), Some(to)) = (recorded_from, recorded_to)
            && from >= to
        {
            return Err(ValidationError::new(
                "recorded_to",
                format!("{to} is not after recorded_from {from}"),
            ));
        }
        let rate = self.rate.unwrap_or(DEFAULT_RATE);
        if !(1..=MAX_RATE).contains(&rate) {
            return Err(ValidationError::new(
                "rate",
                format!(
                    "{rate} is not between 1 and {MAX_RATE} events per second ({MAX_RATE}: the \
                     fastest a replay was measured beside the live load without slowing it)"
                ),
            ));
        }
        let topic_prefix = self
            .topic_prefix
            .unwrap_or_else(|| DEFAULT_TOPIC_PREFIX.to_owned());
        check_topic("topic_prefix", &format!("{topic_prefix}x"))?;
        let target = self.target.unwrap_or_else(|| DEFAULT_TARGET.to_owned());
        if !target.contains("{id}") {
            return Err(ValidationError::new(
                "target",
                format!("{target:?} must contain {{id}}: each replay needs topics of its own"),
            ));
        }
        let sample_id = Uuid::nil().to_string();
        for aggregate in &aggregate_types {
            let live = format!("{topic_prefix}{aggregate}");
            check_topic("target", &replay_topic(&target, &live, &sample_id))?;
        }
        Ok(Selection {
            aggregate_types,
            event_types,
            stream_prefix: self.stream_prefix,
            recorded_from,
            recorded_to,
            rate,
            topic_prefix,
            target,
        })
    }
}

/// Records a replay request; a runner (`ledger worker`, or `ledger replay start`) starts it.
pub async fn request(
    client: &mut deadpool_postgres::Client,
    selection: &Selection,
    requested_by: &str,
) -> Result<Uuid, RequestError> {
    let id = Uuid::now_v7();
    let tx = client.transaction().await?;
    // One request at a time counts and inserts, so two cannot both take the last place.
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&REQUEST_LOCK_KEY])
        .await?;
    let open: i64 = tx
        .query_one(include_str!("../sql/replay/open_count.sql"), &[])
        .await?
        .get(0);
    if open >= MAX_OPEN_REPLAYS {
        return Err(RequestError::TooMany {
            open,
            limit: MAX_OPEN_REPLAYS,
        });
    }
    tx.execute(
        include_str!("../sql/replay/insert_replay.sql"),
        &[
            &id,
            &selection.aggregate_types,
            &selection.event_types,
            &selection.stream_prefix,
            &selection.recorded_from,
            &selection.recorded_to,
            &selection.topic_prefix,
            &selection.target,
            &(selection.rate as i32),
            &requested_by,
        ],
    )
    .await?;
    tx.commit().await?;
    Ok(id)
}

/// Replays requested or running at once, at most. Each reads the whole selection at up to
/// its rate (as much as [`MAX_RATE`]) and creates topics; beyond this many, a request is
/// refused rather than queued, so no token can stack up full-ledger replays.
pub const MAX_OPEN_REPLAYS: i64 = 4;

/// Advisory lock key of replay requests ("RALREPRQ").
const REQUEST_LOCK_KEY: i64 = 0x5241_4c52_4550_5251;

/// Why a replay was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// As many replays as allowed are already requested or running.
    #[error(
        "{open} replays are already requested or running, and at most {limit} may be at once: \
         wait until one completes or fails (GET /v1/replays/{{id}}, ledger replay status), then ask again"
    )]
    TooMany {
        /// Replays requested or running.
        open: i64,
        /// [`MAX_OPEN_REPLAYS`].
        limit: i64,
    },
    /// A statement failed.
    #[error("replay request: {}", crate::db::describe(.0))]
    Database(#[from] tokio_postgres::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replayable_aggregates_are_the_ones_the_relay_may_render_as_json() {
        assert_eq!(AGGREGATES, ra_ledger_cdc::value_format::ENVELOPE_AGGREGATES);
    }

    #[test]
    fn defaults_and_every_refusal_names_its_field() {
        let selection = ReplayRequest::default().validate().unwrap();
        assert_eq!(selection.aggregate_types, ["assignment", "contact"]);
        assert_eq!(selection.rate, DEFAULT_RATE);
        assert_eq!(selection.target, "{live}.replay.{id}");
        let selection = ReplayRequest {
            aggregate_types: Some(vec!["Assignment".into(), "assignment".into()]),
            event_types: Some(vec!["assignmentstarted".into()]),
            ..Default::default()
        }
        .validate()
        .unwrap();
        assert_eq!(selection.aggregate_types, ["assignment"]);
        assert_eq!(
            selection.event_types,
            Some(vec!["AssignmentStarted".into()])
        );
        let refused = |request: ReplayRequest| request.validate().unwrap_err().field;
        assert_eq!(
            refused(ReplayRequest {
                aggregate_types: Some(vec![]),
                ..Default::default()
            }),
            "aggregate_types"
        );
        assert_eq!(
            refused(ReplayRequest {
                aggregate_types: Some(vec!["digest".into()]),
                ..Default::default()
            }),
            "aggregate_types"
        );
        assert_eq!(
            refused(ReplayRequest {
                event_types: Some(vec!["Nope".into()]),
                ..Default::default()
            }),
            "event_types"
        );
        assert_eq!(
            refused(ReplayRequest {
                stream_prefix: Some(String::new()),
                ..Default::default()
            }),
            "stream_prefix"
        );
        assert_eq!(
            refused(ReplayRequest {
                stream_prefix: Some("a\u{0}b".into()),
                ..Default::default()
            }),
            "stream_prefix"
        );
        let now = Utc::now();
        assert_eq!(
            refused(ReplayRequest {
                recorded_from: Some(now),
                recorded_to: Some(now),
                ..Default::default()
            }),
            "recorded_to"
        );
        for rate in [0, MAX_RATE + 1, 1_000_000] {
            assert_eq!(
                refused(ReplayRequest {
                    rate: Some(rate),
                    ..Default::default()
                }),
                "rate"
            );
        }
        assert_eq!(
            refused(ReplayRequest {
                topic_prefix: Some("bad topic.".into()),
                ..Default::default()
            }),
            "topic_prefix"
        );
        for target in [
            "{live}.copy",
            "{live}/{id}",
            &format!("{}{{id}}", "x".repeat(240)),
        ] {
            assert_eq!(
                refused(ReplayRequest {
                    target: Some(target.into()),
                    ..Default::default()
                }),
                "target"
            );
        }
    }
}
