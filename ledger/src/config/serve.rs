//! `ledger serve`'s settings: [`ServeConfig`], and how it validates into a [`Service`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ra_ledger_cdc::infra::settings::{
    ConfigError, DatabaseUrl, EnvVar, Settings, env, flag, local, non_empty, number, read_secret,
    read_text, within,
};

use crate::api::{CursorKey, Tokens};
use crate::service::settings::{Digests, Retention, Service};
use crate::service::{
    DEFAULT_BODY_READ_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_WRITE_STALL_TIMEOUT, Limits,
};
use crate::session_key::SessionKeys;
use crate::{retention, watcher};

ra_ledger_cdc::settings! {
    const SERVE_ENV;
    /// Everything `ledger serve` needs.
    #[derive(Clone)]
    pub struct ServeConfig {
        /// PostgreSQL URL of the ledger database (`LEDGER_DATABASE_URL`).
        database_url: DatabaseUrl = local::DATABASE_URL.into(),
            env env::DATABASE_URL => |c, v| c.database_url = v.into();
        /// File holding the password of `database_url`'s role
        /// (`LEDGER_DATABASE_PASSWORD_FILE`), so the URL needs none.
        database_password_file: Option<PathBuf> = None,
            env env::DATABASE_PASSWORD_FILE => |c, v| c.database_password_file = Some(v.into());
        /// Address to listen on (`LEDGER_LISTEN`).
        listen: String = local::HTTP_LISTEN.into(),
            env env::LISTEN => |c, v| c.listen = v.to_owned();
        /// Serve HTTPS with this certificate chain (PEM, `LEDGER_TLS_CERT_FILE`); plain HTTP
        /// when unset.
        tls_cert_file: Option<PathBuf> = None,
            env env::TLS_CERT_FILE => |c, v| c.tls_cert_file = Some(v.into());
        /// The certificate's private key (PEM, `LEDGER_TLS_KEY_FILE`).
        tls_key_file: Option<PathBuf> = None,
            env env::TLS_KEY_FILE => |c, v| c.tls_key_file = Some(v.into());
        /// Most PostgreSQL connections in the pool (`LEDGER_POOL_SIZE`).
        pool_size: usize = 16,
            env env::POOL_SIZE => |c, v| c.pool_size = number(v)?;
        /// Bearer tokens as SHA-256 hashes, `role:name:sha256:<64 hex digits>` separated by
        /// commas or lines; role is writer, operator (replays, parked messages) or auditor
        /// (`LEDGER_TOKENS`). `ledger token new` makes one.
        tokens: String = String::new(),
            env env::TOKENS => |c, v| c.tokens = v.to_owned(),
            shown secret;
        /// File of more token entries, one per line (`LEDGER_TOKENS_FILE`).
        tokens_file: Option<PathBuf> = None,
            env env::TOKENS_FILE => |c, v| c.tokens_file = Some(v.into());
        /// Secret that signs history cursors, at least 16 characters; random per process
        /// when unset, so cursors do not survive a restart (`LEDGER_CURSOR_KEY`).
        cursor_key: Option<String> = None,
            env env::CURSOR_KEY => |c, v| c.cursor_key = Some(v.to_owned()),
            shown secret;
        /// File holding the cursor key instead (`LEDGER_CURSOR_KEY_FILE`).
        cursor_key_file: Option<PathBuf> = None,
            env env::CURSOR_KEY_FILE => |c, v| c.cursor_key_file = Some(v.into());
        /// File holding the key that signs the console's sessions and CSRF tokens: at least
        /// 32 random bytes (`openssl rand -base64 48`), refused when shorter
        /// (`LEDGER_SESSION_KEY_FILE`). Random per process when unset, so sessions end at a
        /// restart.
        session_key_file: Option<PathBuf> = None,
            env env::SESSION_KEY_FILE => |c, v| c.session_key_file = Some(v.into());
        /// While rotating, the file of the session key before
        /// (`LEDGER_SESSION_KEY_PREVIOUS_FILE`, empty to unset): sessions it signed are still
        /// accepted until `session_key_previous_until`.
        session_key_previous_file: Option<PathBuf> = None,
            env env::SESSION_KEY_PREVIOUS_FILE =>
                |c, v| c.session_key_previous_file = non_empty(v).map(PathBuf::from);
        /// Until when (RFC 3339, e.g. `2026-03-01T18:00:00Z`) the previous session key is
        /// accepted (`LEDGER_SESSION_KEY_PREVIOUS_UNTIL`, empty to unset); needed with
        /// `session_key_previous_file`.
        session_key_previous_until: Option<String> = None,
            env env::SESSION_KEY_PREVIOUS_UNTIL =>
                |c, v| c.session_key_previous_until = non_empty(v).map(str::to_owned);
        /// Longest a command waits for a lock another transaction holds before it answers 409
        /// (`LEDGER_LOCK_TIMEOUT_MS`).
        lock_timeout_ms: u64 = 5_000,
            env env::LOCK_TIMEOUT_MS => |c, v| c.lock_timeout_ms = number(v)?;
        /// The relay's replication slot, whose confirmed position outbox retention follows
        /// (`LEDGER_RELAY_SLOT`).
        relay_slot: String = local::SLOT.into(),
            env env::RELAY_SLOT => |c, v| c.relay_slot = v.to_owned();
        /// How often published outbox rows are removed, in milliseconds; 0 turns retention
        /// off (`LEDGER_OUTBOX_RETENTION_INTERVAL_MS`).
        outbox_retention_interval_ms: u64 = retention::DEFAULT_INTERVAL.as_millis() as u64,
            env env::OUTBOX_RETENTION_INTERVAL_MS =>
                |c, v| c.outbox_retention_interval_ms = number(v)?;
        /// Most rows one retention delete removes (`LEDGER_OUTBOX_RETENTION_BATCH`).
        outbox_retention_batch: i64 = retention::DEFAULT_BATCH,
            env env::OUTBOX_RETENTION_BATCH => |c, v| c.outbox_retention_batch = number(v)?;
        /// The relay's TOML file (its topics and Kafka settings), which turns the end-to-end
        /// watcher on: it compares `events` with the event topics and pages on any gap
        /// (`LEDGER_WATCHER_RELAY_CONFIG`, empty to unset; off when unset).
        watcher_relay_config: Option<PathBuf> = None,
            env env::WATCHER_RELAY_CONFIG =>
                |c, v| c.watcher_relay_config = non_empty(v).map(PathBuf::from);
        /// How old a committed event may be, in milliseconds, before the watcher counts it
        /// missing when Kafka does not hold it (`LEDGER_WATCHER_LAG_BOUND_MS`).
        watcher_lag_bound_ms: u64 = watcher::DEFAULT_LAG_BOUND.as_millis() as u64,
            env env::WATCHER_LAG_BOUND_MS => |c, v| c.watcher_lag_bound_ms = number(v)?;
        /// Time between the watcher's rounds, in milliseconds (`LEDGER_WATCHER_INTERVAL_MS`).
        watcher_interval_ms: u64 = watcher::DEFAULT_INTERVAL.as_millis() as u64,
            env env::WATCHER_INTERVAL_MS => |c, v| c.watcher_interval_ms = number(v)?;
        /// Most events the watcher holds above its watermark, and ids read ahead of them
        /// (`LEDGER_WATCHER_WINDOW`).
        watcher_window: usize = watcher::DEFAULT_WINDOW,
            env env::WATCHER_WINDOW => |c, v| c.watcher_window = number(v)?;
        /// Ed25519 private key (PKCS#8 PEM, `openssl genpkey -algorithm ed25519`) that signs
        /// the ledger's digests (`LEDGER_DIGEST_KEY_FILE`, empty to unset); digests are off
        /// without one.
        digest_key_file: Option<PathBuf> = None,
            env env::DIGEST_KEY_FILE => |c, v| c.digest_key_file = non_empty(v).map(PathBuf::from);
        /// How often a digest is sealed when something changed, in milliseconds
        /// (`LEDGER_DIGEST_INTERVAL_MS`).
        digest_interval_ms: u64 = 60_000,
            env env::DIGEST_INTERVAL_MS => |c, v| c.digest_interval_ms = number(v)?;
        /// The transparency log's origin: the first line of every checkpoint a digest seals,
        /// the name witnesses know the log by (`LEDGER_LOG_ORIGIN`). A name, not an address;
        /// never change it once witnesses hold a checkpoint of it.
        log_origin: String = crate::tlog::DEFAULT_ORIGIN.into(),
            env env::LOG_ORIGIN => |c, v| c.log_origin = v.to_owned();
        /// The witness policy (C2SP tlog-policy: `witness <name> <vkey> <url>` lines, groups
        /// and one `quorum` line; `LEDGER_WITNESS_POLICY_FILE`, empty to unset). Each
        /// checkpoint is sent to its witnesses; without one, checkpoints are sealed and
        /// cosigned by nobody.
        witness_policy_file: Option<PathBuf> = None,
            env env::WITNESS_POLICY_FILE =>
                |c, v| c.witness_policy_file = non_empty(v).map(PathBuf::from);
        /// How often the newest checkpoint is sent to the witnesses that have not cosigned
        /// it, in milliseconds (`LEDGER_WITNESS_INTERVAL_MS`).
        witness_interval_ms: u64 = 5_000,
            env env::WITNESS_INTERVAL_MS => |c, v| c.witness_interval_ms = number(v)?;
        /// Longest one witness request may take, in milliseconds; then the witness counts
        /// as unavailable for that round (`LEDGER_WITNESS_TIMEOUT_MS`).
        witness_timeout_ms: u64 = 5_000,
            env env::WITNESS_TIMEOUT_MS => |c, v| c.witness_timeout_ms = number(v)?;
        /// Longest a request body may take to arrive in full after its head, in
        /// milliseconds; then the request is answered 408 and its connection closed
        /// (`LEDGER_BODY_READ_TIMEOUT_MS`). A slow client cannot hold a connection with a
        /// body that never arrives.
        body_read_timeout_ms: u64 = DEFAULT_BODY_READ_TIMEOUT.as_millis() as u64,
            env env::BODY_READ_TIMEOUT_MS => |c, v| c.body_read_timeout_ms = number(v)?;
        /// Longest an answer may wait for the client to read any of it, in milliseconds; then
        /// the connection is closed (`LEDGER_WRITE_STALL_TIMEOUT_MS`). Counted from the last
        /// byte the client took, so a slow reader of a large answer is never cut off.
        write_stall_timeout_ms: u64 = DEFAULT_WRITE_STALL_TIMEOUT.as_millis() as u64,
            env env::WRITE_STALL_TIMEOUT_MS => |c, v| c.write_stall_timeout_ms = number(v)?;
        /// Browsers reach the console over HTTPS through a TLS terminator in front
        /// (`LEDGER_SECURE_COOKIES`): the session cookie is then `Secure` and named
        /// `__Host-ra_session`, as with `tls_cert_file`. Leave it off when browsers use plain
        /// HTTP: they would drop the cookie and nobody could sign in.
        secure_cookies: bool = false,
            env env::SECURE_COOKIES => |c, v| c.secure_cookies = flag(v)?;
        /// Most connections open at once; more wait in the listen backlog until one closes
        /// (`LEDGER_MAX_CONNECTIONS`). Keep it well below the process's file descriptor
        /// limit.
        max_connections: usize = DEFAULT_MAX_CONNECTIONS,
            env env::MAX_CONNECTIONS => |c, v| c.max_connections = number(v)?;
        /// Where to serve `/metrics` (the slot's and the outbox's gauges, read from the
        /// database), apart from the API; empty to disable (`LEDGER_SERVE_METRICS_LISTEN`).
        metrics_listen: String = local::SERVE_METRICS.into(),
            env env::SERVE_METRICS_LISTEN => |c, v| c.metrics_listen = v.to_owned();
    }
}

