//! The console's sign-in: a token (the API's, same roles) exchanged for a signed session
//! cookie, and the CSRF token every form that writes carries.
//!
//! The cookie holds `expiry.seen.nonce.entry`, signed with HMAC-SHA256 by the `cookie`
//! crate under a key derived from the session key ([`crate::session_key`], never the cursor
//! key), `HttpOnly`, `SameSite=Strict`, `Path=/`. When browsers reach the console over
//! HTTPS (the service's own TLS, or `secure_cookies` behind a TLS terminator) it is also
//! `Secure` and named [`SECURE_COOKIE`]: the `__Host-` prefix makes a browser refuse the
//! name from plain HTTP, from a subdomain or with a `Domain`, so nobody on the network or a
//! sibling site can plant a session of their own. Plain-HTTP cookies are then ignored.
//!
//! - `entry` names the configured token entry the session was made with (a keyed hash of
//!   the token's digest, so the cookie does not carry the digest itself), not its role or
//!   name. Every request looks the entry up in the tokens the service runs with: a token
//!   removed from the configuration is no session any more, and a token moved from writer
//!   to auditor is an auditor's session on its next request.
//! - `seen` is when the session was last used: one idle for [`IDLE_MINUTES`] is over. A
//!   page the session loads signs the cookie again with a new `seen` (at most once every
//!   [`REFRESH_SECONDS`]); the run page's progress feed does not, so a page left open does
//!   not keep a session alive.
//! - `expiry` ends every session [`SESSION_HOURS`] after sign-in, used or not. A cookie
//!   whose `expiry` is further away than that (and [`CLOCK_SKEW_SECONDS`]) was not made by
//!   a sign-in and is refused, whoever signed it.
//! - A session the previous key signed is signed again with the current key on its next
//!   request (so nobody active is signed out by a rotation), with its `expiry` brought
//!   forward to the previous key's `until` if that comes first. A cookie forged with a
//!   leaked old key therefore ends with the old key, however it was refreshed.
//!
//! Nothing is stored on the server: signing out removes the cookie from the browser; a
//! copied cookie stays valid until it is idle, expires, or its token is removed. The CSRF
//! token is an HMAC of the session's nonce under another derived key, so it is bound to the
//! session and cannot be computed without the key.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use cookie::{Cookie, CookieJar, SameSite};
use subtle::ConstantTimeEq;

use crate::api::{AppState, Principal, Role, Tokens};
use crate::session_key::{self, Purposes, SessionKeys};

/// The session cookie's name over plain HTTP.
pub const COOKIE: &str = "ra_session";
/// The session cookie's name when browsers reach the console over HTTPS.
pub const SECURE_COOKIE: &str = "__Host-ra_session";

/// The session cookie's name: [`SECURE_COOKIE`] over HTTPS, else [`COOKIE`].
fn cookie_name(secure: bool) -> &'static str {
    if secure { SECURE_COOKIE } else { COOKIE }
}
/// How long a session lasts at most.
pub const SESSION_HOURS: i64 = 8;
/// How long a session may go unused before it is over.
pub const IDLE_MINUTES: i64 = 30;
/// How far another instance's clock may run ahead of this one's: a cookie it signed may
/// say `expiry` and `seen` that much later than this clock allows.
pub const CLOCK_SKEW_SECONDS: i64 = 60;
/// How often a used session's cookie is signed again with a new `seen`.
pub const REFRESH_SECONDS: i64 = 60;

/// A signed-in browser, as the configured tokens say it is now.
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
    /// Unix seconds of the request that last refreshed the cookie.
    seen: i64,
    /// The SHA-256 of the session's token: its entry in [`Tokens`].
    token_digest: [u8; 32],
    /// Whether the previous session key signed the cookie.
    signed_by_previous: bool,
}

impl Session {
    /// Whether the session may write.
    pub fn writer(&self) -> bool {
        self.role == Role::Writer
    }

    /// The CSRF token of this session's forms.
    pub fn csrf(&self, state: &AppState) -> String {
        csrf_token(state.console.session_keys.current(), &self.nonce)
    }

    /// Whether `presented` is this session's CSRF token (constant time), under the current
    /// session key or the previous one while it is accepted: a form loaded before a
    /// rotation still posts.
    pub fn csrf_matches(&self, state: &AppState, presented: &str) -> bool {
        state
            .console
            .session_keys
            .accepted(Utc::now())
            .fold(false, |matched, keys| {
                let token = csrf_token(keys, &self.nonce);
                matched | bool::from(token.as_bytes().ct_eq(presented.as_bytes()))
            })
    }

