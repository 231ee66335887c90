//! The frame every signed-in page shares: head, stylesheet and script, the top bar with the
//! session and its sign-out form.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use super::html::time;
use super::session::Session;
use crate::api::AppState;

/// A whole page: header with the session, then `body`.
pub(super) fn layout(
    title: &str,
    session: Option<&Session>,
    state: &AppState,
    body: Markup,
) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · RA Ledger" }
                link rel="stylesheet" href="/assets/console.css";
                link rel="icon" type="image/svg+xml" href="/assets/favicon.svg";
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