impl Settings for ServeConfig {
    const ENV: &'static [EnvVar<Self>] = SERVE_ENV;
}

impl ServeConfig {
    /// [`Settings::read`]: the defaults, then the file at `path`, then the environment
    /// ([`SERVE_ENV`]). The command line may change fields after this;
    /// [`ServeConfig::validate`] then resolves the secret files and checks everything.
    pub fn load(path: Option<&str>) -> Result<Self, ConfigError> {
        Self::read(path)
    }

    /// Checks every field and turns the configuration into what the service runs with.
    pub fn validate(&self) -> Result<Service, ConfigError> {
        let listen = self.listen.trim().parse().map_err(|_| {
            ConfigError::invalid(
                "listen",
                &self.listen,
                "expected host:port, e.g. 0.0.0.0:8080",
            )
        })?;
        within("pool_size", self.pool_size, 1..=1_000)?;
        let mut token_spec = self.tokens.clone();
        if let Some(path) = &self.tokens_file {
            let listed = read_text("tokens_file", path)?;
            token_spec.push('\n');
            token_spec.push_str(&listed);
        }
        let tokens = Tokens::parse(&token_spec)
            .map_err(|error| ConfigError::invalid("tokens", "<redacted>", error.to_string()))?;
        if tokens.is_empty() {
            return Err(ConfigError::invalid(
                "tokens",
                "",
                "no token configured; `ledger token new writer cs-tool` makes an entry \
                 (role:name:sha256:<hash>) for tokens or tokens_file",
            ));
        }
        let cursor_key = match &self.cursor_key_file {
            Some(path) => Some(read_secret("cursor_key_file", path)?),
            None => self.cursor_key.clone(),
        };
        let cursor_key_configured = cursor_key.is_some();
        let cursor_key = match &cursor_key {
            Some(key) if key.len() >= 16 => CursorKey::new(key.as_bytes()),
            Some(_) => {
                return Err(ConfigError::invalid(
                    "cursor_key",
                    "<redacted>",
                    "must be at least 16 characters",
                ));
            }
            None => CursorKey::random(),
        };
        within("lock_timeout_ms", self.lock_timeout_ms, 1..=600_000)?;
        let retention = self.retention()?;
        let watcher = self.watcher()?;
        let database_url = self
            .database_url
            .with_password_file(self.database_password_file.as_deref())?;
        database_url.check()?;
        let tls = self.server_tls()?;
        let digests = self.digests()?;
        let session_keys = self.session_keys()?;
        let limits = self.limits()?;
        let metrics_listen =
            ra_ledger_cdc::infra::settings::listen(&self.metrics_listen).map_err(|reason| {
                ConfigError::invalid("metrics_listen", &self.metrics_listen, reason)
            })?;
        Ok(Service {
            metrics_listen,
            limits,
            secure_cookies: self.secure_cookies || tls.is_some(),
            session_key_configured: self.session_key_file.is_some(),
            session_keys,
            tls,
            digests,
            database_url,
            retention,
            watcher,
            listen,
            pool_size: self.pool_size,
            tokens,
            cursor_key,
            cursor_key_configured,
            lock_timeout: Duration::from_millis(self.lock_timeout_ms),
            relay_slot: self.relay_slot.clone(),
        })
    }
}

