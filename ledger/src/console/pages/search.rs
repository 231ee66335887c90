//! The start page and the search for a business or contact.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;

use crate::api::AppState;
use crate::console::html::{Page, address, api_error, bad_request, uuid};
use crate::console::layout::layout;
use crate::console::session::Session;
use crate::domain::Jurisdiction;
use crate::queries::{self, ContactView};

pub(in crate::console) async fn home(session: Session) -> Response {
    let _ = session;
    Redirect::to("/search").into_response()
}

pub(in crate::console) async fn search(
    State(state): State<AppState>,
    session: Session,
    Query(query): Query<HashMap<String, String>>,
) -> Page {
    let id = query.get("id").map(|s| s.trim()).unwrap_or_default();
    let name = query.get("name").map(|s| s.trim()).unwrap_or_default();
    let jurisdiction = query
        .get("jurisdiction")
        .map(|s| s.trim())
        .unwrap_or_default();
    let client = state.ledger.pool().get().await.map_err(api_error)?;
    let mut found_id = None;
    if !id.is_empty() {
        let id = uuid("id", id)?;
        if let Some(contact) = queries::contact(&client, id).await.map_err(api_error)? {
            return Ok(Redirect::to(&format!("/contacts/{}", contact.contact_id)).into_response());
        }
        let history = queries::assignment_history(&client, id, None, 1)
            .await
            .map_err(api_error)?;
        if !history.is_empty() {
            return Ok(Redirect::to(&format!("/businesses/{id}")).into_response());
        }
        found_id = Some(id);
    }
    let code = if jurisdiction.is_empty() {
        None
    } else {
        Some(
            Jurisdiction::parse("jurisdiction", jurisdiction)
                .map_err(|error| bad_request(error.to_string()))?,
        )
    };
    if name.chars().count() > 200 {
        return Err(bad_request("name is longer than 200 characters"));
    }
    let contacts = if code.is_some() || !name.is_empty() {
        let pattern = format!(
            "%{}%",
            name.replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        );
        let rows = client
            .query(
                include_str!("../../sql/console/search_contacts.sql"),
                &[&code.map(|code| code.code()), &pattern],
            )
            .await
            .map_err(api_error)?;
        rows.iter()
            .map(|row| ContactView::from_row(row, 0))
            .collect()
    } else {
        Vec::new()
    };
    let searched = code.is_some() || !name.is_empty();
    let body = html! {
        form.card.search method="get" action="/search" {
            label for="id" { "Business or contact id" }
            input #id name="id" value=(id) placeholder="UUID";
            button type="submit" { "Find" }
        }
        form.card.search method="get" action="/search" {
            label for="jurisdiction" { "Jurisdiction" }
            input #jurisdiction name="jurisdiction" value=(jurisdiction) placeholder="TX" size="4";
            label for="name" { "Contact name contains" }
            input #name name="name" value=(name);
            button type="submit" { "Search contacts" }
        }
        @if let Some(id) = found_id {
            p.error role="alert" { "No business or contact has id " (id) "." }
        }
        @if searched {
            @if contacts.is_empty() {
                p { "No contact matches." }
            } @else {
                table.list {
                    thead { tr { th { "Jurisdiction" } th { "Name" } th { "Status" } th { "Address" } } }
                    tbody {
                        @for contact in &contacts {
                            tr {
                                td { (contact.jurisdiction) }
                                td { a href={"/contacts/" (contact.contact_id)} { (contact.name) } }
                                td { (contact.status.as_str()) }
                                td { (address(&contact.address)) }
                            }
                        }
                    }
                }
                @if contacts.len() == 100 { p.hint { "The first 100 matches." } }
            }
        }
    };
    Ok(layout("Search", Some(&session), &state, body))
}
