//! One verdict on the whole pipeline, the way an on-call engineer reads a status page:
//! healthy, degraded or failing, with the one reason that decides it and its runbook
//! section (issue 48). The same verdict heads the console's operations page, answers at
//! `GET /status` for a load balancer or a status page, and is printed by `deploy/stack
//! status`.
//!
//! - [`rules`]: the rules, pure, in the order they are applied, with their tests.
//! - [`read`]: the facts, from the database at one moment; with a witness policy
//!   ([`Witnessing`]), the witnesses' last answers and the newest checkpoints' quorum too.
//! - [`router`]: `GET /status`, without a token like `/readyz`: 200 while healthy or
//!   degraded (events still flow), 503 when failing or when the database does not answer.

pub mod rules;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use chrono::Utc;
use deadpool_postgres::{GenericClient, Pool};

use self::rules::{Facts, State as Health, Verdict, WitnessFact, WitnessFacts};
use crate::digest::cosign::Outcome;
use crate::lag;
use crate::tlog::policy::Policy;

/// What the verdict watches of the witnesses, with a witness policy.
#[derive(Debug, Clone)]
pub struct Witnessing {
    /// The policy: its witnesses and quorum.
    pub policy: std::sync::Arc<Policy>,
    /// How long the quorum may be short before the verdict is degraded: a few digest
    /// intervals.
    pub short_after: std::time::Duration,
}

impl Witnessing {
    /// The quorum may be short for three digest intervals, or three rounds when they are
    /// slower: a checkpoint waits for a round, and a witness down for a round is no news.
    pub fn new(
        policy: std::sync::Arc<Policy>,
        digest_interval: std::time::Duration,
        round_interval: std::time::Duration,
    ) -> Self {
        Self {
            policy,
            short_after: 3 * digest_interval.max(round_interval),
        }
    }
}

/// The path of the endpoint.
pub const PATH: &str = "/status";

/// The facts about the relay's slot `slot`, and the witnesses of `witnessing`, read now.
pub async fn read(
    client: &impl GenericClient,
    slot: &str,
    witnessing: Option<&Witnessing>,
) -> Result<Facts, tokio_postgres::Error> {
    let progress = lag::slot_progress(client, slot).await?;
    let row = client
        .query_one(include_str!("../sql/verdict/facts.sql"), &[&slot])
        .await?;
    Ok(Facts {
        slot_name: slot.to_owned(),
        slot: progress,
        slot_registered: row.get("slot_registered"),
        relay_refused: row.get("relay_refused"),
        parked_waiting: row.get("parked_waiting"),
        replays_failed: row.get("replays_failed"),
        newest_failed_replay: row.get("newest_failed_replay"),
        events_missing: row.get("events_missing"),
        first_missing: row.get("first_missing"),
        now: Utc::now(),
        witnesses: match witnessing {
            Some(witnessing) => Some(witnesses(client, witnessing).await?),
            None => None,
        },
    })
}

/// The witnesses' last answers and the newest checkpoints' quorum.
pub async fn witnesses(
    client: &impl GenericClient,
    witnessing: &Witnessing,
) -> Result<WitnessFacts, tokio_postgres::Error> {
    let names: Vec<&str> = witnessing
        .policy
        .witnesses
        .iter()
        .map(|w| w.name.as_str())
        .collect();
    let witnesses = client
        .query(include_str!("../sql/verdict/witnesses.sql"), &[&names])
        .await?
        .iter()
        .map(|row| WitnessFact {
            name: row.get("name"),
            outcome: row
                .get::<_, Option<i16>>("outcome")
                .and_then(Outcome::from_stored),
            reason: row.get("reason"),
            digest_seq: row.get("digest_seq"),
            size: row.get::<_, Option<i64>>("size").unwrap_or(0) as u64,
            answered_at: row.get("updated_at"),
        })
        .collect();
    let row = client
        .query_one(include_str!("../sql/verdict/checkpoints.sql"), &[])
        .await?;
    let newest: Option<i64> = row.get("newest");
    Ok(WitnessFacts {
        quorum: witnessing.policy.describe(),
        witnesses,
        newest,
        newest_met: newest.is_some() && newest == Some(row.get::<_, i64>("newest_met")),
        short_since: row.get("short_since"),
        short_after: chrono::Duration::from_std(witnessing.short_after)
            .unwrap_or(chrono::Duration::MAX),
    })
}

/// What the endpoint serves.
#[derive(Debug, Clone)]
struct Status {
    pool: Pool,
    slot: String,
    witnessing: Option<Witnessing>,
}

/// Routes `GET /status` for the relay's slot `slot` and the witnesses of `witnessing`.
pub fn router(pool: Pool, slot: String, witnessing: Option<Witnessing>) -> Router {
    Router::new().route(PATH, get(status)).with_state(Status {
        pool,
        slot,
        witnessing,
    })
}

async fn status(State(status): State<Status>) -> (StatusCode, Json<Verdict>) {
    let read = async {
        let client = status.pool.get().await.map_err(|error| error.to_string())?;
        read(&client, &status.slot, status.witnessing.as_ref())
            .await
            .map_err(|error| crate::db::describe(&error))
    };
    let verdict = match read.await {
        Ok(facts) => rules::verdict(&facts),
        Err(error) => Verdict {
            state: Health::Failing,
            reason: format!("the ledger database does not answer: {error}"),
            runbook: Some("docs/operators.md#what-to-do-when-"),
            also: Vec::new(),
        },
    };
    let code = if verdict.state == Health::Failing {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, Json(verdict))
}