impl ServeConfig {
    /// The session key, and the previous one while it is accepted. Errors name the file
    /// and the length, never a key's bytes.
    fn session_keys(&self) -> Result<SessionKeys, ConfigError> {
        let Some(path) = &self.session_key_file else {
            if self.session_key_previous_file.is_some() {
                return Err(ConfigError::invalid(
                    "session_key_previous_file",
                    "",
                    "a previous session key needs the current one in session_key_file",
                ));
            }
            return Ok(SessionKeys::random());
        };
        let secret = read_secret("session_key_file", path)?;
        let keys = SessionKeys::new(secret.as_bytes())
            .map_err(|error| ConfigError::invalid_file("session_key_file", path, error))?;
        let Some(previous) = &self.session_key_previous_file else {
            return Ok(keys);
        };
        let until = self.session_key_previous_until.as_deref().ok_or_else(|| {
            ConfigError::invalid(
                "session_key_previous_until",
                "",
                "session_key_previous_file needs the instant until which it is accepted \
                     (RFC 3339, e.g. 2026-03-01T18:00:00Z: the rotation plus the 8 hours a \
                     session lasts)",
            )
        })?;
        let until = chrono::DateTime::parse_from_rfc3339(until.trim())
            .map_err(|_| {
                ConfigError::invalid(
                    "session_key_previous_until",
                    until,
                    "expected an RFC 3339 instant, e.g. 2026-03-01T18:00:00Z",
                )
            })?
            .with_timezone(&chrono::Utc);
        let previous_secret = read_secret("session_key_previous_file", previous)?;
        if previous_secret == secret {
            return Err(ConfigError::invalid_file(
                "session_key_previous_file",
                previous,
                "holds the same key as session_key_file; write a new key there",
            ));
        }
        keys.with_previous(previous_secret.as_bytes(), until)
            .map_err(|error| {
                ConfigError::invalid_file("session_key_previous_file", previous, error)
            })
    }

