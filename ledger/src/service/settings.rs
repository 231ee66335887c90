//! What `ledger serve` runs with: the [`Service`] a [`crate::config::ServeConfig`] validates
//! into, every secret read and every value checked.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ra_ledger_cdc::infra::settings::DatabaseUrl;

use super::Limits;
use crate::api::{CursorKey, Tokens};
use crate::session_key::SessionKeys;

/// A [`crate::config::ServeConfig`] that passed validation: what the service runs with.
#[derive(Clone)]
pub struct Service {
    /// The ledger database.
    pub database_url: DatabaseUrl,
    /// Where to listen.
    pub listen: SocketAddr,
    /// HTTPS, when configured.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Most pooled connections.
    pub pool_size: usize,
    /// Who may do what.
    pub tokens: Tokens,
    /// Signs history cursors.
    pub cursor_key: CursorKey,
    /// Whether the cursor key was configured (else it is random for this process).
    pub cursor_key_configured: bool,
    /// Signs the console's sessions (and the previous key while rotating).
    pub session_keys: SessionKeys,
    /// Whether the session key was configured (else it is random for this process).
    pub session_key_configured: bool,
    /// How long a command waits for a lock.
    pub lock_timeout: Duration,
    /// Outbox retention, unless turned off.
    pub retention: Option<Retention>,
    /// The end-to-end watcher, when the relay's settings are given.
    pub watcher: Option<crate::watcher::Settings>,
    /// Signed digests, when a key is configured.
    pub digests: Option<Digests>,
    /// What one client may hold: the body-read timeout and the connection cap.
    pub limits: Limits,
    /// Whether browsers reach the console over HTTPS (own TLS or a terminator in front):
    /// the session cookie is then `Secure` and `__Host-` prefixed.
    pub secure_cookies: bool,
    /// The relay's replication slot, whose lag the console shows.
    pub relay_slot: String,
    /// Where `/metrics` is served, unless off.
    pub metrics_listen: Option<SocketAddr>,
}

/// How `ledger serve` seals digests.
#[derive(Debug, Clone)]
pub struct Digests {
    /// The signing key.
    pub key: Arc<crate::digest::DigestKey>,
    /// Time between digests (when something changed).
    pub interval: Duration,
    /// The transparency log's origin, the first line of its checkpoints.
    pub origin: String,
    /// The witnesses each checkpoint is sent to, when a policy is configured.
    pub cosigning: Option<crate::digest::cosign::Cosigning>,
}

/// How `ledger serve` removes published outbox rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// The relay's slot.
    pub slot: String,
    /// Time between rounds.
    pub interval: Duration,
    /// Most rows per delete.
    pub batch: i64,
}

impl std::fmt::Debug for Service {
    // The URL carries a password: never print it (tokens and key print as counts).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("listen", &self.listen)
            .field("tls", &self.tls.is_some())
            .field("pool_size", &self.pool_size)
            .field("tokens", &self.tokens)
            .field("lock_timeout", &self.lock_timeout)
            .field("retention", &self.retention)
            .field("digests", &self.digests)
            .field("limits", &self.limits)
            .field("metrics_listen", &self.metrics_listen)
            .finish_non_exhaustive()
    }
}
