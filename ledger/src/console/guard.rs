//! The check of every console form that changes something: the session's CSRF token, the
//! role that may send it, and that it came from this site. Sign-in, which has no session
//! yet and so no token, checks only the last, and asks the browser to say so
//! ([`said_this_site`]) rather than take silence for it.

use std::collections::HashMap;

use axum::http::{HeaderMap, header};
use axum::response::Response;

use super::html::forbidden;
use super::session::Session;
use crate::api::AppState;

pub(super) fn checked_csrf(
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
pub(super) fn checked_write(
    state: &AppState,
    session: &Session,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
) -> Result<(), Response> {
    checked_form(state, session, headers, form, writer_only)
}

/// [`checked_write`] for an operator's action (republishing a parked message): an operator,
/// not a writer, may ask for it.
pub(super) fn checked_operation(
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
pub(super) fn cross_site(headers: &HeaderMap) -> bool {
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

/// A request whose browser said it came from this site: `Sec-Fetch-Site: same-origin`, or
/// an `Origin` naming this service. Every browser since 2020 sends one of the two with a
/// form's POST; only a client that is no browser, or a request an attacker made without
/// them, sends neither. Sign-in needs this: without a session there is no CSRF token, and
/// [`cross_site`] alone accepts a request that says nothing (issue 35, item 9).
pub(super) fn said_this_site(headers: &HeaderMap) -> bool {
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok());
    let fetch_same = headers
        .get("sec-fetch-site")
        .is_some_and(|site| site == "same-origin");
    let origin_same = headers
        .get(header::ORIGIN)
        .and_then(|origin| origin.to_str().ok())
        .is_some_and(|origin| host.is_some() && same_origin(origin, host));
    fetch_same || origin_same
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
