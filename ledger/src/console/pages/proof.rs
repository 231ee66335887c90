//! An event's inclusion proof against the newest signed digest.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;

use crate::api::{ApiError, AppState};
use crate::console::html::{Page, api_error, error_page, uuid};
use crate::console::layout::layout;
use crate::console::session::Session;

pub(in crate::console) async fn event_proof(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
) -> Page {
    let event_id = uuid("event id", &id)?;
    let proof = crate::digest::prove::for_event(state.ledger.pool(), event_id, &state.digest_tree)
        .await
        .map_err(proof_error)?;
    let text = serde_json::to_string_pretty(&proof).unwrap_or_default();
    let body = html! {
        p { "Event " code { (event_id) } " against the newest signed digest. Check it offline with "
            code { "ledger proof verify" } "." }
        pre.proof { (text) }
    };
    Ok(layout("Proof", Some(&session), &state, body))
}

/// Why there is no proof, as a page: no such event is a 404 and not sealed yet a 409, as
/// in the API; a failure of the database is no answer about the event at all, so it is a
/// 503 or a 500 whose cause is logged under the reference the page shows.
fn proof_error(error: crate::digest::prove::ProofError) -> Response {
    use crate::digest::prove::ProofError;
    match error {
        ProofError::UnknownEvent(_) => {
            error_page(StatusCode::NOT_FOUND, "No proof", &error.to_string())
        }
        ProofError::NotSealed(_) => {
            error_page(StatusCode::CONFLICT, "Not sealed yet", &error.to_string())
        }
        ProofError::Pool(error) => api_error(error),
        ProofError::ConsistentWith { .. } => {
            error_page(StatusCode::BAD_REQUEST, "No proof", &error.to_string())
        }
        ProofError::Database(_)
        | ProofError::Digest(_)
        | ProofError::BadHash(_)
        | ProofError::Log(_) => api_error(ApiError::internal(&error)),
    }
}
