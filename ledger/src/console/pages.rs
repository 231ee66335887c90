//! The console's pages, rendered on the server with `maud` (escaped by default). Read pages
//! work without JavaScript; the run page's progress bar advances by polling when it is on.

// A handler's error is the finished error page, built once per request: boxing it would buy
// nothing.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap};

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, NaiveDate, Utc};
use maud::{DOCTYPE, Markup, html};
use uuid::Uuid;

use super::next;
use super::session::{self, Session};
use crate::api::{ApiError, AppState};
use crate::commands::SupersedeContact;
use crate::domain::{self, Jurisdiction, PostalAddress};
use crate::queries::{self, AssignmentView, ContactView};
use crate::reassign::{self, RunStatus};
use crate::store::Metadata;

type Page = Result<Response, Response>;

/// An event behind a timeline: id, type, stream version, effective and recorded time.
type EventRow = (Uuid, String, i64, DateTime<Utc>, DateTime<Utc>);

/// A whole page: header with the session, then `body`.
fn layout(title: &str, session: Option<&Session>, state: &AppState, body: Markup) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · RA Ledger" }
                link rel="stylesheet" href="/assets/console.css";
                script src="/assets/console.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/" { "RA Ledger" }
                    @if let Some(session) = session {
                        nav {
                            a href="/search" { "Search" }
                            a href="/operations" { "Operations" }
                        }
                        form.signout method="post" action="/sign-out" {
                            span.who data-role=(session.role_name())
                                title={"Signed in until " (chrono::DateTime::from_timestamp(session.expires, 0).map_or(String::new(), time))} {
                                (session.name) " (" (session.role_name()) ")"
                            }
                            input type="hidden" name="csrf" value=(session.csrf(state));
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    };
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response()
}

/// An error page with `status` (no session details: it may be shown before sign-in).
pub fn error_page(status: StatusCode, title: &str, message: &str) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) " · RA Ledger" }
                link rel="stylesheet" href="/assets/console.css";
            }
            body {
                header.top { a.brand href="/" { "RA Ledger" } }
                main {
                    h1 { (title) }
                    p.error role="alert" { (message) }
                    p { a href="/" { "Back to the start" } }
                }
            }
        }
    };
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response()
}

/// An API error (same status and message as the API would give) as a page.
fn api_error(error: impl Into<ApiError>) -> Response {
    let error = error.into();
    let status = error.status();
    let title = if status.is_server_error() {
        "Something went wrong"
    } else {
        "Cannot do that"
    };
    error_page(status, title, error.message())
}

fn bad_request(message: impl Into<String>) -> Response {
    error_page(StatusCode::BAD_REQUEST, "Cannot do that", &message.into())
}

fn forbidden(message: &str) -> Response {
    error_page(StatusCode::FORBIDDEN, "Not allowed", message)
}

/// Percent-encodes a query value.
pub fn encode_query(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(byte as char);
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

fn uuid(what: &str, text: &str) -> Result<Uuid, Response> {
    text.trim()
        .parse()
        .map_err(|_| bad_request(format!("{what} {text:?} is not a UUID")))
}

/// A form's instant: a date (midnight UTC) or an RFC 3339 time, within the ledger's years.
fn instant(field: &str, text: &str) -> Result<Option<DateTime<Utc>>, Response> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let parsed = DateTime::parse_from_rfc3339(text)
        .map(|time| time.with_timezone(&Utc))
        .or_else(|_| {
            NaiveDate::parse_from_str(text, "%Y-%m-%d")
                .map(|date| date.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc())
        })
        .map_err(|_| {
            bad_request(format!(
                "{field} {text:?} is neither a date (2026-03-01) nor a time (2026-03-01T12:00:00Z)"
            ))
        })?;
    domain::instant(field, parsed)
        .map(Some)
        .map_err(|error| bad_request(error.to_string()))
}