    /// Whether the session may ask for republishing parked messages.
    pub fn operator(&self) -> bool {
        self.role == Role::Operator
    }

    /// The role's name as the pages show it.
    pub fn role_name(&self) -> &'static str {
        self.role.name()
    }

    /// Whether the cookie should be signed again at `now`: a minute after it was, or at
    /// once when the previous key signed it.
    fn refresh_due(&self, now: i64) -> bool {
        self.signed_by_previous || now - self.seen >= REFRESH_SECONDS
    }
}

fn csrf_token(keys: &Purposes, nonce: &str) -> String {
    URL_SAFE_NO_PAD.encode(session_key::mac(
        &keys.csrf,
        format!("console-csrf:{nonce}").as_bytes(),
    ))
}

/// The cookie's name of a token entry under `keys`.
fn entry_id(keys: &Purposes, token_digest: &[u8; 32]) -> String {
    URL_SAFE_NO_PAD.encode(&session_key::mac(&keys.entry, token_digest)[..16])
}

/// The `Set-Cookie` value of a new session for the token whose SHA-256 is `token_digest`.
pub fn start(state: &AppState, token_digest: &[u8; 32]) -> String {
    let now = Utc::now().timestamp();
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    signed_cookie(
        &state.console.session_keys,
        state.console.secure_cookies,
        &Fields {
            expires: now + SESSION_HOURS * 3600,
            seen: now,
            nonce: &nonce,
            token_digest,
        },
        now,
    )
}

/// The `Set-Cookie` value of `session` used at `now`: the same session, signed again with
/// the current key.
fn refreshed(keys: &SessionKeys, secure: bool, session: &Session, now: i64) -> String {
    signed_cookie(
        keys,
        secure,
        &Fields {
            expires: session.expires,
            seen: now,
            nonce: &session.nonce,
            token_digest: &session.token_digest,
        },
        now,
    )
}

/// What a session cookie carries.
struct Fields<'a> {
    expires: i64,
    seen: i64,
    nonce: &'a str,
    token_digest: &'a [u8; 32],
}

fn signed_cookie(keys: &SessionKeys, secure: bool, fields: &Fields<'_>, now: i64) -> String {
    let current = keys.current();
    let value = format!(
        "{}.{}.{}.{}",
        fields.expires,
        fields.seen,
        fields.nonce,
        entry_id(current, fields.token_digest)
    );
    let mut jar = CookieJar::new();
    jar.signed_mut(&current.cookie)
        .add(base_cookie(secure, value));
    let mut cookie = jar
        .get(cookie_name(secure))
        .cloned()
        .unwrap_or_else(|| base_cookie(secure, String::new()));
    cookie.set_max_age(cookie::time::Duration::seconds(fields.expires - now));
    cookie.encoded().to_string()
}

/// The `Set-Cookie` value that removes the session.
pub fn end(state: &AppState) -> String {
    let mut cookie = base_cookie(state.console.secure_cookies, String::new());
    cookie.make_removal();
    cookie.encoded().to_string()
}

fn base_cookie(secure: bool, value: String) -> Cookie<'static> {
    Cookie::build((cookie_name(secure), value))
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .path("/")
        .build()
}

/// The session the request's cookie holds, if it is valid now.
pub fn read(state: &AppState, headers: &HeaderMap) -> Option<Session> {
    read_at(
        &state.console.session_keys,
        &state.tokens,
        state.console.secure_cookies,
        headers,
        Utc::now(),
    )
}

/// The session the request's cookie holds at `now`: under the name of the scheme
/// (`secure`), signed by an accepted key, neither expired nor idle, and of a token entry
/// configured now, with that entry's name and role.
pub fn read_at(
    keys: &SessionKeys,
    tokens: &Tokens,
    secure: bool,
    headers: &HeaderMap,
    now: DateTime<Utc>,
) -> Option<Session> {
    let name = cookie_name(secure);
    let mut jar = CookieJar::new();
    for value in headers.get_all(header::COOKIE) {
        let Ok(value) = value.to_str() else { continue };
        for cookie in Cookie::split_parse_encoded(value.to_owned()).flatten() {
            if cookie.name() == name {
                jar.add_original(cookie.into_owned());
            }
        }
    }
    keys.accepted(now)
        .enumerate()
        .find_map(|(index, purposes)| {
            let cookie = jar.signed(&purposes.cookie).get(name)?;
            let mut session = parse(purposes, tokens, cookie.value(), now.timestamp())?;
            if index > 0 {
                // The old key's sessions end with it, refreshed or not (see the module's doc).
                session.signed_by_previous = true;
                if let Some(until) = keys.previous_until() {
                    session.expires = session.expires.min(until.timestamp());
                }
            }
            Some(session)
        })
}

