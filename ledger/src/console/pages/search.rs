//! The start page and the search for a business or contact.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};

use crate::api::AppState;
use crate::console::html::{Page, address, api_error, bad_request, uuid};
use crate::console::layout::layout;
use crate::console::session::Session;
use crate::domain::Jurisdiction;
use crate::queries::{self, ContactView, Found};

/// Where a signed-in user lands: an operator on the operations page, whose verdict is
/// what an on-call engineer opens the console for; everyone else on search.
pub(in crate::console) async fn home(session: Session) -> Response {
    Redirect::to(if session.operator() {
        "/operations"
    } else {
        "/search"
    })
    .into_response()
}

pub(in crate::console) async fn search(
    State(state): State<AppState>,
    session: Session,
    Query(query): Query<HashMap<String, String>>,
) -> Page {
    let field = |name: &str| query.get(name).map(|s| s.trim()).unwrap_or_default();
    let (id, name, jurisdiction) = (field("id"), field("name"), field("jurisdiction"));
    let client = state.ledger.pool().get().await.map_err(api_error)?;
    let mut not_found = None;
    if !id.is_empty() {
        let id = uuid("id", id)?;
        match queries::find_id(&client, id).await.map_err(api_error)? {
            Some(Found::Contact(id)) => {
                return Ok(Redirect::to(&format!("/contacts/{id}")).into_response());
            }
            Some(Found::Business(id)) => {
                return Ok(Redirect::to(&format!("/businesses/{id}")).into_response());
            }
            None => not_found = Some(id),
        }
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
    let searched = code.is_some() || !name.is_empty();
    let contacts = if searched {
        queries::search_contacts(&client, code, name)
            .await
            .map_err(api_error)?
    } else {
        Vec::new()
    };
    let body = html! {
        (search_forms(id, jurisdiction, name))
        @if let Some(id) = not_found {
            p.error role="alert" { "No business or contact has id " (id) "." }
        }
        @if searched { (found_contacts(&contacts)) }
    };
    Ok(layout("Search", Some(&session), &state, body))
}

/// The two searches: by id, and by jurisdiction and name, filled with what was asked.
fn search_forms(id: &str, jurisdiction: &str, name: &str) -> Markup {
    html! {
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
    }
}

/// The contacts a search found, or that none did.
fn found_contacts(contacts: &[ContactView]) -> Markup {
    html! {
        @if contacts.is_empty() {
            p { "No contact matches." }
        } @else {
            table.list {
                thead { tr { th { "Jurisdiction" } th { "Name" } th { "Status" } th { "Address" } } }
                tbody {
                    @for contact in contacts {
                        tr {
                            td { (contact.jurisdiction) }
                            td { a href={"/contacts/" (contact.contact_id)} { (contact.name) } }
                            td { (contact.status.as_str()) }
                            td { (address(&contact.address)) }
                        }
                    }
                }
            }
            @if contacts.len() == queries::SEARCH_LIMIT { p.hint { "The first 100 matches." } }
        }
    }
}
