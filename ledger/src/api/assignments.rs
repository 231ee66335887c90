//! Assignments: a business subscribes, an assignment is read, ended or REPLACEd.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::extract::Body;
use super::{ApiError, AppState, auth, metadata, uuid_param};
use crate::commands::{Assign, ChangeAssignment};
use crate::queries::AssignmentView;

pub(super) async fn assign(
    State(state): State<AppState>,
    auth::Writer(principal): auth::Writer,
    Body(command): Body<Assign>,
) -> Result<(StatusCode, Json<AssignmentView>), ApiError> {
    let assignment = state.ledger.assign(command, &metadata(&principal)).await?;
    Ok((StatusCode::CREATED, Json(assignment)))
}

/// A batch of assignments (`POST /v1/assignments/batch`).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AssignBatch {
    /// 1 to 1,000 assignments; all are started or none.
    items: Vec<Assign>,
}

/// The started assignments, in the order of the request's items.
#[derive(Debug, serde::Serialize)]
pub(super) struct AssignedBatch {
    items: Vec<AssignmentView>,
}

pub(super) async fn assign_batch(
    State(state): State<AppState>,
    auth::Writer(principal): auth::Writer,
    Body(batch): Body<AssignBatch>,
) -> Result<(StatusCode, Json<AssignedBatch>), ApiError> {
    let items = state
        .ledger
        .assign_batch(batch.items, &metadata(&principal))
        .await?;
    Ok((StatusCode::CREATED, Json(AssignedBatch { items })))
}

pub(super) async fn get_assignment(
    State(state): State<AppState>,
    _reader: auth::Reader,
    Path(id): Path<String>,
) -> Result<Json<AssignmentView>, ApiError> {
    Ok(Json(
        state
            .ledger
            .assignment(uuid_param("assignment id", &id)?)
            .await?,
    ))
}

pub(super) async fn end_assignment(
    State(state): State<AppState>,
    auth::Writer(principal): auth::Writer,
    Path(id): Path<String>,
    Body(command): Body<ChangeAssignment>,
) -> Result<Json<AssignmentView>, ApiError> {
    let id = uuid_param("assignment id", &id)?;
    Ok(Json(
        state
            .ledger
            .end_assignment(id, command, &metadata(&principal))
            .await?,
    ))
}

pub(super) async fn replace_assignment(
    State(state): State<AppState>,
    auth::Writer(principal): auth::Writer,
    Path(id): Path<String>,
    Body(command): Body<ChangeAssignment>,
) -> Result<(StatusCode, Json<AssignmentView>), ApiError> {
    let id = uuid_param("assignment id", &id)?;
    let replacement = state
        .ledger
        .replace_assignment(id, command, &metadata(&principal))
        .await?;
    Ok((StatusCode::CREATED, Json(replacement)))
}