/// A verified cookie value: still current, of a lifetime a sign-in gives, and its entry
/// resolved in `tokens`.
fn parse(purposes: &Purposes, tokens: &Tokens, value: &str, now: i64) -> Option<Session> {
    let mut parts = value.splitn(4, '.');
    let expires: i64 = parts.next()?.parse().ok()?;
    let seen: i64 = parts.next()?.parse().ok()?;
    let nonce = parts.next()?.to_owned();
    let entry = parts.next()?;
    let expired = expires <= now;
    let idle = now - seen > IDLE_MINUTES * 60;
    // No sign-in makes these: a signing key in the wrong hands, or a clock far off.
    let too_long = expires > now + SESSION_HOURS * 3600 + CLOCK_SKEW_SECONDS;
    let seen_later = seen > now + CLOCK_SKEW_SECONDS;
    if expired || idle || too_long || seen_later {
        return None;
    }
    let (token_digest, principal) = resolve(purposes, tokens, entry)?;
    Some(Session {
        name: principal.name.clone(),
        role: principal.role,
        nonce,
        expires,
        seen,
        token_digest,
        signed_by_previous: false,
    })
}

/// The configured entry the cookie names. Every entry is compared, each in constant time.
fn resolve<'a>(
    purposes: &Purposes,
    tokens: &'a Tokens,
    entry: &str,
) -> Option<([u8; 32], &'a Principal)> {
    let mut found = None;
    for (digest, principal) in tokens.entries() {
        if bool::from(
            entry_id(purposes, digest)
                .as_bytes()
                .ct_eq(entry.as_bytes()),
        ) {
            found = Some((*digest, principal));
        }
    }
    found
}

