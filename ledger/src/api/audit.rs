//! The audit questions: who was the RA at T (as known at K), every RA during a period, and
//! a business's whole history in keyset pages.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::extract::Query;
use super::{ApiError, AppState, auth, uuid_param};
use crate::domain::{self, Jurisdiction};
use crate::queries::{self, AssignmentView, HistoryCursor, RegisteredAgent};

/// Most history rows one page returns; larger `limit`s are clamped to it.
pub const MAX_PAGE: u32 = 500;
/// History rows per page when `limit` is not given.
pub const DEFAULT_PAGE: u32 = 50;

/// Query of "who was the RA at T".
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AtQuery {
    /// Business time; defaults to now.
    #[serde(default, deserialize_with = "domain::rfc3339::option")]
    at: Option<DateTime<Utc>>,
    /// Transaction time: only what the ledger had recorded by then; defaults to now, or
    /// with `proof` to the newest digest's time (a digest cannot prove a later instant).
    #[serde(default, deserialize_with = "domain::rfc3339::option")]
    known_at: Option<DateTime<Utc>>,
    /// Add the answer's proof against the newest signed digest.
    #[serde(default)]
    proof: bool,
    /// With `proof`: sizes of checkpoints the auditor saved, comma-separated; the proof
    /// carries the log's consistency proof from each.
    #[serde(default)]
    consistent_with: Option<String>,
}

/// The answer, with its proof when asked for.
#[derive(Debug, Serialize)]
pub(super) struct AtAnswer {
    /// None only with a proof: a proven "no RA" (issue 56) is the proof alone.
    #[serde(flatten)]
    answer: Option<RegisteredAgent>,
    /// The events the answer folds, proven against a signed digest
    /// ([`crate::digest::prove`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    proof: Option<crate::digest::ProofDocument>,
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

pub(super) async fn registered_agent_at(
    State(state): State<AppState>,
    _reader: auth::Reader,
    Path((business_id, jurisdiction)): Path<(String, String)>,
    Query(query): Query<AtQuery>,
) -> Result<Json<AtAnswer>, ApiError> {
    let (business_id, jurisdiction) = registration(&business_id, &jurisdiction)?;
    let now = Utc::now();
    let at = instant("at", query.at.unwrap_or(now))?;
    let known_at = instant("known_at", query.known_at.unwrap_or(now))?;
    let none = || {
        ApiError::not_found(format!(
            "business {business_id} had no registered agent in {} at {at} (as known at {known_at})",
            jurisdiction.code()
        ))
    };
    let sizes = super::digests::consistent_with(query.consistent_with.as_deref())?;
    if query.proof {
        use crate::digest::prove::{self, ProofError};
        return match prove::for_answer_with(
            state.ledger.pool(),
            &state.digest_tree,
            business_id,
            jurisdiction,
            at,
            query.known_at,
            &sizes,
        )
        .await
        {
            Err(error @ ProofError::ConsistentWith { .. }) => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_field",
                error.to_string(),
            )),
            Ok((answer, proof)) => Ok(Json(AtAnswer {
                answer,
                proof: Some(proof),
            })),
            Err(error @ ProofError::NotSealed(_)) => Err(ApiError::new(
                StatusCode::CONFLICT,
                "not_sealed",
                error.to_string(),
            )),
            Err(error) => Err(ApiError::internal(&error)),
        };
    }
    let client = state.ledger.pool().get().await?;
    queries::registered_agent_at(&client, business_id, jurisdiction, at, known_at)
        .await?
        .map(|answer| {
            Json(AtAnswer {
                answer: Some(answer),
                proof: None,
            })
        })
        .ok_or_else(none)
}

/// Query of "every RA during a period".
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PeriodQuery {
    /// Start of the period (inclusive).
    #[serde(deserialize_with = "domain::rfc3339::required")]
    from: DateTime<Utc>,
    /// End of the period (exclusive): `[from, to)`, like assignments' own intervals.
    #[serde(deserialize_with = "domain::rfc3339::required")]
    to: DateTime<Utc>,
}

pub(super) async fn registered_agents_during(
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
pub(super) struct HistoryQuery {
    /// Opaque cursor from the previous page's `next_cursor`.
    cursor: Option<String>,
    /// Page size; clamped to [`MAX_PAGE`].
    limit: Option<u32>,
}

/// A page of assignment history.
#[derive(Debug, Serialize)]
pub(super) struct HistoryPage {
    /// Assignments, oldest first.
    items: Vec<AssignmentView>,
    /// The page size applied (after clamping).
    limit: u32,
    /// Pass as `cursor` to get the next page; absent on the last page.
    next_cursor: Option<String>,
}

pub(super) async fn assignment_history(
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
