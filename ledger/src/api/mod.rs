//! The HTTP API (`ledger serve`): JSON commands and audit queries, bearer-token auth,
//! an OpenAPI document at `/openapi.json`.

mod auth;
mod cursor;
mod error;
mod extract;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use auth::{Role, TokenSpecError, Tokens};
pub use cursor::CursorKey;
pub use error::ApiError;
use extract::{Body, Query};

use crate::commands::{
    Assign, ChangeAssignment, CreateContact, Ledger, StartReassignment, SupersedeContact,
};
use crate::domain::Jurisdiction;
use crate::queries::{self, AssignmentView, ContactView, HistoryCursor, RegisteredAgent};
use crate::reassign::{self, RunStarted, RunStatus};
use crate::store::Metadata;

/// Most history rows one page returns; larger `limit`s are clamped to it.
pub const MAX_PAGE: u32 = 500;
/// History rows per page when `limit` is not given.
pub const DEFAULT_PAGE: u32 = 50;

/// Shared state of the handlers.
#[derive(Debug, Clone)]
pub struct AppState {
    /// Command side.
    pub ledger: Ledger,
    /// Configured tokens.
    pub tokens: Tokens,
    /// Signs history cursors.
    pub cursor_key: CursorKey,
}

/// The API routes (health endpoints are added by the caller).
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/openapi.json", get(openapi))
        .route("/v1/contacts", post(create_contact))
        .route("/v1/contacts/{id}", get(get_contact))
        .route("/v1/contacts/{id}/supersede", post(supersede_contact))
        .route("/v1/contacts/{id}/lineage", get(contact_lineage))
        .route(
            "/v1/contacts/{id}/reassignment-runs",
            post(start_reassignment).get(contact_runs),
        )
        .route("/v1/reassignment-runs/{id}", get(reassignment_run))
        .route("/v1/assignments", post(assign))
        .route("/v1/assignments/{id}", get(get_assignment))
        .route("/v1/assignments/{id}/end", post(end_assignment))
        .route("/v1/assignments/{id}/replace", post(replace_assignment))
        .route(
            "/v1/businesses/{business_id}/jurisdictions/{jurisdiction}/registered-agent",
            get(registered_agent_at),
        )
        .route(
            "/v1/businesses/{business_id}/jurisdictions/{jurisdiction}/registered-agents",
            get(registered_agents_during),
        )
        .route(
            "/v1/businesses/{business_id}/assignments",
            get(assignment_history),
        )
        .with_state(state)
}

