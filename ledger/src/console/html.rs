//! What every console page shares that needs no session: error pages, small fragments of
//! markup, and path and form values read (a bad one is a 400 page). Kept apart from
//! [`super::session`], which uses the error pages, so the two do not import each other.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, NaiveDate, Utc};
use maud::{DOCTYPE, Markup, html};
use uuid::Uuid;

use crate::api::ApiError;
use crate::domain::{self, PostalAddress};

/// A handler's answer: the page, or the error page.
pub(super) type Page = Result<Response, Response>;

/// An error page with `status` (no session details: it may be shown before sign-in).
pub(super) fn error_page(status: StatusCode, title: &str, message: &str) -> Response {
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
pub(super) fn api_error(error: impl Into<ApiError>) -> Response {
    let error = error.into();
    let status = error.status();
    let title = if status.is_server_error() {
        "Something went wrong"
    } else {
        "Cannot do that"
    };
    error_page(status, title, error.message())
}

pub(super) fn bad_request(message: impl Into<String>) -> Response {
    error_page(StatusCode::BAD_REQUEST, "Cannot do that", &message.into())
}

pub(super) fn forbidden(message: &str) -> Response {
    error_page(StatusCode::FORBIDDEN, "Not allowed", message)
}

/// Percent-encodes a query value.
pub(super) fn encode_query(value: &str) -> String {
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

pub(super) fn uuid(what: &str, text: &str) -> Result<Uuid, Response> {
    text.trim()
        .parse()
        .map_err(|_| bad_request(format!("{what} {text:?} is not a UUID")))
}

/// A form's instant: a date (midnight UTC) or an RFC 3339 time, within the ledger's years.
pub(super) fn instant(field: &str, text: &str) -> Result<Option<DateTime<Utc>>, Response> {
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

pub(super) fn time(value: DateTime<Utc>) -> String {
    value.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

pub(super) fn address(address: &PostalAddress) -> Markup {
    html! {
        (address.line1)
        @if !address.line2.is_empty() { ", " (address.line2) }
        ", " (address.city) ", " (address.region) " " (address.postal_code)
    }
}