fn time(value: DateTime<Utc>) -> String {
    value.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

fn address(address: &PostalAddress) -> Markup {
    html! {
        (address.line1)
        @if !address.line2.is_empty() { ", " (address.line2) }
        ", " (address.city) ", " (address.region) " " (address.postal_code)
    }
}

fn checked_csrf(
    state: &AppState,
    session: &Session,
    form: &HashMap<String, String>,
) -> Result<(), Response> {
    match form.get("csrf") {
        Some(token) if session.csrf_matches(state, token) => Ok(()),
        _ => Err(forbidden(
            "The form's security token is missing or does not match your session; reload the page and try again.",
        )),
    }
}

/// A form that writes: this session's CSRF token, a writer's session, from this site.
fn checked_write(
    state: &AppState,
    session: &Session,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
) -> Result<(), Response> {
    checked_form(state, session, headers, form, writer_only)
}

/// [`checked_write`] for an operator's action (republishing a parked message): an operator,
/// not a writer, may ask for it.
fn checked_operation(
    state: &AppState,
    session: &Session,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
) -> Result<(), Response> {
    checked_form(state, session, headers, form, operator_only)
}

/// A form's checks, in order: the CSRF token, the role (`may`), then that it came from this
/// site.
fn checked_form(
    state: &AppState,
    session: &Session,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
    may: fn(&Session) -> Result<(), Response>,
) -> Result<(), Response> {
    checked_csrf(state, session, form)?;
    may(session)?;
    if cross_site(headers) {
        return Err(forbidden("A form from another site is refused."));
    }
    Ok(())
}

fn operator_only(session: &Session) -> Result<(), Response> {
    if session.operator() {
        Ok(())
    } else {
        Err(forbidden(
            "Only an operator's session can republish parked messages.",
        ))
    }
}

fn writer_only(session: &Session) -> Result<(), Response> {
    if session.writer() {
        Ok(())
    } else {
        Err(forbidden("An auditor's session cannot change anything."))
    }
}

/// A request from another site: a browser says so in `Origin` or `Sec-Fetch-Site`.
///
/// `Origin: null` is another site too: a browser sends it from a sandboxed frame, a
/// `data:` page or after a cross-origin redirect, all of which an attacker can make, and
/// never from a form on this site's own pages.
fn cross_site(headers: &HeaderMap) -> bool {
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok());
    let origin_elsewhere = headers.get(header::ORIGIN).is_some_and(|origin| {
        match origin.to_str() {
            Ok(origin) => !same_origin(origin, host),
            // Not even text: no browser on this site sent it.
            Err(_) => true,
        }
    });
    let fetch_elsewhere = headers
        .get("sec-fetch-site")
        .and_then(|value| value.to_str().ok())
        .is_some_and(|site| site == "cross-site" || site == "same-site");
    origin_elsewhere || fetch_elsewhere
}

/// Whether `origin` names this service as the client reached it (`host`). An opaque
/// origin (`null`) names no site, so never this one.
fn same_origin(origin: &str, host: Option<&str>) -> bool {
    if origin == "null" {
        return false;
    }
    // No Host to compare with (HTTP/1.0): nothing says the origin is another.
    let Some(host) = host else { return true };
    origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"))
        .is_some_and(|authority| authority == host)
}

// ---------------------------------------------------------------------------------------
// Sign-in

pub(super) async fn sign_in_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if session::read(&state, &headers).is_some() {
        return Redirect::to(&next::safe_next(query.get("next").map(String::as_str)))
            .into_response();
    }
    sign_in_page(
        &state,
        StatusCode::OK,
        query.get("next").map(String::as_str),
        None,
    )
}

fn sign_in_page(
    state: &AppState,
    status: StatusCode,
    next: Option<&str>,
    error: Option<&str>,
) -> Response {
    let body = html! {
        @if let Some(error) = error { p.error role="alert" { (error) } }
        form.card method="post" action="/sign-in" {
            label for="token" { "Token" }
            input #token type="password" name="token" autocomplete="current-password" required autofocus;
            input type="hidden" name="next" value=(next::safe_next(next));
            button type="submit" { "Sign in" }
        }
        p.hint { "Use the token the API takes (writer, operator or auditor). The session lasts "
            (session::SESSION_HOURS) " hours at most, and ends after "
            (session::IDLE_MINUTES) " minutes unused." }
    };
    let mut response = layout("Sign in", None, state, body);
    *response.status_mut() = status;
    response
}