async fn openapi() -> ([(axum::http::HeaderName, &'static str); 1], &'static str) {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        include_str!("openapi.json"),
    )
}

fn metadata(principal: &auth::Principal) -> Metadata {
    let request = Uuid::now_v7();
    Metadata {
        actor: principal.name.clone(),
        correlation_id: request,
        causation_id: Some(request),
    }
}

fn uuid_param(name: &str, value: &str) -> Result<Uuid, ApiError> {
    value
        .parse()
        .map_err(|_| ApiError::bad_request(format!("{name} {value:?} is not a UUID")))
}

async fn create_contact(
    State(state): State<AppState>,
    auth::Writer(principal): auth::Writer,
    Body(command): Body<CreateContact>,
) -> Result<(StatusCode, Json<ContactView>), ApiError> {
    let contact = state
        .ledger
        .create_contact(command, &metadata(&principal))
        .await?;
    Ok((StatusCode::CREATED, Json(contact)))
}

async fn get_contact(
    State(state): State<AppState>,
    _reader: auth::Reader,
    Path(id): Path<String>,
) -> Result<Json<ContactView>, ApiError> {
    Ok(Json(
        state.ledger.contact(uuid_param("contact id", &id)?).await?,
    ))
}

/// Where a run's progress is served.
fn status_url(run_id: Uuid) -> String {
    format!("/v1/reassignment-runs/{run_id}")
}

/// A started run, as the API answers with 202 Accepted.
#[derive(Debug, Serialize)]
struct Accepted<T: Serialize> {
    #[serde(flatten)]
    body: T,
    /// Run id of the reassignment that repoints the old contact's active assignments.
    run_id: Uuid,
    /// Poll this for the run's progress.
    status_url: String,
}

type AcceptedReply<T> = (
    StatusCode,
    [(axum::http::HeaderName, String); 1],
    Json<Accepted<T>>,
);

fn accepted<T: Serialize>(run_id: Uuid, body: T) -> AcceptedReply<T> {
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

async fn supersede_contact(
    State(state): State<AppState>,
    auth::Writer(principal): auth::Writer,
    Path(id): Path<String>,
    Body(command): Body<SupersedeContact>,
) -> Result<AcceptedReply<crate::commands::Superseded>, ApiError> {
    let id = uuid_param("contact id", &id)?;
    let superseded = state
        .ledger
        .supersede_contact(id, command, &metadata(&principal))
        .await?;
    Ok(accepted(superseded.run.run_id, superseded))
}

async fn start_reassignment(
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

async fn reassignment_run(
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
struct RunList {
    /// Newest first.
    items: Vec<RunStatus>,
}

async fn contact_runs(
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

async fn contact_lineage(
    State(state): State<AppState>,
    _reader: auth::Reader,
    Path(id): Path<String>,
) -> Result<Json<Vec<ContactView>>, ApiError> {
    let id = uuid_param("contact id", &id)?;
    let client = state.ledger.pool().get().await?;
    let lineage = queries::lineage(&client, id).await?;
    if lineage.is_empty() {
        return Err(ApiError::not_found(format!("contact {id} not found")));
    }
    Ok(Json(lineage))
}

async fn assign(
    State(state): State<AppState>,
    auth::Writer(principal): auth::Writer,
    Body(command): Body<Assign>,
) -> Result<(StatusCode, Json<AssignmentView>), ApiError> {
    let assignment = state.ledger.assign(command, &metadata(&principal)).await?;
    Ok((StatusCode::CREATED, Json(assignment)))
}

async fn get_assignment(
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

async fn end_assignment(
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

async fn replace_assignment(
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

/// Query of "who was the RA at T".
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AtQuery {
    /// Business time; defaults to now.
    at: Option<DateTime<Utc>>,
    /// Transaction time: only what the ledger had recorded by then; defaults to now.
    known_at: Option<DateTime<Utc>>,
}

fn registration(business_id: &str, jurisdiction: &str) -> Result<(Uuid, Jurisdiction), ApiError> {
    let business_id = uuid_param("business id", business_id)?;
    let jurisdiction = Jurisdiction::parse("jurisdiction", jurisdiction)
        .map_err(|error| ApiError::bad_request(error.to_string()))?;
    Ok((business_id, jurisdiction))
}

async fn registered_agent_at(
    State(state): State<AppState>,
    _reader: auth::Reader,
    Path((business_id, jurisdiction)): Path<(String, String)>,
    Query(query): Query<AtQuery>,
) -> Result<Json<RegisteredAgent>, ApiError> {
    let (business_id, jurisdiction) = registration(&business_id, &jurisdiction)?;
    let now = Utc::now();
    let at = query.at.unwrap_or(now);
    let known_at = query.known_at.unwrap_or(now);
    let client = state.ledger.pool().get().await?;
    queries::registered_agent_at(&client, business_id, jurisdiction, at, known_at)
        .await?
        .map(Json)
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "business {business_id} had no registered agent in {} at {at} (as known at {known_at})",
                jurisdiction.code()
            ))
        })
}

/// Query of "every RA during a period".
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PeriodQuery {
    /// Start of the period (inclusive).
    from: DateTime<Utc>,
    /// End of the period (exclusive).
    to: DateTime<Utc>,
}

async fn registered_agents_during(
    State(state): State<AppState>,
    _reader: auth::Reader,
    Path((business_id, jurisdiction)): Path<(String, String)>,
    Query(query): Query<PeriodQuery>,
) -> Result<Json<Vec<RegisteredAgent>>, ApiError> {
    let (business_id, jurisdiction) = registration(&business_id, &jurisdiction)?;
    if query.to <= query.from {
        return Err(ApiError::bad_request(format!(
            "to ({}) must be after from ({})",
            query.to, query.from
        )));
    }
    let client = state.ledger.pool().get().await?;
    Ok(Json(
        queries::registered_agents_during(&client, business_id, jurisdiction, query.from, query.to)
            .await?,
    ))
}

/// Query of a history page.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    /// Opaque cursor from the previous page's `next_cursor`.
    cursor: Option<String>,
    /// Page size; clamped to [`MAX_PAGE`].
    limit: Option<u32>,
}

/// A page of assignment history.
#[derive(Debug, Serialize)]
struct HistoryPage {
    /// Assignments, oldest first.
    items: Vec<AssignmentView>,
    /// The page size applied (after clamping).
    limit: u32,
    /// Pass as `cursor` to get the next page; absent on the last page.
    next_cursor: Option<String>,
}

async fn assignment_history(
    State(state): State<AppState>,
    _reader: auth::Reader,
    Path(business_id): Path<String>,
    Query(query): Query<HistoryQuery>,
) -> Result<Json<HistoryPage>, ApiError> {
    let business_id = uuid_param("business id", &business_id)?;
    let limit = match query.limit {
        Some(0) => return Err(ApiError::bad_request("limit must be at least 1")),
        Some(limit) => limit.min(MAX_PAGE),
        None => DEFAULT_PAGE,
    };
    let after = query
        .cursor
        .as_deref()
        .map(|text| state.cursor_key.decode(text))
        .transpose()
        .map_err(|reason| ApiError::new(StatusCode::BAD_REQUEST, "invalid_cursor", reason))?;
    let client = state.ledger.pool().get().await?;
    let items = queries::assignment_history(&client, business_id, after, i64::from(limit)).await?;
    let next_cursor = (items.len() == limit as usize).then(|| {
        let last = items.last().expect("a full page is not empty");
        state.cursor_key.encode(&HistoryCursor {
            started_at: last.started_at,
            assignment_id: last.assignment_id,
        })
    });
    Ok(Json(HistoryPage {
        items,
        limit,
        next_cursor,
    }))
}