    /// The body-read timeout and the connection cap, each within a range that still serves:
    /// a timeout too short for a large body on a slow link, or a cap of hundreds of
    /// thousands the file descriptor limit cannot back, is refused.
    fn limits(&self) -> Result<Limits, ConfigError> {
        within(
            "body_read_timeout_ms",
            self.body_read_timeout_ms,
            100..=600_000,
        )?;
        within(
            "write_stall_timeout_ms",
            self.write_stall_timeout_ms,
            100..=600_000,
        )?;
        within("max_connections", self.max_connections, 1..=100_000)?;
        Ok(Limits {
            body_read_timeout: Duration::from_millis(self.body_read_timeout_ms),
            write_stall_timeout: Duration::from_millis(self.write_stall_timeout_ms),
            max_connections: self.max_connections,
        })
    }

    fn digests(&self) -> Result<Option<Digests>, ConfigError> {
        let Some(path) = &self.digest_key_file else {
            return Ok(None);
        };
        within(
            "digest_interval_ms",
            self.digest_interval_ms,
            1_000..=86_400_000,
        )?;
        let key = crate::digest::DigestKey::from_pem_file(path)
            .map_err(|error| ConfigError::invalid_file("digest_key_file", path, error))?;
        let origin = &self.log_origin;
        if origin.is_empty() || origin.contains(char::is_whitespace) || origin.contains('+') {
            return Err(ConfigError::invalid(
                "log_origin",
                origin,
                "must be a name without spaces or '+', e.g. ra-ledger.example.com/events",
            ));
        }
        let cosigning = match &self.witness_policy_file {
            None => None,
            Some(path) => {
                within(
                    "witness_interval_ms",
                    self.witness_interval_ms,
                    100..=3_600_000,
                )?;
                within("witness_timeout_ms", self.witness_timeout_ms, 100..=600_000)?;
                let text = std::fs::read_to_string(path).map_err(|error| {
                    ConfigError::invalid_file("witness_policy_file", path, error)
                })?;
                let policy = crate::tlog::policy::Policy::parse(&text).map_err(|error| {
                    ConfigError::invalid_file("witness_policy_file", path, error)
                })?;
                if let Some(witness) = policy.witnesses.iter().find(|w| w.url.is_none()) {
                    return Err(ConfigError::invalid_file(
                        "witness_policy_file",
                        path,
                        format!("witness {} has no URL to send checkpoints to", witness.name),
                    ));
                }
                Some(crate::digest::cosign::Cosigning {
                    policy: Arc::new(policy),
                    interval: Duration::from_millis(self.witness_interval_ms),
                    timeout: Duration::from_millis(self.witness_timeout_ms),
                })
            }
        };
        Ok(Some(Digests {
            key: Arc::new(key),
            interval: Duration::from_millis(self.digest_interval_ms),
            origin: origin.clone(),
            cosigning,
        }))
    }

