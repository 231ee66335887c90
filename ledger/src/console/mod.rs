//! The web console (`ledger serve` at `/`): pages for auditors, customer service and
//! operators, on the same roles and tokens as the API.
//!
//! - Server-rendered HTML (`maud`: templates are Rust code checked at compile time and
//!   escape every value by default; no template files to ship, no Node build). The
//!   stylesheet and the one script are embedded in the binary.
//! - Read pages work without JavaScript. The script only makes the run page's progress bar
//!   advance without a reload.
//! - A token is exchanged for a signed session cookie ([`session`]) that names the token's
//!   entry, looked up again on every request; every form that writes carries the session's
//!   CSRF token and is refused (403) without it, from another site (an opaque `Origin:
//!   null` included), or from an auditor's session.
//! - Every response carries a strict Content-Security-Policy: scripts and styles from this
//!   origin only, no inline script or style, no framing.

// A handler's or a check's error is the finished error page, built once per request:
// boxing it would buy nothing.
#![allow(clippy::result_large_err)]

mod guard;
mod html;
mod layout;
mod next;
mod pages;
mod pictures;
mod session;
mod units;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

pub use session::{COOKIE, IDLE_MINUTES, SECURE_COOKIE, SESSION_HOURS};

use crate::api::AppState;

/// The policy every console response carries.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";

/// The console's routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(pages::home))
        .route("/sign-in", get(pages::sign_in_form).post(pages::sign_in))
        .route("/sign-out", post(pages::sign_out))
        .route("/search", get(pages::search))
        .route("/businesses/{id}", get(pages::business))
        .route("/events/{id}/proof", get(pages::event_proof))
        .route("/contacts/{id}", get(pages::contact))
        .route("/contacts/{id}/supersede", post(pages::supersede))
        .route("/runs/{id}", get(pages::run))
        .route("/runs/{id}/progress", get(pages::run_progress))
        .route("/runs/{id}/resume", post(pages::resume))
        .route("/operations", get(pages::operations))
        .route("/runbooks/{anchor}", get(pages::runbook))
        .route(
            "/operations/parked/{id}/republish",
            post(pages::request_republish),
        )
        .route("/assets/console.css", get(stylesheet))
        .route("/assets/console.js", get(script))
        // Browsers ask for /favicon.ico whatever the page links: the same icon, not a 404.
        .route("/assets/favicon.svg", get(favicon))
        .route("/favicon.ico", get(favicon))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            session::keep_alive,
        ))
        .layer(middleware::from_fn(security_headers))
        .with_state(state)
}

async fn security_headers(request: Request, next: Next) -> Response {
    let asset = request.uri().path().starts_with("/assets/");
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !asset {
        // Pages hold what a session may see: never kept by a shared cache or the back button.
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

async fn stylesheet() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        include_str!("assets/console.css"),
    )
}

async fn favicon() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        include_str!("assets/favicon.svg"),
    )
}

async fn script() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        include_str!("assets/console.js"),
    )
}
