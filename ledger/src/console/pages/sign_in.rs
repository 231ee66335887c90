//! Signing in with a token, and out.

use std::collections::HashMap;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;

use crate::api::AppState;
use crate::console::guard::{checked_csrf, cross_site, said_this_site};
use crate::console::html::{Page, forbidden};
use crate::console::layout::layout;
use crate::console::next;
use crate::console::session::{self, Session};

pub(in crate::console) async fn sign_in_form(
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

pub(in crate::console) async fn sign_in(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if cross_site(&headers) {
        return forbidden("Sign-in from another site is refused.");
    }
    if !said_this_site(&headers) {
        return forbidden(
            "Sign-in is accepted only from this site's sign-in page, in a browser that sends \
             Origin or Sec-Fetch-Site with the form. Open /sign-in and sign in there.",
        );
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

pub(in crate::console) async fn sign_out(
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
