//! The ledger's signed digests: the public key that checks them and the newest one.

use axum::Json;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;

use super::{ApiError, AppState, auth};

/// `GET /v1/digests/public-key`: the Ed25519 public key, SubjectPublicKeyInfo PEM.
pub(super) async fn public_key(
    State(state): State<AppState>,
    _reader: auth::Reader,
) -> Result<impl IntoResponse, ApiError> {
    let pem = state.digest_public_key.clone().ok_or_else(|| {
        ApiError::not_found("digests are off: this service has no digest_key_file")
    })?;
    Ok(([(CONTENT_TYPE, "application/x-pem-file")], pem))
}

/// `GET /v1/digests/latest`: the newest digest's document.
pub(super) async fn latest(
    State(state): State<AppState>,
    _reader: auth::Reader,
) -> Result<Json<crate::digest::DigestDocument>, ApiError> {
    let client = state.ledger.pool().get().await?;
    crate::digest::sealed::latest(&client)
        .await
        .map_err(|error| ApiError::internal(&error))?
        .map(Json)
        .ok_or_else(|| ApiError::not_found("no digest has been sealed yet"))
}

/// `GET /v1/checkpoints/latest`: the newest checkpoint of the transparency log, a C2SP
/// signed note with the log's signature and every witness cosignature stored for it, as
/// text (what an auditor saves as is).
pub(super) async fn latest_checkpoint(
    State(state): State<AppState>,
    _reader: auth::Reader,
) -> Result<impl IntoResponse, ApiError> {
    let client = state.ledger.pool().get().await?;
    let (_, note) = crate::digest::checkpoint::cosigned(&client, None)
        .await
        .map_err(|error| ApiError::internal(&error))?
        .ok_or_else(|| ApiError::not_found("no checkpoint has been sealed yet"))?;
    Ok(([(CONTENT_TYPE, "text/plain; charset=utf-8")], note.text()))
}

/// The query of a proof: the sizes of checkpoints the auditor saved.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProofQuery {
    /// Comma-separated sizes (at most 16): the proof carries the log's consistency proof
    /// from each to its checkpoint.
    #[serde(default)]
    consistent_with: Option<String>,
}

/// Sizes of saved checkpoints, `N[,N]...` (at most 16); 400 `invalid_field` naming the
/// value otherwise.
pub(super) fn consistent_with(text: Option<&str>) -> Result<Vec<u64>, ApiError> {
    let Some(text) = text else {
        return Ok(Vec::new());
    };
    let sizes: Option<Vec<u64>> = text
        .split(',')
        .map(|size| {
            size.parse::<u64>()
                .ok()
                .filter(|_| size.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    match sizes {
        Some(sizes) if sizes.len() <= 16 => Ok(sizes),
        _ => Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "invalid_field",
            format!(
                "consistent_with {text:?} is not a list of at most 16 checkpoint sizes, e.g. 1200,5400"
            ),
        )),
    }
}

/// `GET /v1/events/{id}/proof`: the event's inclusion proof against the newest digest.
pub(super) async fn event_proof(
    State(state): State<AppState>,
    _reader: auth::Reader,
    axum::extract::Path(id): axum::extract::Path<String>,
    super::extract::Query(query): super::extract::Query<ProofQuery>,
) -> Result<Json<crate::digest::ProofDocument>, ApiError> {
    use crate::digest::prove::{self, ProofError};
    let id = super::uuid_param("event id", &id)?;
    let sizes = consistent_with(query.consistent_with.as_deref())?;
    match prove::for_event_with(state.ledger.pool(), id, &state.digest_tree, &sizes).await {
        Ok(document) => Ok(Json(document)),
        Err(error @ ProofError::ConsistentWith { .. }) => Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "invalid_field",
            error.to_string(),
        )),
        Err(error @ ProofError::UnknownEvent(_)) => Err(ApiError::not_found(error.to_string())),
        Err(error @ ProofError::NotSealed(_)) => Err(ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "not_sealed",
            error.to_string(),
        )),
        Err(error) => Err(ApiError::internal(&error)),
    }
}
