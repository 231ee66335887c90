//! Bearer-token authentication with two roles: `writer` runs commands and reads,
//! `auditor` only reads. Tokens come from configuration, never from the code.

use std::collections::HashMap;

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};

use super::{ApiError, AppState};

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Read-only.
    Auditor,
    /// Commands and reads.
    Writer,
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

/// The configured tokens, kept only as SHA-256 digests.
#[derive(Clone, Default)]
pub struct Tokens {
    by_digest: HashMap<[u8; 32], Principal>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} configured)", self.by_digest.len())
    }
}

/// A bad token specification.
#[derive(Debug, thiserror::Error)]
#[error(
    "invalid token entry #{index} in LEDGER_TOKENS: {reason} (expected role:name:token, role writer or auditor)"
)]
pub struct TokenSpecError {
    index: usize,
    reason: String,
}

impl Tokens {
    /// Parses `role:name:token` entries separated by commas, e.g.
    /// `writer:cs-tool:s3cret,auditor:audit-team:0ther`.
    pub fn parse(spec: &str) -> Result<Self, TokenSpecError> {
        let mut tokens = Self::default();
        for (index, entry) in spec
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .enumerate()
        {
            let error = |reason: &str| TokenSpecError {
                index: index + 1,
                reason: reason.into(),
            };
            let mut parts = entry.splitn(3, ':');
            let role = match parts.next() {
                Some("writer") => Role::Writer,
                Some("auditor") => Role::Auditor,
                _ => return Err(error("unknown role")),
            };
            let name = parts
                .next()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| error("missing name"))?;
            let token = parts
                .next()
                .filter(|t| t.len() >= 8)
                .ok_or_else(|| error("token missing or shorter than 8 characters"))?;
            tokens.by_digest.insert(
                digest(token),
                Principal {
                    name: name.to_owned(),
                    role,
                },
            );
        }
        Ok(tokens)
    }

    /// Whether no token is configured.
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    fn find(&self, token: &str) -> Option<&Principal> {
        // Comparing fixed-size digests in a hash map leaks nothing useful about the token.
        self.by_digest.get(&digest(token))
    }
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

fn authenticate(parts: &Parts, state: &AppState) -> Result<Principal, ApiError> {
    let header = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing Authorization: Bearer <token> header",
            )
        })?;
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
    state
        .tokens
        .find(token.trim())
        .cloned()
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
        let principal = authenticate(parts, state)?;
        if principal.role != Role::Writer {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "token of {} has role auditor; this endpoint needs role writer",
                    principal.name
                ),
            ));
        }
        Ok(Writer(principal))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_token_entries_and_refuses_bad_ones() {
        let tokens = Tokens::parse("writer:cs:secret-one, auditor:audit:secret-two").unwrap();
        assert_eq!(tokens.find("secret-one").unwrap().role, Role::Writer);
        assert_eq!(tokens.find("secret-two").unwrap().name, "audit");
        assert!(tokens.find("secret-three").is_none());
        assert!(
            Tokens::parse("admin:x:secret-one")
                .unwrap_err()
                .to_string()
                .contains("#1")
        );
        assert!(
            Tokens::parse("writer:x:short")
                .unwrap_err()
                .to_string()
                .contains("shorter")
        );
        assert!(Tokens::parse("").unwrap().is_empty());
    }

    #[test]
    fn debug_output_hides_tokens() {
        let tokens = Tokens::parse("writer:cs:secret-one").unwrap();
        assert_eq!(format!("{tokens:?}"), "Tokens(1 configured)");
    }
}
