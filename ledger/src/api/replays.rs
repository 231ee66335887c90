//! Replays, for operators: ask for one (a `ledger worker` runs it), watch it, and cancel
//! it. Asking and cancelling need an operator token, and at most
//! [`replay::MAX_OPEN_REPLAYS`] may be requested or running at once (429 beyond; a cancel
//! frees a place).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Serialize;
use uuid::Uuid;

use super::extract::Body;
use super::{ApiError, AppState, auth, uuid_param};
use crate::error::CommandError;
use crate::replay::{self, Cancel, ReplayRequest, ReplayState, ReplayStatus, RequestError};

/// Where a replay's progress is served.
fn status_url(id: Uuid) -> String {
    format!("/v1/replays/{id}")
}

/// A recorded replay request.
#[derive(Debug, Serialize)]
pub(super) struct ReplayAccepted {
    replay_id: Uuid,
    /// Poll this for its progress and, once complete, its handoff offsets.
    status_url: String,
    #[serde(flatten)]
    status: ReplayStatus,
}

pub(super) async fn request_replay(
    State(state): State<AppState>,
    auth::Operator(principal): auth::Operator,
    Body(request): Body<ReplayRequest>,
) -> Result<
    (
        StatusCode,
        [(axum::http::HeaderName, String); 1],
        Json<ReplayAccepted>,
    ),
    ApiError,
> {
    let selection = request.validate().map_err(CommandError::from)?;
    let mut client = state.ledger.pool().get().await?;
    let id = replay::request(&mut client, &selection, &principal.name)
        .await
        .map_err(|error| match error {
            RequestError::TooMany { .. } => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_replays",
                error.to_string(),
            ),
            RequestError::Database(error) => error.into(),
        })?;
    let status = replay::status(&client, id)
        .await?
        .ok_or_else(|| ApiError::internal(&"a recorded replay is not found"))?;
    let url = status_url(id);
    Ok((
        StatusCode::ACCEPTED,
        [(axum::http::header::LOCATION, url.clone())],
        Json(ReplayAccepted {
            replay_id: id,
            status_url: url,
            status,
        }),
    ))
}

pub(super) async fn replay_status(
    State(state): State<AppState>,
    _reader: auth::Reader,
    Path(id): Path<String>,
) -> Result<Json<ReplayStatus>, ApiError> {
    let id = uuid_param("replay id", &id)?;
    let client = state.ledger.pool().get().await?;
    replay::status(&client, id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("replay {id} not found")))
}

/// Cancels a requested or running replay: 200 with its status, `cancelled` (also when it
/// was cancelled before); 409 when it had completed or failed; 404 when there is none.
pub(super) async fn cancel_replay(
    State(state): State<AppState>,
    auth::Operator(principal): auth::Operator,
    Path(id): Path<String>,
) -> Result<Json<ReplayStatus>, ApiError> {
    let id = uuid_param("replay id", &id)?;
    let client = state.ledger.pool().get().await?;
    match replay::cancel(&client, id, &principal.name).await? {
        Cancel::Cancelled | Cancel::AlreadyEnded(ReplayState::Cancelled) => {}
        Cancel::AlreadyEnded(ended) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!(
                    "replay {id} is {} already: there is nothing to cancel",
                    ended.as_str()
                ),
            ));
        }
        Cancel::NotFound => return Err(ApiError::not_found(format!("replay {id} not found"))),
    }
    replay::status(&client, id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("replay {id} not found")))
}
