//! A contact: its facts, supersede lineage and reassignment runs, and the form that
//! supersedes it.

use std::collections::HashMap;

use axum::Form;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect};
use maud::{Markup, html};
use uuid::Uuid;

use crate::api::AppState;
use crate::commands::SupersedeContact;
use crate::console::guard::checked_write;
use crate::console::html::{
    Page, address, api_error, bad_request, error_page, instant, time, uuid,
};
use crate::console::layout::layout;
use crate::console::session::Session;
use crate::domain::PostalAddress;
use crate::queries::{self, ContactRecord, ContactView};
use crate::reassign::{self, RunStatus};
use crate::store::Metadata;

pub(in crate::console) async fn contact(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
) -> Page {
    let contact_id = uuid("contact id", &id)?;
    let client = state.ledger.pool().get().await.map_err(api_error)?;
    let Some(record) = queries::contact_record(&client, contact_id)
        .await
        .map_err(api_error)?
    else {
        return Err(error_page(
            StatusCode::NOT_FOUND,
            "No such contact",
            &format!("The ledger has no contact {contact_id}."),
        ));
    };
    let runs = reassign::statuses_of(&client, contact_id)
        .await
        .map_err(api_error)?;
    let can_supersede = session.writer() && record.contact.superseded_by.is_none();
    let body = html! {
        (facts_and_lineage(&record))
        (run_list(&runs))
        @if can_supersede {
            h2 { "Supersede this contact" }
            (supersede_form(&record.contact, &session.csrf(&state)))
        }
    };
    Ok(layout("Contact", Some(&session), &state, body))
}

/// The contact's facts, then its supersede lineage with itself in bold.
fn facts_and_lineage(record: &ContactRecord) -> Markup {
    let ContactRecord {
        contact,
        lineage,
        active_assignments: active,
    } = record;
    html! {
        dl.facts {
            dt { "Id" } dd { code { (contact.contact_id) } }
            dt { "Name" } dd #contact-name { (contact.name) }
            dt { "Jurisdiction" } dd { (contact.jurisdiction) }
            dt { "Address" } dd { (address(&contact.address)) }
            dt { "Status" } dd #contact-status { (contact.status.as_str()) }
            dt { "In force from" } dd { (time(contact.created_at)) }
            @if let Some(at) = contact.superseded_at { dt { "Superseded at" } dd { (time(at)) } }
            dt { "Active assignments" } dd #active-count { (active) }
        }
        h2 { "Supersede lineage" }
        ol.lineage {
            @for link in lineage {
                li {
                    @if link.contact_id == contact.contact_id { strong { (link.name) } }
                    @else { a href={"/contacts/" (link.contact_id)} { (link.name) } }
                    " — " (link.status.as_str()) ", from " (time(link.created_at))
                }
            }
        }
    }
}

/// The runs that move this contact's assignments away, newest first.
fn run_list(runs: &[RunStatus]) -> Markup {
    html! {
        h2 { "Reassignment runs" }
        @if runs.is_empty() { p { "None." } } @else {
            table.list {
                thead { tr { th { "Run" } th { "Status" } th { "To contact" } th { "Replaced" } th { "Failed" } th { "Started" } } }
                tbody {
                    @for run in runs {
                        tr {
                            td { a href={"/runs/" (run.run_id)} { (run.run_id) } }
                            td { (run.status.as_str()) }
                            td { a href={"/contacts/" (run.new_contact_id)} { (run.new_contact_id) } }
                            td { (run.replaced) } td { (run.failed) }
                            td { (time(run.started_at)) }
                        }
                    }
                }
            }
        }
    }
}

/// The form that supersedes `contact`, at the version the page shows.
fn supersede_form(contact: &ContactView, csrf: &str) -> Markup {
    html! {
        form.card.supersede #supersede method="post" action={"/contacts/" (contact.contact_id) "/supersede"} {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name="expected_version" value=(contact.version);
            label for="new-name" { "New office name" } input #new-name name="name" required maxlength="200";
            label for="line1" { "Street" } input #line1 name="line1" required maxlength="200";
            label for="line2" { "Suite (optional)" } input #line2 name="line2" maxlength="200";
            label for="city" { "City" } input #city name="city" required maxlength="100";
            label for="region" { "State" } input #region name="region" required size="3" maxlength="2" value=(contact.jurisdiction);
            label for="postal_code" { "ZIP" } input #postal_code name="postal_code" required size="10" maxlength="10";
            label for="effective_at" { "Effective (optional)" } input #effective_at name="effective_at" placeholder="now";
            label for="page_size" { "Rows per page" } input #page_size name="page_size" value="1000" size="6";
            button type="submit" { "Supersede and start the run" }
        }
    }
}

pub(in crate::console) async fn supersede(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    checked_write(&state, &session, &headers, &form)?;
    let contact_id = uuid("contact id", &id)?;
    let field = |name: &str| {
        form.get(name)
            .map(|v| v.trim().to_owned())
            .unwrap_or_default()
    };
    let expected_version = match field("expected_version").as_str() {
        "" => None,
        text => Some(
            text.parse::<i64>()
                .map_err(|_| bad_request(format!("expected_version {text:?} is not a number")))?,
        ),
    };
    let page_size = match field("page_size").as_str() {
        "" => None,
        text => Some(
            text.parse::<u32>()
                .map_err(|_| bad_request(format!("page_size {text:?} is not a whole number")))?,
        ),
    };
    let command = SupersedeContact {
        name: field("name"),
        address: PostalAddress {
            line1: field("line1"),
            line2: field("line2"),
            city: field("city"),
            region: field("region"),
            postal_code: field("postal_code"),
        },
        effective_at: instant("effective_at", &field("effective_at"))?,
        expected_version,
        page_size,
    };
    let request = Uuid::now_v7();
    let metadata = Metadata {
        actor: session.name.clone(),
        correlation_id: request,
        causation_id: Some(request),
        traceparent: crate::trace::current().map(|span| span.to_string()),
    };
    let superseded = state
        .ledger
        .supersede_contact(contact_id, command, &metadata)
        .await
        .map_err(api_error)?;
    Ok(Redirect::to(&format!("/runs/{}", superseded.run.run_id)).into_response())
}
