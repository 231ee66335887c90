//! One verdict on the whole pipeline, the way an on-call engineer reads a status page:
//! healthy, degraded or failing, with the one reason that decides it and its runbook
//! section (issue 48). The same verdict heads the console's operations page, answers at
//! `GET /status` for a load balancer or a status page, and is printed by `deploy/stack
//! status`.
//!
//! - [`rules`]: the rules, pure, in the order they are applied, with their tests.
//! - [`read`]: the facts, from the database at one moment.
//! - [`router`]: `GET /status`, without a token like `/readyz`: 200 while healthy or
//!   degraded (events still flow), 503 when failing or when the database does not answer.

pub mod rules;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use chrono::Utc;
use deadpool_postgres::{GenericClient, Pool};

use self::rules::{Facts, State as Health, Verdict};
use crate::lag;

/// The path of the endpoint.
pub const PATH: &str = "/status";

/// The facts about the relay's slot `slot`, read now.
pub async fn read(client: &impl GenericClient, slot: &str) -> Result<Facts, tokio_postgres::Error> {
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
    })
}

/// What the endpoint serves.
#[derive(Debug, Clone)]
struct Status {
    pool: Pool,
    slot: String,
}

/// Routes `GET /status` for the relay's slot `slot`.
pub fn router(pool: Pool, slot: String) -> Router {
    Router::new()
        .route(PATH, get(status))
        .with_state(Status { pool, slot })
}

async fn status(State(status): State<Status>) -> (StatusCode, Json<Verdict>) {
    let read = async {
        let client = status.pool.get().await.map_err(|error| error.to_string())?;
        read(&client, &status.slot)
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
