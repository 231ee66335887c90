//! Bearer-token authentication with three roles: `writer` runs commands and reads,
//! `operator` asks for replays and republishes parked messages and reads, `auditor` only
//! reads. Tokens come from configuration, never from the code.
//!
//! An operator is not a writer: replays read the whole ledger and create topics, which a
//! customer-service tool holding a writer token has no business doing, and whoever runs
//! the platform has no business changing who is a business's registered agent. Separate
//! tokens keep each mistake or leak to its own harm.

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{ApiError, AppState};

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Read-only.
    Auditor,
    /// Commands and reads.
    Writer,
    /// Replays, parked messages and reads; no commands.
    Operator,
}

impl Role {
    /// The role's name in token entries and on pages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auditor => "auditor",
            Self::Writer => "writer",
            Self::Operator => "operator",
        }
    }

    /// The role named `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Auditor, Self::Writer, Self::Operator]
            .into_iter()
            .find(|role| role.name() == name)
    }
}

/// A configured token: its holder's name (recorded as the events' actor) and role.
#[derive(Clone)]
pub struct Principal {
    /// Who holds the token; becomes the `actor` of events.
    pub name: String,
    /// What it may do.
    pub role: Role,
}

impl std::fmt::Debug for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Principal")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish()
    }
}

/// The configured tokens: configured as SHA-256 digests, never in plaintext.
#[derive(Clone, Default)]
pub struct Tokens {
    entries: Vec<([u8; 32], Principal)>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} configured)", self.entries.len())
    }
}

/// A bad token specification.
#[derive(Debug, thiserror::Error)]
#[error(
    "invalid token entry #{index}: {reason} (expected role:name:sha256:<64 hex digits>, role writer, operator or auditor; `ledger token new <role> <name>` makes one)"
)]
pub struct TokenSpecError {
    index: usize,
    reason: String,
}

impl Tokens {
    /// Parses `role:name:sha256:<hex digest of the token>` entries separated by commas or
    /// lines, e.g. `writer:cs-tool:sha256:9f86d0…`. Lines starting with `#` are comments.
    pub fn parse(spec: &str) -> Result<Self, TokenSpecError> {
        let mut tokens = Self::default();
        for (index, entry) in spec
            .lines()
            .filter(|line| !line.trim_start().starts_with('#'))
            .flat_map(|line| line.split(','))
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .enumerate()
        {
            let error = |reason: &str| TokenSpecError {
                index: index + 1,
                reason: reason.into(),
            };
            let mut parts = entry.splitn(3, ':');
            let role = parts
                .next()
                .and_then(Role::from_name)
                .ok_or_else(|| error("unknown role"))?;
            let name = parts
                .next()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| error("missing name"))?;
            let hash = parts
                .next()
                .and_then(|rest| rest.strip_prefix("sha256:"))
                .ok_or_else(|| error("not a SHA-256 hash; plaintext tokens are not accepted"))?;
            let digest =
                parse_digest(hash).ok_or_else(|| error("the hash is not 64 hexadecimal digits"))?;
            if tokens.entries.iter().any(|(known, _)| *known == digest) {
                return Err(error("the same token is configured twice"));
            }
            tokens.entries.push((
                digest,
                Principal {
                    name: name.to_owned(),
                    role,
                },
            ));
        }
        Ok(tokens)
    }

    /// Whether no token is configured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The holder of `token`. Every configured digest is compared, each in constant time,
    /// so the time taken says nothing about which entry (if any) matched, or how closely.
    pub(crate) fn find(&self, token: &str) -> Option<&Principal> {
        self.find_entry(token).map(|(_, principal)| principal)
    }

    /// The entry of `token`: its SHA-256 (what identifies the entry) and holder, compared
    /// as [`Tokens::find`] does.
    pub(crate) fn find_entry(&self, token: &str) -> Option<(&[u8; 32], &Principal)> {
        let presented = digest(token);
        let mut found = None;
        for (known, principal) in &self.entries {
            if bool::from(known.ct_eq(&presented)) {
                found = Some((known, principal));
            }
        }
        found
    }

    /// Every entry: the token's SHA-256 and its holder.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&[u8; 32], &Principal)> {
        self.entries
            .iter()
            .map(|(digest, principal)| (digest, principal))
    }
}

