//! Contacts: the first primary contact of a jurisdiction, a contact, its supersede (which
//! starts a reassignment run) and its lineage.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::extract::Body;
use super::runs::{AcceptedReply, accepted};
use super::{ApiError, AppState, auth, metadata, uuid_param};
use crate::commands::{CreateContact, SupersedeContact, Superseded};
use crate::queries::{self, ContactView};

pub(super) async fn create_contact(
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

pub(super) async fn get_contact(
    State(state): State<AppState>,
    _reader: auth::Reader,
    Path(id): Path<String>,
) -> Result<Json<ContactView>, ApiError> {
    Ok(Json(
        state.ledger.contact(uuid_param("contact id", &id)?).await?,
    ))
}

pub(super) async fn supersede_contact(
    State(state): State<AppState>,
    auth::Writer(principal): auth::Writer,
    Path(id): Path<String>,
    Body(command): Body<SupersedeContact>,
) -> Result<AcceptedReply<Superseded>, ApiError> {
    let id = uuid_param("contact id", &id)?;
    let superseded = state
        .ledger
        .supersede_contact(id, command, &metadata(&principal))
        .await?;
    Ok(accepted(superseded.run.run_id, superseded))
}

pub(super) async fn contact_lineage(
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
