//! A business: its assignments by jurisdiction, the events behind them, and who was the RA
//! at a time, as known at another.

use std::collections::{BTreeMap, HashMap};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use maud::html;
use uuid::Uuid;

use crate::api::AppState;
use crate::console::html::{
    Page, address, api_error, bad_request, error_page, instant, time, uuid,
};
use crate::console::layout::layout;
use crate::console::session::Session;
use crate::domain::{self, Jurisdiction};
use crate::queries::{self, AssignmentView, ContactView};

/// An event behind a timeline: id, type, stream version, effective and recorded time.
type EventRow = (Uuid, String, i64, DateTime<Utc>, DateTime<Utc>);

pub(in crate::console) async fn business(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Page {
    let business_id = uuid("business id", &id)?;
    let at = instant("at", query.get("at").map_or("", String::as_str))?;
    let known_at = instant("known_at", query.get("known_at").map_or("", String::as_str))?;
    let asked = query
        .get("jurisdiction")
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|code| Jurisdiction::parse("jurisdiction", code))
        .transpose()
        .map_err(|error| bad_request(error.to_string()))?;
    let client = state.ledger.pool().get().await.map_err(api_error)?;
    // The whole history, every jurisdiction (a business has a handful of assignments per
    // jurisdiction; 2,000 is far beyond any real one and bounds the page).
    let history = queries::assignment_history(&client, business_id, None, 2_000)
        .await
        .map_err(api_error)?;
    if history.is_empty() {
        return Err(error_page(
            StatusCode::NOT_FOUND,
            "No such business",
            &format!("The ledger has no assignment of business {business_id}."),
        ));
    }
    let mut by_jurisdiction: BTreeMap<String, Vec<AssignmentView>> = BTreeMap::new();
    for assignment in history {
        by_jurisdiction
            .entry(assignment.jurisdiction.clone())
            .or_default()
            .push(assignment);
    }
    let mut contacts: HashMap<Uuid, ContactView> = HashMap::new();
    for assignment in by_jurisdiction.values().flatten() {
        if !contacts.contains_key(&assignment.contact_id)
            && let Some(contact) = queries::contact(&client, assignment.contact_id)
                .await
                .map_err(api_error)?
        {
            contacts.insert(contact.contact_id, contact);
        }
    }
    let mut events: HashMap<String, Vec<EventRow>> = HashMap::new();
    for code in by_jurisdiction.keys() {
        let jurisdiction = Jurisdiction::parse("jurisdiction", code)
            .map_err(|error| bad_request(error.to_string()))?;
        let stream = domain::assignment_stream(business_id, jurisdiction);
        let rows = client
            .query(
                include_str!("../../sql/console/stream_events.sql"),
                &[&stream],
            )
            .await
            .map_err(api_error)?;
        events.insert(
            code.clone(),
            rows.iter()
                .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4)))
                .collect(),
        );
    }
    // The as-of answer, when asked.
    let only_one = (by_jurisdiction.len() == 1)
        .then(|| by_jurisdiction.keys().next().cloned())
        .flatten();
    let answer_jurisdiction = asked
        .map(|code| code.code().to_owned())
        .or(only_one.clone());
    let answer = match (at, &answer_jurisdiction) {
        (Some(at), Some(code)) => {
            let jurisdiction = Jurisdiction::parse("jurisdiction", code)
                .map_err(|error| bad_request(error.to_string()))?;
            let known = known_at.unwrap_or_else(Utc::now);
            Some((
                at,
                known,
                queries::registered_agent_at(&client, business_id, jurisdiction, at, known)
                    .await
                    .map_err(api_error)?,
            ))
        }
        _ => None,
    };
    let proofs = state.digest_public_key.is_some();
    let body = html! {
        p.subtitle { "Business " code { (business_id) } }
        form.card.asof method="get" action={"/businesses/" (business_id)} {
            label for="jurisdiction" { "Jurisdiction" }
            select #jurisdiction name="jurisdiction" {
                @for code in by_jurisdiction.keys() {
                    option value=(code) selected[answer_jurisdiction.as_deref() == Some(code.as_str())] { (code) }
                }
            }
            label for="at" { "Who was the RA on" }
            input #at name="at" value=(query.get("at").map_or("", String::as_str)) placeholder="2026-03-01" required;
            label for="known_at" { "as known at (optional)" }
            input #known_at name="known_at" value=(query.get("known_at").map_or("", String::as_str)) placeholder="now";
            button type="submit" { "Ask" }
        }
        @if let Some((at, known, answer)) = &answer {
            section.answer #answer {
                @match answer {
                    Some(agent) => {
                        p {
                            "On " strong { (time(*at)) } ", as known at " (time(*known)) ", the RA in "
                            (agent.assignment.jurisdiction) " was "
                            a.contact href={"/contacts/" (agent.contact.contact_id)} data-contact-id=(agent.contact.contact_id) {
                                (agent.contact.name)
                            }
                            " (" (address(&agent.contact.address)) "), contact status "
                            (agent.contact_status.as_str()) ", under assignment "
                            code data-assignment-id=(agent.assignment.assignment_id) { (agent.assignment.assignment_id) } "."
                        }
                    }
                    None => {
                        p.none data-contact-id="" {
                            "On " strong { (time(*at)) } ", as known at " (time(*known))
                            ", the business had no RA in " (answer_jurisdiction.as_deref().unwrap_or("")) "."
                        }
                    }
                }
            }
        } @else if at.is_some() {
            p.error role="alert" { "Choose a jurisdiction." }
        }
        @for (code, assignments) in &by_jurisdiction {
            section.timeline data-jurisdiction=(code) {
                h2 { (code) }
                table.list {
                    thead { tr { th { "Contact" } th { "Address" } th { "From" } th { "To" } th { "End" } th { "Recorded" } } }
                    tbody {
                        @for assignment in assignments {
                            @let contact = contacts.get(&assignment.contact_id);
                            tr {
                                td { a href={"/contacts/" (assignment.contact_id)} {
                                    (contact.map_or(assignment.contact_id.to_string(), |c| c.name.clone()))
                                } }
                                td { @if let Some(contact) = contact { (address(&contact.address)) } }
                                td { (time(assignment.started_at)) }
                                td { (assignment.ended_at.map_or("(in force)".into(), time)) }
                                td { (assignment.end_reason.map_or("", |reason| reason.as_str())) }
                                td { (time(assignment.recorded_at)) }
                            }
                        }
                    }
                }
                details.events {
                    summary { "Events behind these changes" }
                    table.list {
                        thead { tr { th { "Version" } th { "Event" } th { "Type" } th { "Effective" } th { "Recorded" } @if proofs { th { "Proof" } } } }
                        tbody {
                            @for (event_id, event_type, version, effective, recorded) in events.get(code).into_iter().flatten() {
                                tr {
                                    td { (version) }
                                    td { code { (event_id) } }
                                    td { (event_type) }
                                    td { (time(*effective)) }
                                    td { (time(*recorded)) }
                                    @if proofs { td { a href={"/events/" (event_id) "/proof"} { "proof" } } }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if !proofs { p.hint { "Signed digests are off on this service: no proofs to link." } }
    };
    Ok(layout("Business", Some(&session), &state, body))
}