/// The configuration entry of a token: `role:name:sha256:<hex>`.
pub fn entry(role: Role, name: &str, token: &str) -> String {
    let hex: String = digest(token).iter().map(|b| format!("{b:02x}")).collect();
    format!("{}:{name}:sha256:{hex}", role.name())
}

fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(digest)
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A request from any valid token.
#[derive(Debug, Clone)]
pub struct Reader;

/// A request from a writer token.
#[derive(Debug, Clone)]
pub struct Writer(pub Principal);

/// A request from an operator token.
#[derive(Debug, Clone)]
pub struct Operator(pub Principal);

/// `principal`, if it has `role`; else 403 naming both roles.
fn with_role(principal: Principal, role: Role) -> Result<Principal, ApiError> {
    if principal.role == role {
        return Ok(principal);
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!(
            "token of {} has role {}; this endpoint needs role {}",
            principal.name,
            principal.role.name(),
            role.name()
        ),
    ))
}

fn authenticate(parts: &Parts, state: &AppState) -> Result<Principal, ApiError> {
    bearer_principal(&parts.headers, &state.tokens)?.ok_or_else(|| {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing Authorization: Bearer <token> header",
        )
    })
}

/// The holder of the bearer token in `headers`; `None` without an `Authorization` header
/// (what an endpoint open to anyone serves anyone), an error for a malformed or unknown
/// token.
pub fn bearer_principal(
    headers: &axum::http::HeaderMap,
    tokens: &Tokens,
) -> Result<Option<Principal>, ApiError> {
    let Some(header) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let token = header
        .to_str()
        .ok()
        .and_then(|value| value.strip_prefix("Bearer "))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Authorization header must be 'Bearer <token>'",
            )
        })?;
    tokens
        .find(token.trim())
        .cloned()
        .map(Some)
        .ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "unknown token"))
}

impl FromRequestParts<AppState> for Reader {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        authenticate(parts, state).map(|_| Reader)
    }
}

impl FromRequestParts<AppState> for Writer {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        with_role(authenticate(parts, state)?, Role::Writer).map(Writer)
    }
}

impl FromRequestParts<AppState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        with_role(authenticate(parts, state)?, Role::Operator).map(Operator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hashed_token_entries_and_refuses_bad_ones() {
        let spec = format!(
            "{}, {}\n# a comment\n{}\n",
            entry(Role::Writer, "cs", "secret-one"),
            entry(Role::Auditor, "audit", "secret-two"),
            entry(Role::Operator, "on-call", "secret-four")
        );
        let tokens = Tokens::parse(&spec).unwrap();
        assert_eq!(tokens.find("secret-four").unwrap().role, Role::Operator);
        assert_eq!(tokens.find("secret-one").unwrap().role, Role::Writer);
        assert_eq!(tokens.find("secret-two").unwrap().name, "audit");
        assert!(tokens.find("secret-three").is_none());
        for (bad, reason) in [
            ("admin:x:sha256:00", "#1: unknown role"),
            ("writer:x:secret-one", "plaintext tokens are not accepted"),
            ("writer:x:sha256:abc", "64 hexadecimal digits"),
        ] {
            let error = Tokens::parse(bad).unwrap_err().to_string();
            assert!(error.contains(reason), "{bad}: {error}");
            assert!(!error.contains("secret-one"), "{error}");
        }
        let twice = format!(
            "{},{}",
            entry(Role::Writer, "a", "t1"),
            entry(Role::Auditor, "b", "t1")
        );
        assert!(
            Tokens::parse(&twice)
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
        assert!(Tokens::parse("").unwrap().is_empty());
    }

    #[test]
    fn an_entry_is_the_sha256_of_the_token_in_hex() {
        // printf %s abc | sha256sum
        assert_eq!(
            entry(Role::Auditor, "n", "abc"),
            "auditor:n:sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn debug_output_hides_tokens() {
        let tokens = Tokens::parse(&entry(Role::Writer, "cs", "secret-one")).unwrap();
        assert_eq!(format!("{tokens:?}"), "Tokens(1 configured)");
    }
}
