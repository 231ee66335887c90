//! Reassignment runs: another run for a superseded contact, a contact's runs, a run's
//! progress; and the 202 Accepted answer of whatever starts one.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Serialize;
use uuid::Uuid;

use super::extract::Body;
use super::{ApiError, AppState, auth, metadata, uuid_param};
use crate::commands::StartReassignment;
use crate::queries;
use crate::reassign::{self, RunStarted, RunStatus};

/// Where a run's progress is served.
fn status_url(run_id: Uuid) -> String {
    format!("/v1/reassignment-runs/{run_id}")
}

/// A started run, as the API answers with 202 Accepted.
#[derive(Debug, Serialize)]
pub(super) struct Accepted<T: Serialize> {
    #[serde(flatten)]
    body: T,
    /// Run id of the reassignment that repoints the old contact's active assignments.
    run_id: Uuid,
    /// Poll this for the run's progress.
    status_url: String,
}

pub(super) type AcceptedReply<T> = (
    StatusCode,
    [(axum::http::HeaderName, String); 1],
    Json<Accepted<T>>,
);

pub(super) fn accepted<T: Serialize>(run_id: Uuid, body: T) -> AcceptedReply<T> {
    let url = status_url(run_id);
    (
        StatusCode::ACCEPTED,
        [(axum::http::header::LOCATION, url.clone())],
        Json(Accepted {
            body,
            run_id,
            status_url: url,
        }),
    )
}

pub(super) async fn start_reassignment(
    State(state): State<AppState>,
    auth::Writer(principal): auth::Writer,
    Path(id): Path<String>,
    Body(command): Body<StartReassignment>,
) -> Result<AcceptedReply<RunStarted>, ApiError> {
    let id = uuid_param("contact id", &id)?;
    let run = state
        .ledger
        .start_reassignment(id, command, &metadata(&principal))
        .await?;
    Ok(accepted(run.run_id, run))
}

pub(super) async fn reassignment_run(
    State(state): State<AppState>,
    _reader: auth::Reader,
    Path(id): Path<String>,
) -> Result<Json<RunStatus>, ApiError> {
    let id = uuid_param("run id", &id)?;
    let client = state.ledger.pool().get().await?;
    reassign::status(&client, id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("reassignment run {id} not found")))
}

/// Runs of one contact.
#[derive(Debug, Serialize)]
pub(super) struct RunList {
    /// Newest first.
    items: Vec<RunStatus>,
}

pub(super) async fn contact_runs(
    State(state): State<AppState>,
    _reader: auth::Reader,
    Path(id): Path<String>,
) -> Result<Json<RunList>, ApiError> {
    let id = uuid_param("contact id", &id)?;
    let client = state.ledger.pool().get().await?;
    if queries::contact(&client, id).await?.is_none() {
        return Err(ApiError::not_found(format!("contact {id} not found")));
    }
    let mut items = Vec::new();
    for run_id in reassign::runs_of(&client, id).await? {
        items.extend(reassign::status(&client, run_id).await?);
    }
    Ok(Json(RunList { items }))
}
