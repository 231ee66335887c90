//! The console's sign-in: a token (the API's, same roles) exchanged for a signed session
//! cookie, and the CSRF token every form that writes carries.
//!
//! The cookie holds `expiry.role.nonce.name`, signed with HMAC-SHA256 by the `cookie` crate
//! (a key derived from the cursor key), `HttpOnly`, `SameSite=Strict`, `Path=/`, and
//! `Secure` when the service speaks TLS. Nothing is stored on the server: signing out
//! removes the cookie from the browser; a copied cookie stays valid until its expiry
//! ([`SESSION_HOURS`]). The CSRF token is an HMAC of the session's nonce under another
//! derived key, so it is bound to the session and cannot be computed without the key.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use cookie::{Cookie, CookieJar, Key, SameSite};
use subtle::ConstantTimeEq;

use crate::api::{AppState, Role};

/// The session cookie's name.
pub const COOKIE: &str = "ra_session";
/// How long a session lasts.
pub const SESSION_HOURS: i64 = 8;

/// A signed-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    /// The token holder's name (the events' actor).
    pub name: String,
    /// What the token may do.
    pub role: Role,
    /// Random per sign-in; the CSRF token is derived from it.
    nonce: String,
    /// Unix seconds.
    pub expires: i64,
}

impl Session {
    /// Whether the session may write.
    pub fn writer(&self) -> bool {
        self.role == Role::Writer
    }

    /// The CSRF token of this session's forms.
    pub fn csrf(&self, state: &AppState) -> String {
        URL_SAFE_NO_PAD.encode(
            state
                .cursor_key
                .derive(&format!("console-csrf:{}", self.nonce)),
        )
    }

    /// Whether `presented` is this session's CSRF token (constant time).
    pub fn csrf_matches(&self, state: &AppState, presented: &str) -> bool {
        bool::from(self.csrf(state).as_bytes().ct_eq(presented.as_bytes()))
    }

    /// Whether the session may ask for republishing parked messages.
    pub fn operator(&self) -> bool {
        self.role == Role::Operator
    }

    /// The role's name as the pages show it.
    pub fn role_name(&self) -> &'static str {
        self.role.name()
    }
}

fn key(state: &AppState) -> Key {
    let mut master = [0u8; 64];
    master[..32].copy_from_slice(&state.cursor_key.derive("console-session-signing"));
    master[32..].copy_from_slice(&state.cursor_key.derive("console-session-spare"));
    Key::from(&master)
}

/// The `Set-Cookie` value of a new session for `name` with `role`.
pub fn start(state: &AppState, name: &str, role: Role) -> String {
    let expires = chrono::Utc::now().timestamp() + SESSION_HOURS * 3600;
    let role = role.name();
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let value = format!(
        "{expires}.{role}.{nonce}.{}",
        URL_SAFE_NO_PAD.encode(name.as_bytes())
    );
    let mut jar = CookieJar::new();
    jar.signed_mut(&key(state)).add(base_cookie(state, value));
    let cookie = jar.get(COOKIE).expect("just added");
    let mut cookie = cookie.clone();
    cookie.set_max_age(cookie::time::Duration::hours(SESSION_HOURS));
    cookie.encoded().to_string()
}

/// The `Set-Cookie` value that removes the session.
pub fn end(state: &AppState) -> String {
    let mut cookie = base_cookie(state, String::new());
    cookie.make_removal();
    cookie.encoded().to_string()
}

fn base_cookie(state: &AppState, value: String) -> Cookie<'static> {
    Cookie::build((COOKIE, value))
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(state.secure_cookies)
        .path("/")
        .build()
}

/// The session the request's cookie holds, if it is valid and not expired.
pub fn read(state: &AppState, headers: &HeaderMap) -> Option<Session> {
    let mut jar = CookieJar::new();
    for value in headers.get_all(header::COOKIE) {
        let Ok(value) = value.to_str() else { continue };
        for cookie in Cookie::split_parse_encoded(value.to_owned()).flatten() {
            if cookie.name() == COOKIE {
                jar.add_original(cookie.into_owned());
            }
        }
    }
    let cookie = jar.signed(&key(state)).get(COOKIE)?;
    let mut parts = cookie.value().splitn(4, '.');
    let expires: i64 = parts.next()?.parse().ok()?;
    let role = Role::from_name(parts.next()?)?;
    let nonce = parts.next()?.to_owned();
    let name = String::from_utf8(URL_SAFE_NO_PAD.decode(parts.next()?).ok()?).ok()?;
    (expires > chrono::Utc::now().timestamp()).then_some(Session {
        name,
        role,
        nonce,
        expires,
    })
}

/// No valid session: a page asks the browser to sign in first and come back; anything
/// else (a form post, the progress feed) is 401.
#[derive(Debug)]
pub struct SignInFirst {
    back_to: Option<String>,
}

impl IntoResponse for SignInFirst {
    fn into_response(self) -> Response {
        match self.back_to {
            Some(path) => Redirect::to(&format!(
                "/sign-in?next={}",
                super::pages::encode_query(&path)
            ))
            .into_response(),
            None => super::pages::error_page(
                StatusCode::UNAUTHORIZED,
                "Not signed in",
                "Sign in first; your session may have expired.",
            ),
        }
    }
}

impl FromRequestParts<AppState> for Session {
    type Rejection = SignInFirst;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        read(state, &parts.headers).ok_or_else(|| SignInFirst {
            back_to: (parts.method == axum::http::Method::GET
                && !parts.uri.path().ends_with("/progress"))
            .then(|| {
                parts
                    .uri
                    .path_and_query()
                    .map_or("/".into(), |path| path.as_str().to_owned())
            }),
        })
    }
}

/// Where to go after signing in: a path on this site only (no `//host`, no scheme).
pub fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(path)
            if path.starts_with('/')
                && !path.starts_with("//")
                && !path.contains('\\')
                && path.len() <= 2000 =>
        {
            path.to_owned()
        }
        _ => "/".into(),
    }
}