pub(super) async fn sign_in(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if cross_site(&headers) {
        return forbidden("Sign-in from another site is refused.");
    }
    let next = form.get("next").map(String::as_str);
    let token = form
        .get("token")
        .map(String::as_str)
        .unwrap_or_default()
        .trim();
    let Some((token_digest, _)) = state.tokens.find_entry(token) else {
        return sign_in_page(
            &state,
            StatusCode::UNAUTHORIZED,
            next,
            Some("Unknown token."),
        );
    };
    let cookie = session::start(&state, token_digest);
    (
        [(header::SET_COOKIE, cookie)],
        Redirect::to(&next::safe_next(next)),
    )
        .into_response()
}

pub(super) async fn sign_out(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    checked_csrf(&state, &session, &form)?;
    if cross_site(&headers) {
        return Err(forbidden("A form from another site is refused."));
    }
    Ok((
        [(header::SET_COOKIE, session::end(&state))],
        Redirect::to("/sign-in"),
    )
        .into_response())
}

// ---------------------------------------------------------------------------------------
// Search

pub(super) async fn home(session: Session) -> Response {
    let _ = session;
    Redirect::to("/search").into_response()
}

pub(super) async fn search(
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
                include_str!("../sql/console/search_contacts.sql"),
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

// ---------------------------------------------------------------------------------------
// Business

pub(super) async fn business(
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
            .query(include_str!("../sql/console/stream_events.sql"), &[&stream])
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

pub(super) async fn event_proof(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
) -> Page {
    let event_id = uuid("event id", &id)?;
    let proof = crate::digest::proof::for_event(state.ledger.pool(), event_id, &state.digest_tree)
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
fn proof_error(error: crate::digest::proof::ProofError) -> Response {
    use crate::digest::proof::ProofError;
    match error {
        ProofError::UnknownEvent(_) => {
            error_page(StatusCode::NOT_FOUND, "No proof", &error.to_string())
        }
        ProofError::NotSealed(_) => {
            error_page(StatusCode::CONFLICT, "Not sealed yet", &error.to_string())
        }
        ProofError::Pool(error) => api_error(error),
        ProofError::Database(_) | ProofError::Digest(_) => api_error(ApiError::internal(&error)),
    }
}

// ---------------------------------------------------------------------------------------
// Contact

pub(super) async fn contact(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
) -> Page {
    let contact_id = uuid("contact id", &id)?;
    let client = state.ledger.pool().get().await.map_err(api_error)?;
    let Some(contact) = queries::contact(&client, contact_id)
        .await
        .map_err(api_error)?
    else {
        return Err(error_page(
            StatusCode::NOT_FOUND,
            "No such contact",
            &format!("The ledger has no contact {contact_id}."),
        ));
    };
    let lineage = queries::lineage(&client, contact_id)
        .await
        .map_err(api_error)?;
    let active: i64 = client
        .query_one(
            include_str!("../sql/console/active_assignments.sql"),
            &[&contact_id],
        )
        .await
        .map_err(api_error)?
        .get(0);
    let mut runs = Vec::new();
    for run_id in reassign::runs_of(&client, contact_id)
        .await
        .map_err(api_error)?
    {
        runs.extend(reassign::status(&client, run_id).await.map_err(api_error)?);
    }
    let can_supersede = session.writer() && contact.superseded_by.is_none();
    let body = html! {
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
            @for link in &lineage {
                li {
                    @if link.contact_id == contact.contact_id { strong { (link.name) } }
                    @else { a href={"/contacts/" (link.contact_id)} { (link.name) } }
                    " — " (link.status.as_str()) ", from " (time(link.created_at))
                }
            }
        }
        h2 { "Reassignment runs" }
        @if runs.is_empty() { p { "None." } } @else {
            table.list {
                thead { tr { th { "Run" } th { "Status" } th { "To contact" } th { "Replaced" } th { "Failed" } th { "Started" } } }
                tbody {
                    @for run in &runs {
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
        @if can_supersede {
            h2 { "Supersede this contact" }
            form.card.supersede #supersede method="post" action={"/contacts/" (contact.contact_id) "/supersede"} {
                input type="hidden" name="csrf" value=(session.csrf(&state));
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
    };
    Ok(layout("Contact", Some(&session), &state, body))
}

pub(super) async fn supersede(
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

// ---------------------------------------------------------------------------------------
// Run

fn percent(run: &RunStatus) -> f64 {
    if run.completed_at.is_some() {
        return 100.0;
    }
    let done = run.replaced + run.skipped + run.failed;
    if run.total_at_start <= 0 {
        0.0
    } else {
        (done as f64 * 100.0 / run.total_at_start as f64).min(100.0)
    }
}

async fn run_status(state: &AppState, id: &str) -> Result<RunStatus, Response> {
    let run_id = uuid("run id", id)?;
    let client = state.ledger.pool().get().await.map_err(api_error)?;
    reassign::status(&client, run_id)
        .await
        .map_err(api_error)?
        .ok_or_else(|| {
            error_page(
                StatusCode::NOT_FOUND,
                "No such run",
                &format!("The ledger has no reassignment run {run_id}."),
            )
        })
}

pub(super) async fn run(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
) -> Page {
    let run = run_status(&state, &id).await?;
    let percent = percent(&run);
    let body = html! {
        section.run #run data-progress={"/runs/" (run.run_id) "/progress"} {
            progress #bar max="100" value=(format!("{percent:.1}")) { (format!("{percent:.1}")) "%" }
            p.percent { span #percent { (format!("{percent:.1}")) } "% — " span #state { (run.status.as_str()) } }
            dl.facts {
                dt { "Run" } dd { code { (run.run_id) } }
                dt { "From contact" } dd { a href={"/contacts/" (run.old_contact_id)} { (run.old_contact_id) } }
                dt { "To contact" } dd { a href={"/contacts/" (run.new_contact_id)} { (run.new_contact_id) } }
                dt { "Cursor" } dd #cursor { (run.cursor.map_or("(start)".into(), |c| c.to_string())) }
                dt { "Pages" } dd #pages { (run.pages) }
                dt { "Replaced" } dd #replaced { (run.replaced) }
                dt { "Skipped" } dd #skipped { (run.skipped) }
                dt { "Failed" } dd #failed { (run.failed) }
                dt { "Of" } dd #total { (run.total_at_start) }
                dt { "Rate" } dd #rate { (format!("{:.0}", run.rows_per_second)) " rows/s" }
                dt { "ETA" } dd #eta { (run.eta_seconds.map_or("—".into(), |s| format!("{s:.0} s"))) }
                dt { "Stalled" } dd #stalled { (if run.stalled { "yes" } else { "no" }) }
            }
            @if let Some(error) = &run.last_error { p.error #last-error { "Last page error: " (error) } }
            @if !run.failures.is_empty() {
                h2 { "Failed rows" }
                table.list #failures {
                    thead { tr { th { "Assignment" } th { "Business" } th { "Attempts" } th { "Reason" } } }
                    tbody {
                        @for failure in &run.failures {
                            tr {
                                td { code { (failure.assignment_id) } }
                                td { a href={"/businesses/" (failure.business_id)} { (failure.business_id) } }
                                td { (failure.attempts) }
                                td { (failure.reason) }
                            }
                        }
                    }
                }
            }
            noscript { p { a href={"/runs/" (run.run_id)} { "Reload" } " to see the progress." } }
            @if session.writer() && run.completed_at.is_none() {
                form.card #resume method="post" action={"/runs/" (run.run_id) "/resume"} {
                    input type="hidden" name="csrf" value=(session.csrf(&state));
                    button type="submit" { "Resume (re-raise the page it waits for)" }
                }
            }
        }
    };
    Ok(layout("Reassignment run", Some(&session), &state, body))
}

/// The run page's feed: the same status the API gives, read with the session.
pub(super) async fn run_progress(
    State(state): State<AppState>,
    _session: Session,
    Path(id): Path<String>,
) -> Page {
    let run = run_status(&state, &id).await?;
    let mut value = serde_json::to_value(&run).unwrap_or_default();
    value["percent"] = serde_json::json!(percent(&run));
    Ok(([(header::CACHE_CONTROL, "no-store")], axum::Json(value)).into_response())
}

pub(super) async fn resume(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    checked_write(&state, &session, &headers, &form)?;
    let run_id = uuid("run id", &id)?;
    reassign::resume(state.ledger.pool(), run_id)
        .await
        .map_err(api_error)?;
    Ok(Redirect::to(&format!("/runs/{run_id}")).into_response())
}

// ---------------------------------------------------------------------------------------
// Operations

pub(super) async fn operations(State(state): State<AppState>, session: Session) -> Page {
    let client = state.ledger.pool().get().await.map_err(api_error)?;
    let slot = client
        .query_opt(
            include_str!("../sql/console/relay_slot.sql"),
            &[&state.relay_slot],
        )
        .await
        .map_err(api_error)?;
    let parked = client
        .query(include_str!("../sql/console/parked.sql"), &[])
        .await
        .map_err(api_error)?;
    let running = reassign::in_progress(&client).await.map_err(api_error)?;
    let stalled = reassign::stalled(&client, reassign::STALL_AFTER)
        .await
        .map_err(api_error)?;
    let replays = client
        .query(include_str!("../sql/console/replays.sql"), &[])
        .await
        .map_err(api_error)?;
    let digest = crate::digest::build::latest(&client)
        .await
        .map_err(|error| api_error(ApiError::internal(&error)))?;
    // The newest digest's signature, checked with the key this service signs with (when
    // digests are on) or else only with the key the digest names.
    let verified = digest.as_ref().map(|document| {
        let signed = crate::digest::SignedDigest::from_document(document);
        let key = state
            .digest_public_key
            .as_deref()
            .or_else(|| document["public_key_pem"].as_str())
            .and_then(crate::digest::public_key_from_pem);
        match (signed, key) {
            (Err(error), _) => format!("unreadable: {error}"),
            (Ok(_), None) => "no public key to check it with".to_owned(),
            (Ok(signed), Some(key)) if signed.verify(&key) => {
                if state.digest_public_key.is_some() {
                    "signature verifies with this service's public key".to_owned()
                } else {
                    "signature verifies with the key the digest names (digests are off here: no key of this service to compare)".to_owned()
                }
            }
            (Ok(_), Some(_)) => "SIGNATURE DOES NOT VERIFY".to_owned(),
        }
    });
    let body = html! {
        section #relay {
            h2 { "Relay" }
            @match &slot {
                None => p.error { "No replication slot " code { (state.relay_slot) } ": the relay has not started yet." }
                Some(slot) => {
                    @let active: bool = slot.get(0);
                    @let lag_bytes: Option<i64> = slot.get(1);
                    @let published_before: Option<DateTime<Utc>> = slot.get(2);
                    dl.facts {
                        dt { "Slot" } dd { code { (state.relay_slot) } }
                        dt { "Streaming" } dd #streaming { (if active { "yes" } else { "no (no relay connected)" }) }
                        dt { "Lag" } dd #lag-bytes { (lag_bytes.map_or("unknown".into(), |b| format!("{b} bytes"))) }
                        dt { "Lag in time" } dd #lag-seconds {
                            @match (lag_bytes, published_before) {
                                (Some(0), _) => "0 s (nothing to publish)",
                                (_, Some(at)) => { "at most " (format!("{:.0}", (Utc::now() - at).as_seconds_f64())) " s (everything committed before " (time(at)) " is published)" }
                                _ => "unknown (no retention mark confirmed yet)",
                            }
                        }
                    }
                }
            }
            h3 { "Parked messages" }
            @if parked.is_empty() { p #parked-none { "None." } } @else {
                table.list #parked {
                    thead { tr { th { "#" } th { "Event" } th { "Type" } th { "Topic" } th { "Error" } th { "Parked" } th { "Republish" } } }
                    tbody {
                        @for row in &parked {
                            tr {
                                td { (row.get::<_, i64>(0)) }
                                td { code { (row.get::<_, Uuid>(1)) } }
                                td { (row.get::<_, String>(2)) }
                                td { (row.get::<_, String>(3)) }
                                td { (row.get::<_, String>(4)) }
                                td { (time(row.get(5))) }
                                td {
                                    @if let Some(at) = row.get::<_, Option<DateTime<Utc>>>(6) {
                                        "requested " (time(at)) " by " (row.get::<_, Option<String>>(7).unwrap_or_default()) "; the relay publishes it within seconds"
                                    } @else {
                                        @if let Some(error) = row.get::<_, Option<String>>(8) { span.error { "Last attempt refused: " (error) } " " }
                                        @if session.operator() {
                                            form.inline method="post" action={"/operations/parked/" (row.get::<_, i64>(0)) "/republish"} {
                                                input type="hidden" name="csrf" value=(session.csrf(&state));
                                                button type="submit" { "Republish" }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                p.hint { "Fix the cause first (e.g. the broker's message.max.bytes). The relay publishes a requested message again with its original key and headers; " code { "ledger relay parked republish --id N" } " does the same from a shell." }
            }
        }
        section #worker {
            h2 { "Worker" }
            dl.facts {
                dt { "Runs in progress" } dd #runs-active { (running.len()) }
                dt { "Stalled (no progress for " (reassign::STALL_AFTER.as_secs()) " s)" } dd #runs-stalled { (stalled.len()) }
            }
            @if !running.is_empty() {
                ul { @for run in &running { li { a href={"/runs/" (run)} { (run) } @if stalled.contains(run) { " (stalled)" } } } }
            }
            h3 { "Replays" }
            @if replays.is_empty() { p { "None." } } @else {
                table.list {
                    thead { tr { th { "Replay" } th { "Status" } th { "Published" } th { "Of" } th { "Requested" } } }
                    tbody {
                        @for row in &replays {
                            tr {
                                td { code { (row.get::<_, Uuid>(0)) } }
                                td { (row.get::<_, String>(1)) }
                                td { (row.get::<_, i64>(2)) }
                                td { (row.get::<_, Option<i64>>(3).map_or("—".into(), |n| n.to_string())) }
                                td { (time(row.get(4))) }
                            }
                        }
                    }
                }
            }
        }
        section #digests {
            h2 { "Signed digests" }
            @match &digest {
                None => p { "No digest yet" @if state.digest_public_key.is_none() { " (digests are off on this service)" } "." }
                Some(document) => {
                    dl.facts {
                        dt { "Latest" } dd #digest-seq { (document["seq"]) }
                        dt { "Events" } dd { (document["event_count"]) }
                        dt { "Time" } dd { (document["time"].as_str().unwrap_or_default()) }
                        dt { "Root" } dd { code { (document["root"].as_str().unwrap_or_default()) } }
                        dt { "Check" } dd #digest-verified { (verified.as_deref().unwrap_or_default()) }
                    }
                    p.hint { "The whole ledger against it: " code { "ledger verify" } "; one answer: " code { "ledger proof verify" } " (offline, from the public key)." }
                }
            }
        }
    };
    Ok(layout("Operations", Some(&session), &state, body))
}

/// An operator asks the relay to publish a parked message again (the relay holds the
/// producer).
pub(super) async fn request_republish(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    checked_operation(&state, &session, &headers, &form)?;
    let id: i64 = id
        .parse()
        .map_err(|_| bad_request(format!("parked message id {id:?} is not a number")))?;
    let client = state.ledger.pool().get().await.map_err(api_error)?;
    let updated = client
        .execute(
            "UPDATE outbox_parked SET republish_requested_at = now(), republish_requested_by = $2 \
             WHERE id = $1 AND republished_at IS NULL",
            &[&id, &session.name],
        )
        .await
        .map_err(api_error)?;
    if updated == 0 {
        return Err(error_page(
            StatusCode::NOT_FOUND,
            "No such parked message",
            &format!("No parked message #{id} waits to be published."),
        ));
    }
    Ok(Redirect::to("/operations").into_response())
}
