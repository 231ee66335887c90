//! The HTTP API (`ledger serve`): JSON commands and audit queries, bearer-token auth,
//! an OpenAPI document at `/openapi.json`.

mod auth;
mod cursor;
mod error;
mod extract;
pub mod http1;

use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use futures::FutureExt as _;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use auth::{Role, TokenSpecError, Tokens};
pub use cursor::CursorKey;
pub use error::ApiError;
use extract::{Body, Query};

use crate::commands::{
    Assign, ChangeAssignment, CreateContact, Ledger, StartReassignment, SupersedeContact,
};
use crate::domain::{self, Jurisdiction};
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

/// Layers every router the service serves (the API and the health endpoints): bodies
/// larger than [`extract::MAX_BODY_BYTES`] refused, unknown routes answered, and every
/// error in the API's JSON shape, including the body-less ones the routing layer makes and
/// a handler that panicked.
pub fn service(router: Router) -> Router {
    let routes = router
        .fallback(unknown_route)
        .layer(DefaultBodyLimit::max(extract::MAX_BODY_BYTES));
    // Around the whole router, not each route: a route's 405 gets its `Allow` header
    // outside the layers of the route.
    Router::new()
        .fallback_service(routes)
        .layer(middleware::from_fn(json_errors))
}

/// Serves `router` (see [`service`]) until `shutdown`, checking request heads before hyper
/// parses them (see [`http1`]).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    http1::serve(listener, service(router), shutdown).await
}

async fn unknown_route(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!(
        "no endpoint {method} {}; GET /openapi.json lists them",
        shorten(uri.path())
    ))
}

fn shorten(text: &str) -> &str {
    match text.char_indices().nth(200) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// Gives an error response without a body (405 from the router, 413 from the body limit)
/// the JSON shape, and turns a panic into a logged 500.
async fn json_errors(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = shorten(request.uri().path()).to_owned();
    let response = match std::panic::AssertUnwindSafe(next.run(request))
        .catch_unwind()
        .await
    {
        Ok(response) => response,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|text| (*text).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            return ApiError::internal(&format!("handler of {method} {path} panicked: {what}"))
                .into_response();
        }
    };
    let status = response.status();
    if status.as_u16() < 400 || response.headers().contains_key(header::CONTENT_TYPE) {
        return response;
    }
    let allowed = response
        .headers()
        .get(header::ALLOW)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let (code, message) = match status {
        StatusCode::METHOD_NOT_ALLOWED => (
            "method_not_allowed",
            format!("{method} is not allowed on {path}; allowed: {allowed}")
                .trim_end_matches("; allowed: ")
                .to_owned(),
        ),
        StatusCode::NOT_FOUND => ("not_found", format!("no endpoint {method} {path}")),
        StatusCode::PAYLOAD_TOO_LARGE => (
            "payload_too_large",
            format!("the body is larger than {} bytes", extract::MAX_BODY_BYTES),
        ),
        other if other.is_server_error() => ("internal", "internal error".to_owned()),
        other => (
            "bad_request",
            other.canonical_reason().unwrap_or("bad request").to_owned(),
        ),
    };
    let (mut parts, _) = response.into_parts();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, ApiError::body(code, &message).into())
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

/// A query's instant, within the years the ledger keeps: 400 `invalid_field` otherwise.
fn instant(field: &str, value: DateTime<Utc>) -> Result<DateTime<Utc>, ApiError> {
    domain::instant(field, value)
        .map_err(|error| ApiError::new(StatusCode::BAD_REQUEST, "invalid_field", error.to_string()))
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
    let at = instant("at", query.at.unwrap_or(now))?;
    let known_at = instant("known_at", query.known_at.unwrap_or(now))?;
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
    /// End of the period (exclusive): `[from, to)`, like assignments' own intervals.
    to: DateTime<Utc>,
}

async fn registered_agents_during(
    State(state): State<AppState>,
    _reader: auth::Reader,
    Path((business_id, jurisdiction)): Path<(String, String)>,
    Query(query): Query<PeriodQuery>,
) -> Result<Json<Vec<RegisteredAgent>>, ApiError> {
    let (business_id, jurisdiction) = registration(&business_id, &jurisdiction)?;
    let from = instant("from", query.from)?;
    let to = instant("to", query.to)?;
    if to <= from {
        return Err(ApiError::bad_request(format!(
            "to ({to}) must be after from ({from})"
        )));
    }
    let client = state.ledger.pool().get().await?;
    Ok(Json(
        queries::registered_agents_during(&client, business_id, jurisdiction, from, to).await?,
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