/// The console's middleware that keeps a used session alive: a request with a valid
/// session gets its cookie signed again with a new `seen` (see the module's doc), unless
/// the answer sets a cookie of its own (sign-in, sign-out) or is the progress feed.
pub async fn keep_alive(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = request.uri().path();
    let counts = !path.ends_with("/progress") && !path.starts_with("/assets/");
    let session = counts.then(|| read(&state, request.headers())).flatten();
    let mut response = next.run(request).await;
    let now = Utc::now().timestamp();
    if let Some(session) = session.filter(|session| session.refresh_due(now))
        && !response.headers().contains_key(header::SET_COOKIE)
        && let Ok(cookie) = refreshed(
            &state.console.session_keys,
            state.console.secure_cookies,
            &session,
            now,
        )
        .parse()
    {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
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
                super::html::encode_query(&path)
            ))
            .into_response(),
            None => super::html::error_page(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::token_entry;

    const NOW: i64 = 1_800_000_000;

    fn tokens(spec: &[(Role, &str, &str)]) -> Tokens {
        let entries: Vec<String> = spec
            .iter()
            .map(|(role, name, token)| token_entry(*role, name, token))
            .collect();
        Tokens::parse(&entries.join(",")).unwrap()
    }

    /// The request headers of a browser holding the cookie `token`'s sign-in set at
    /// `signed_in`, last refreshed at `seen`, signed with `keys`.
    fn browser(keys: &SessionKeys, token: &str, signed_in: i64, seen: i64) -> HeaderMap {
        let digest = *tokens(&[(Role::Writer, "any", token)])
            .find_entry(token)
            .unwrap()
            .0;
        let fields = Fields {
            expires: signed_in + SESSION_HOURS * 3600,
            seen,
            nonce: "nonce",
            token_digest: &digest,
        };
        let set_cookie = signed_cookie(keys, false, &fields, seen);
        let mut headers = HeaderMap::new();
        let pair = set_cookie.split(';').next().unwrap().to_owned();
        headers.insert(header::COOKIE, pair.parse().unwrap());
        headers
    }

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(seconds, 0).unwrap()
    }

    #[test]
    fn a_session_is_what_its_token_entry_is_now() {
        let keys = SessionKeys::new(&[3u8; 32]).unwrap();
        let headers = browser(&keys, "token-a", NOW, NOW);
        let configured = tokens(&[(Role::Writer, "cs-tool", "token-a")]);
        let session = read_at(&keys, &configured, false, &headers, at(NOW + 1)).unwrap();
        assert_eq!(
            (session.name.as_str(), session.role),
            ("cs-tool", Role::Writer)
        );

        // Moved to auditor (and renamed) in the configuration: the same cookie is now an
        // auditor's session under the new name.
        let downgraded = tokens(&[(Role::Auditor, "cs-readonly", "token-a")]);
        let session = read_at(&keys, &downgraded, false, &headers, at(NOW + 1)).unwrap();
        assert_eq!(
            (session.name.as_str(), session.role),
            ("cs-readonly", Role::Auditor)
        );
        assert!(!session.writer());

        // Removed: no session, whatever else is configured.
        let removed = tokens(&[(Role::Writer, "cs-tool", "token-b")]);
        assert!(read_at(&keys, &removed, false, &headers, at(NOW + 1)).is_none());
    }

    #[test]
    fn a_session_ends_when_idle_or_expired() {
        let keys = SessionKeys::new(&[3u8; 32]).unwrap();
        let configured = tokens(&[(Role::Writer, "cs-tool", "token-a")]);
        let idle = IDLE_MINUTES * 60;
        let headers = browser(&keys, "token-a", NOW, NOW);
        assert!(read_at(&keys, &configured, false, &headers, at(NOW + idle)).is_some());
        assert!(read_at(&keys, &configured, false, &headers, at(NOW + idle + 1)).is_none());
        // Used a minute before going idle: refreshed, it lasts another idle period...
        let refreshed = browser(&keys, "token-a", NOW, NOW + idle - 60);
        assert!(read_at(&keys, &configured, false, &refreshed, at(NOW + idle + 1)).is_some());
        // ...but never past the sign-in's expiry.
        let end = NOW + SESSION_HOURS * 3600;
        let late = browser(&keys, "token-a", NOW, end - 10);
        assert!(read_at(&keys, &configured, false, &late, at(end - 1)).is_some());
        assert!(read_at(&keys, &configured, false, &late, at(end)).is_none());
    }

    #[test]
    fn a_session_of_the_previous_key_is_accepted_until_the_stated_instant() {
        let old = SessionKeys::new(&[1u8; 32]).unwrap();
        let configured = tokens(&[(Role::Writer, "cs-tool", "token-a")]);
        let headers = browser(&old, "token-a", NOW, NOW);
        let until = at(NOW + 600);
        let rotated = SessionKeys::new(&[2u8; 32])
            .unwrap()
            .with_previous(&[1u8; 32], until)
            .unwrap();
        let session = read_at(&rotated, &configured, false, &headers, at(NOW + 60)).unwrap();
        assert!(session.signed_by_previous && session.refresh_due(NOW + 60));
        assert!(read_at(&rotated, &configured, false, &headers, until).is_none());
        let without = SessionKeys::new(&[2u8; 32]).unwrap();
        assert!(read_at(&without, &configured, false, &headers, at(NOW + 60)).is_none());
        // Signed again with the current key, the session no longer needs the previous one.
        let current = browser(&rotated, "token-a", NOW, NOW + 60);
        let session = read_at(&without, &configured, false, &current, at(NOW + 120)).unwrap();
        assert!(!session.signed_by_previous);
    }

    /// The headers of a browser holding a cookie with any `expires` and `seen`, signed
    /// with `keys`: what whoever holds a key can forge.
    fn forged(keys: &SessionKeys, token: &str, expires: i64, seen: i64) -> HeaderMap {
        let digest = *tokens(&[(Role::Writer, "any", token)])
            .find_entry(token)
            .unwrap()
            .0;
        let fields = Fields {
            expires,
            seen,
            nonce: "forged",
            token_digest: &digest,
        };
        let set_cookie = signed_cookie(keys, false, &fields, seen);
        let mut headers = HeaderMap::new();
        let pair = set_cookie.split(';').next().unwrap().to_owned();
        headers.insert(header::COOKIE, pair.parse().unwrap());
        headers
    }

    #[test]
    fn a_cookie_that_outlives_any_sign_in_is_refused() {
        let keys = SessionKeys::new(&[3u8; 32]).unwrap();
        let configured = tokens(&[(Role::Writer, "cs-tool", "token-a")]);
        let longest = SESSION_HOURS * 3600;
        let year = forged(&keys, "token-a", NOW + 365 * 24 * 3600, NOW);
        assert!(read_at(&keys, &configured, false, &year, at(NOW)).is_none());
        let just_over = forged(
            &keys,
            "token-a",
            NOW + longest + CLOCK_SKEW_SECONDS + 1,
            NOW,
        );
        assert!(read_at(&keys, &configured, false, &just_over, at(NOW)).is_none());
        // Another instance's clock a little ahead: still a session.
        let ahead = forged(&keys, "token-a", NOW + 30 + longest, NOW + 30);
        assert!(read_at(&keys, &configured, false, &ahead, at(NOW)).is_some());
        // A `seen` from the future keeps an idle session alive: refused too.
        let future_seen = forged(&keys, "token-a", NOW + 3600, NOW + 3000);
        assert!(read_at(&keys, &configured, false, &future_seen, at(NOW)).is_none());
    }

    /// Issue 35, item 7: a cookie forged with a leaked old key, during the rotation, was
    /// signed again with the new key keeping its `expires`, and lived on after `until`.
    #[test]
    fn a_session_of_the_previous_key_ends_at_its_until_however_it_is_refreshed() {
        let configured = tokens(&[(Role::Writer, "cs-tool", "token-a")]);
        let old = SessionKeys::new(&[1u8; 32]).unwrap();
        let until = NOW + 600;
        let rotated = SessionKeys::new(&[2u8; 32])
            .unwrap()
            .with_previous(&[1u8; 32], at(until))
            .unwrap();
        // Forged with the old key a minute into the rotation, for the longest lifetime.
        let forged_at = NOW + 60;
        let headers = forged(&old, "token-a", forged_at + SESSION_HOURS * 3600, forged_at);
        let session = read_at(&rotated, &configured, false, &headers, at(forged_at)).unwrap();
        assert_eq!(
            session.expires, until,
            "the old key's session ends with the old key"
        );

        // The keep-alive signs it again with the new key: the refreshed cookie carries the
        // earlier end, and is no session past `until` even once the old key is gone.
        let cookie = refreshed(&rotated, false, &session, forged_at);
        let mut resigned = HeaderMap::new();
        resigned.insert(
            header::COOKIE,
            cookie.split(';').next().unwrap().parse().unwrap(),
        );
        let current_only = SessionKeys::new(&[2u8; 32]).unwrap();
        let renewed = read_at(&current_only, &configured, false, &resigned, at(until - 1)).unwrap();
        assert!(!renewed.signed_by_previous);
        assert!(read_at(&current_only, &configured, false, &resigned, at(until)).is_none());
        assert!(
            read_at(
                &current_only,
                &configured,
                false,
                &resigned,
                at(until + 3600)
            )
            .is_none()
        );
    }

    /// Issue 35, item 10: behind a TLS terminator the cookie had neither `Secure` nor the
    /// `__Host-` prefix. With `secure` (the service's TLS, or `secure_cookies`) it has both,
    /// and a cookie under the plain name (planted over HTTP, or by a sibling site) is no
    /// session.
    #[test]
    fn over_https_the_cookie_is_secure_and_host_prefixed_and_the_plain_name_is_ignored() {
        let keys = SessionKeys::new(&[3u8; 32]).unwrap();
        let configured = tokens(&[(Role::Writer, "cs-tool", "token-a")]);
        let digest = *configured.find_entry("token-a").unwrap().0;
        let fields = Fields {
            expires: NOW + 3600,
            seen: NOW,
            nonce: "nonce",
            token_digest: &digest,
        };
        let secure = signed_cookie(&keys, true, &fields, NOW);
        assert!(secure.starts_with("__Host-ra_session="), "{secure}");
        for attribute in ["Secure", "HttpOnly", "SameSite=Strict", "Path=/"] {
            assert!(secure.contains(attribute), "{attribute}: {secure}");
        }
        assert!(!secure.contains("Domain"), "{secure}");
        let plain = signed_cookie(&keys, false, &fields, NOW);
        assert!(
            plain.starts_with("ra_session=") && !plain.contains("Secure"),
            "{plain}"
        );

        let presented = |set_cookie: &str| {
            let mut headers = HeaderMap::new();
            let pair = set_cookie.split(';').next().unwrap().to_owned();
            headers.insert(header::COOKIE, pair.parse().unwrap());
            headers
        };
        assert!(read_at(&keys, &configured, true, &presented(&secure), at(NOW)).is_some());
        assert!(read_at(&keys, &configured, true, &presented(&plain), at(NOW)).is_none());
        assert!(read_at(&keys, &configured, false, &presented(&plain), at(NOW)).is_some());
    }
}
