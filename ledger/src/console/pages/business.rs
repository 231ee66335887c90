//! A business: its assignments by jurisdiction, the events behind them, and who was the RA
//! at a time, as known at another.

use std::collections::{BTreeMap, HashMap};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use uuid::Uuid;

use crate::api::AppState;
use crate::console::html::{
    Page, address, api_error, bad_request, error_page, instant, time, uuid,
};
use crate::console::layout::layout;
use crate::console::pictures::timeline::{Asked, timeline};
use crate::console::session::Session;
use crate::domain::Jurisdiction;
use crate::queries::{self, ContactView, RegisteredAgent, Timeline};

/// The as-of question the page answers: who was the RA at `at`, as known at `known`, and
/// the answer.
struct AsOf {
    at: DateTime<Utc>,
    known: DateTime<Utc>,
    agent: Option<RegisteredAgent>,
}

pub(in crate::console) async fn business(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Page {
    let business_id = uuid("business id", &id)?;
    let asked_text = |name: &str| query.get(name).map_or("", String::as_str);
    let at = instant("at", asked_text("at"))?;
    let known_at = instant("known_at", asked_text("known_at"))?;
    let asked = query
        .get("jurisdiction")
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|code| Jurisdiction::parse("jurisdiction", code))
        .transpose()
        .map_err(|error| bad_request(error.to_string()))?;
    let client = state.ledger.pool().get().await.map_err(api_error)?;
    let Some(record) = queries::business_record(&client, business_id)
        .await
        .map_err(api_error)?
    else {
        return Err(error_page(
            StatusCode::NOT_FOUND,
            "No such business",
            &format!("The ledger has no assignment of business {business_id}."),
        ));
    };
    // The as-of answer, when asked: in the jurisdiction asked, or the only one there is.
    let only_one = (record.timelines.len() == 1)
        .then(|| record.timelines.keys().next().cloned())
        .flatten();
    let answer_jurisdiction = asked.map(|code| code.code().to_owned()).or(only_one);
    let answer = match (at, &answer_jurisdiction) {
        (Some(at), Some(code)) => {
            let jurisdiction = Jurisdiction::parse("jurisdiction", code)
                .map_err(|error| bad_request(error.to_string()))?;
            let known = known_at.unwrap_or_else(Utc::now);
            let agent = queries::registered_agent_at(&client, business_id, jurisdiction, at, known)
                .await
                .map_err(api_error)?;
            Some(AsOf { at, known, agent })
        }
        _ => None,
    };
    let proofs = state.digest_public_key.is_some();
    let jurisdiction = answer_jurisdiction.as_deref();
    let asked_instants = answer.as_ref().map(|answer| Asked {
        at: answer.at,
        known_at: known_at.map(|_| answer.known),
    });
    let body = html! {
        p.subtitle { "Business " code { (business_id) } }
        (as_of_form(business_id, &record.timelines, jurisdiction, asked_text("at"), asked_text("known_at")))
        @if let Some(answer) = &answer {
            (as_of_answer(answer, jurisdiction.unwrap_or("")))
        } @else if at.is_some() {
            p.error role="alert" { "Choose a jurisdiction." }
        }
        figure.picture #ra-timeline {
            (timeline(&record.timelines, &record.contacts, asked_instants, Utc::now()))
            figcaption { "Who served when: a band per assignment, from its start to its end; the question's instants as lines." }
        }
        @for (code, timeline) in &record.timelines {
            (timeline_section(code, timeline, &record.contacts, proofs))
        }
        @if !proofs { p.hint { "Signed digests are off on this service: no proofs to link." } }
    };
    Ok(layout("Business", Some(&session), &state, body))
}

/// The as-of question, filled with what was asked.
fn as_of_form(
    business_id: Uuid,
    timelines: &BTreeMap<String, Timeline>,
    jurisdiction: Option<&str>,
    at: &str,
    known_at: &str,
) -> Markup {
    html! {
        form.card.asof method="get" action={"/businesses/" (business_id)} {
            label for="jurisdiction" { "Jurisdiction" }
            select #jurisdiction name="jurisdiction" {
                @for code in timelines.keys() {
                    option value=(code) selected[jurisdiction == Some(code.as_str())] { (code) }
                }
            }
            label for="at" { "Who was the RA on" }
            input #at name="at" value=(at) placeholder="2026-03-01" required;
            label for="known_at" { "as known at (optional)" }
            input #known_at name="known_at" value=(known_at) placeholder="now";
            button type="submit" { "Ask" }
        }
    }
}

/// The answer to the as-of question in `jurisdiction`.
fn as_of_answer(answer: &AsOf, jurisdiction: &str) -> Markup {
    let AsOf { at, known, agent } = answer;
    html! {
        section.answer #answer {
            @match agent {
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
                        ", the business had no RA in " (jurisdiction) "."
                    }
                }
            }
        }
    }
}

/// One jurisdiction's assignments, and the events behind them (each linked to its proof
/// when digests are on).
fn timeline_section(
    code: &str,
    timeline: &Timeline,
    contacts: &HashMap<Uuid, ContactView>,
    proofs: bool,
) -> Markup {
    html! {
        section.timeline data-jurisdiction=(code) {
            h2 { (code) }
            table.list {
                thead { tr { th { "Contact" } th { "Address" } th { "From" } th { "To" } th { "End" } th { "Recorded" } } }
                tbody {
                    @for assignment in &timeline.assignments {
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
                        @for event in &timeline.events {
                            tr {
                                td { (event.version) }
                                td { code { (event.event_id) } }
                                td { (event.event_type) }
                                td { (time(event.effective_at)) }
                                td { (time(event.recorded_at)) }
                                @if proofs { td { a href={"/events/" (event.event_id) "/proof"} { "proof" } } }
                            }
                        }
                    }
                }
            }
        }
    }
}