    /// The HTTPS settings: both files or neither. Errors name the file, never a key's bytes.
    fn server_tls(&self) -> Result<Option<Arc<rustls::ServerConfig>>, ConfigError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let (cert, key) = match (&self.tls_cert_file, &self.tls_key_file) {
            (None, None) => return Ok(None),
            (Some(cert), Some(key)) => (cert, key),
            (Some(_), None) => {
                return Err(ConfigError::invalid(
                    "tls_key_file",
                    "",
                    "tls_cert_file needs its private key",
                ));
            }
            (None, Some(_)) => {
                return Err(ConfigError::invalid(
                    "tls_cert_file",
                    "",
                    "tls_key_file needs its certificate",
                ));
            }
        };
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|error| ConfigError::invalid_file("tls_cert_file", cert, error))?;
        if chain.is_empty() {
            return Err(ConfigError::invalid_file(
                "tls_cert_file",
                cert,
                "no PEM certificate in it",
            ));
        }
        let private_key = PrivateKeyDer::from_pem_file(key)
            .map_err(|error| ConfigError::invalid_file("tls_key_file", key, error))?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|error| ConfigError::invalid_file("tls_cert_file", cert, error))?
        .with_no_client_auth()
        .with_single_cert(chain, private_key)
        .map_err(|error| ConfigError::invalid_file("tls_key_file", key, error))?;
        Ok(Some(Arc::new(config)))
    }

    fn watcher(&self) -> Result<Option<watcher::Settings>, ConfigError> {
        let Some(path) = &self.watcher_relay_config else {
            return Ok(None);
        };
        within(
            "watcher_lag_bound_ms",
            self.watcher_lag_bound_ms,
            1_000..=86_400_000,
        )?;
        within(
            "watcher_interval_ms",
            self.watcher_interval_ms,
            100..=60_000,
        )?;
        within("watcher_window", self.watcher_window, 1_000..=10_000_000)?;
        let relay = ra_ledger_cdc::config::RelayConfig::load(Some(&path.to_string_lossy()))
            .map_err(|error| {
                ConfigError::invalid_file(
                    "watcher_relay_config",
                    path,
                    format!("the relay's settings, for its topics and Kafka: {error}"),
                )
            })?;
        Ok(Some(watcher::Settings {
            relay,
            lag_bound: Duration::from_millis(self.watcher_lag_bound_ms),
            interval: Duration::from_millis(self.watcher_interval_ms),
            window: self.watcher_window,
        }))
    }

    fn retention(&self) -> Result<Option<Retention>, ConfigError> {
        if self.outbox_retention_interval_ms == 0 {
            return Ok(None);
        }
        if self.outbox_retention_interval_ms > 86_400_000 {
            return Err(ConfigError::invalid(
                "outbox_retention_interval_ms",
                self.outbox_retention_interval_ms.to_string(),
                "must be at most 86400000 (a day), or 0 to turn retention off",
            ));
        }
        within(
            "outbox_retention_batch",
            self.outbox_retention_batch,
            1..=1_000_000,
        )?;
        ra_ledger_cdc::infra::settings::check_identifier("relay_slot", "slot", &self.relay_slot)?;
        Ok(Some(Retention {
            slot: self.relay_slot.clone(),
            interval: Duration::from_millis(self.outbox_retention_interval_ms),
            batch: self.outbox_retention_batch,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_config_validates_and_hides_its_secrets() {
        let config = ServeConfig {
            tokens: crate::api::token_entry(crate::api::Role::Writer, "cs", "secret-token-1"),
            cursor_key: Some("a cursor key of sixteen+".into()),
            database_url: "postgres://u:hunter2@db/ledger".into(),
            ..ServeConfig::default()
        };
        let service = config.validate().unwrap();
        assert_eq!(service.listen.port(), 18080);
        let debug = format!("{config:?} {service:?}");
        for secret in ["secret-token-1", "sixteen", "hunter2"] {
            assert!(!debug.contains(secret), "{debug}");
        }
        let no_tokens = ServeConfig::default().validate().unwrap_err();
        assert!(no_tokens.to_string().contains("tokens"), "{no_tokens}");
        let short_key = ServeConfig {
            cursor_key: Some("short".into()),
            ..config.clone()
        };
        assert!(
            short_key
                .validate()
                .unwrap_err()
                .to_string()
                .contains("cursor_key")
        );
        let bad_listen = ServeConfig {
            listen: "nowhere".into(),
            ..config
        };
        assert!(
            bad_listen
                .validate()
                .unwrap_err()
                .to_string()
                .contains("listen")
        );
        assert!(toml::from_str::<ServeConfig>("listn = \"x\"").is_err());
    }

    #[test]
    fn the_body_read_and_write_stall_timeouts_and_the_connection_cap_default_and_are_bounded() {
        let config = ServeConfig {
            tokens: crate::api::token_entry(crate::api::Role::Writer, "cs", "secret-token-1"),
            ..ServeConfig::default()
        };
        assert_eq!(config.validate().unwrap().limits, Limits::default());
        let set: ServeConfig = toml::from_str(
            "tokens = \"x\"\nbody_read_timeout_ms = 1000\nwrite_stall_timeout_ms = 2000\n\
                 max_connections = 4",
        )
        .unwrap();
        assert_eq!(
            (
                set.body_read_timeout_ms,
                set.write_stall_timeout_ms,
                set.max_connections
            ),
            (1000, 2000, 4),
            "all three are keys of the file"
        );
        for (bad, field) in [
            (
                ServeConfig {
                    body_read_timeout_ms: 0,
                    ..config.clone()
                },
                "body_read_timeout_ms",
            ),
            (
                ServeConfig {
                    write_stall_timeout_ms: 50,
                    ..config.clone()
                },
                "write_stall_timeout_ms",
            ),
            (
                ServeConfig {
                    max_connections: 0,
                    ..config.clone()
                },
                "max_connections",
            ),
        ] {
            let error = bad.validate().unwrap_err().to_string();
            assert!(error.contains(field), "{error}");
        }
    }

    #[test]
    fn secure_cookies_is_a_key_of_the_file_and_of_the_environment_and_off_by_default() {
        let config = ServeConfig {
            tokens: crate::api::token_entry(crate::api::Role::Writer, "cs", "secret-token-1"),
            ..ServeConfig::default()
        };
        assert!(
            !config.validate().unwrap().secure_cookies,
            "plain HTTP by default"
        );
        let set: ServeConfig = toml::from_str("secure_cookies = true").unwrap();
        assert!(set.secure_cookies);
        let mut from_env = config.clone();
        let (_, apply) = SERVE_ENV
            .iter()
            .find(|(name, _)| *name == "LEDGER_SECURE_COOKIES")
            .unwrap();
        apply(&mut from_env, "true").unwrap();
        assert!(from_env.validate().unwrap().secure_cookies);
        assert_eq!(
            apply(&mut from_env, "yes").unwrap_err(),
            "expected true or false"
        );
    }

    #[test]
    fn the_session_key_is_its_own_file_of_32_bytes_and_the_previous_one_needs_an_end() {
        let dir = std::env::temp_dir().join(format!("session-key-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            Some(path)
        };
        let config = ServeConfig {
            tokens: crate::api::token_entry(crate::api::Role::Writer, "cs", "secret-token-1"),
            ..ServeConfig::default()
        };
        assert!(!config.validate().unwrap().session_key_configured);
        let refused = |config: &ServeConfig, field: &str, says: &str| {
            let error = config.validate().unwrap_err().to_string();
            assert!(error.contains(field) && error.contains(says), "{error}");
            assert!(!error.contains("thirty-one"), "{error}");
        };
        let short = ServeConfig {
            session_key_file: file("short", "thirty-one bytes of key, no mor\n"),
            ..config.clone()
        };
        refused(
            &short,
            "session_key_file",
            "at least 32 bytes, this one is 31",
        );
        let key = "k".repeat(32);
        let good = ServeConfig {
            session_key_file: file("current", &key),
            ..config.clone()
        };
        assert!(good.validate().unwrap().session_key_configured);
        let no_end = ServeConfig {
            session_key_previous_file: file("previous", &"p".repeat(32)),
            ..good.clone()
        };
        refused(&no_end, "session_key_previous_until", "RFC 3339");
        let bad_end = ServeConfig {
            session_key_previous_until: Some("tomorrow".into()),
            ..no_end.clone()
        };
        refused(&bad_end, "session_key_previous_until", "tomorrow");
        let same = ServeConfig {
            session_key_previous_file: file("same", &key),
            session_key_previous_until: Some("2030-01-01T00:00:00Z".into()),
            ..good.clone()
        };
        refused(&same, "session_key_previous_file", "the same key");
        let rotating = ServeConfig {
            session_key_previous_until: Some("2030-01-01T00:00:00Z".into()),
            ..no_end.clone()
        };
        let keys = rotating.validate().unwrap().session_keys;
        assert!(format!("{keys:?}").contains("2030-01-01"));
        let alone = ServeConfig {
            session_key_previous_file: file("previous", &"p".repeat(32)),
            ..config.clone()
        };
        refused(&alone, "session_key_previous_file", "session_key_file");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn outbox_retention_is_on_by_default_and_zero_turns_it_off() {
        let config = ServeConfig {
            tokens: crate::api::token_entry(crate::api::Role::Writer, "cs", "secret-token-1"),
            ..ServeConfig::default()
        };
        let retention = config.validate().unwrap().retention.unwrap();
        assert_eq!(retention.slot, "ra_ledger_relay");
        assert_eq!(retention.interval, Duration::from_secs(10));
        let off = ServeConfig {
            outbox_retention_interval_ms: 0,
            // Not checked when retention is off.
            relay_slot: String::new(),
            ..config.clone()
        };
        assert_eq!(off.validate().unwrap().retention, None);
        for (bad, field) in [
            (
                ServeConfig {
                    outbox_retention_interval_ms: 86_400_001,
                    ..config.clone()
                },
                "outbox_retention_interval_ms",
            ),
            (
                ServeConfig {
                    outbox_retention_batch: 0,
                    ..config.clone()
                },
                "outbox_retention_batch",
            ),
            (
                ServeConfig {
                    relay_slot: "Robert'); DROP".into(),
                    ..config.clone()
                },
                "relay_slot",
            ),
        ] {
            let error = bad.validate().unwrap_err().to_string();
            assert!(error.contains(field), "{error}");
        }
    }

    #[test]
    fn the_watcher_is_off_by_default_and_its_settings_are_checked_with_the_relays_file() {
        let config = ServeConfig {
            tokens: crate::api::token_entry(crate::api::Role::Writer, "cs", "secret-token-1"),
            ..ServeConfig::default()
        };
        assert!(config.validate().unwrap().watcher.is_none());
        let dir = std::env::temp_dir().join(format!("watcher-relay-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let relay = dir.join("relay.toml");
        std::fs::write(
            &relay,
            "topic_prefix = \"prod.outbox.event.\"\n[kafka]\n\"bootstrap.servers\" = \"k1:9092\"\n",
        )
        .unwrap();
        let on = ServeConfig {
            watcher_relay_config: Some(relay.clone()),
            ..config.clone()
        };
        let watcher = on.validate().unwrap().watcher.unwrap();
        assert_eq!(watcher.relay.topic("contact"), "prod.outbox.event.contact");
        assert_eq!(watcher.lag_bound, Duration::from_secs(60));
        assert_eq!(
            (watcher.interval, watcher.window),
            (Duration::from_secs(1), 100_000)
        );
        let missing = dir.join("absent.toml");
        for (bad, named) in [
            (
                ServeConfig {
                    watcher_relay_config: Some(missing.clone()),
                    ..config.clone()
                },
                format!("watcher_relay_config = \"{}\"", missing.display()),
            ),
            (
                ServeConfig {
                    watcher_lag_bound_ms: 10,
                    ..on.clone()
                },
                "watcher_lag_bound_ms".to_owned(),
            ),
            (
                ServeConfig {
                    watcher_window: 10,
                    ..on.clone()
                },
                "watcher_window".to_owned(),
            ),
        ] {
            let error = bad.validate().unwrap_err().to_string();
            assert!(error.contains(&named), "{error}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_witness_policy_is_read_at_start_and_a_bad_one_named_with_its_line() {
        use crate::tlog::note::{ALG_COSIGNATURE_V1, NoteKey};
        let dir = std::env::temp_dir().join(format!("witness-policy-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("digest.pem");
        std::fs::write(
            &key,
            "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIAcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcH\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let vkey = NoteKey {
            name: "w.example/a".into(),
            algorithm: ALG_COSIGNATURE_V1,
            public: crate::digest::DigestKey::from_seed(&[1; 32]).public(),
        }
        .vkey();
        let config = |policy: &str, origin: &str| {
            let file = dir.join("policy.txt");
            std::fs::write(&file, policy).unwrap();
            ServeConfig {
                tokens: crate::api::token_entry(crate::api::Role::Writer, "cs", "secret-token-1"),
                digest_key_file: Some(key.clone()),
                witness_policy_file: Some(file),
                log_origin: origin.into(),
                ..ServeConfig::default()
            }
            .validate()
        };
        let service = config(
            &format!("witness a {vkey} http://127.0.0.1:1\nquorum a\n"),
            "ra.example/log",
        )
        .unwrap();
        let digests = service.digests.unwrap();
        assert_eq!(digests.origin, "ra.example/log");
        let cosigning = digests.cosigning.unwrap();
        assert_eq!(cosigning.policy.describe(), "a");
        assert_eq!(cosigning.interval, Duration::from_millis(5_000));
        let error = config(&format!("witness a {vkey}\nquorum a\n"), "ra.example/log")
            .unwrap_err()
            .to_string();
        assert!(error.contains("witness a has no URL"), "{error}");
        let error = config("quorum b\n", "ra.example/log")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("policy line 1: quorum \"b\" is not defined above"),
            "{error}"
        );
        let error = config("quorum none\n", "two words")
            .unwrap_err()
            .to_string();
        assert!(error.contains("log_origin"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
