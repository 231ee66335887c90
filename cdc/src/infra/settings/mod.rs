//! Settings every process of the project shares: the local stack's defaults, reading a TOML
//! file and secret files, and the checks of names and addresses. The relay's own
//! configuration ([`crate::config`]), the Kafka settings ([`super::kafka`]) and the ledger's
//! build on these.
//!
//! - [`declare`]: how a config declares each setting once ([`crate::settings!`]) and loads:
//!   file, environment, command line, then secrets and checks.
//! - [`env`](mod@env): the name of every environment variable the project reads.
//! - [`connection`]: the connection block, a [`DatabaseUrl`] that never prints its password.

use std::net::SocketAddr;

pub mod connection;
pub mod declare;
pub mod env;

pub use connection::DatabaseUrl;
pub use declare::{EnvVar, KafkaMaps, Settings, flag, listen, non_empty, number, overlay, within};

/// The local stack's addresses and names (`deploy/stack up`), written once: the default of
/// every process, tool and benchmark comes from here.
pub mod local {
    /// The ledger database.
    pub const DATABASE_URL: &str = "postgres://ledger:ledger@127.0.0.1:54329/ledger";
    /// Kafka bootstrap servers.
    pub const KAFKA_BROKERS: &str = "127.0.0.1:19092";
    /// The relay's logical replication slot (`ledger migrate` creates it).
    pub const SLOT: &str = "ra_ledger_relay";
    /// The insert-only publication of the outbox (migration V1 creates it).
    pub const PUBLICATION: &str = "ra_ledger_outbox";
    /// Topics are `<prefix><aggregate type>` (Debezium's outbox EventRouter layout).
    pub const TOPIC_PREFIX: &str = "outbox.event.";
    /// The topic of the reassignment runs' page requests.
    pub const REASSIGNMENT_TOPIC: &str = "outbox.event.reassignment";
    /// The consumer group every reassignment worker shares.
    pub const WORKER_GROUP: &str = "ra-ledger-reassignment";
    /// Where `ledger serve` listens.
    pub const HTTP_LISTEN: &str = "127.0.0.1:18080";
    /// The ledger service's URL, for tools.
    pub const API_URL: &str = "http://127.0.0.1:18080";
    /// The relay's `/metrics`.
    pub const RELAY_METRICS: &str = "127.0.0.1:19100";
    /// The worker's `/metrics`.
    pub const WORKER_METRICS: &str = "127.0.0.1:19101";
    /// `ledger serve`'s `/metrics` (19102 is `ledger reconcile --every`'s).
    pub const SERVE_METRICS: &str = "127.0.0.1:19103";
    /// The schema registry's Confluent-compatible API (Apicurio's, `deploy/stack up`).
    pub const SCHEMA_REGISTRY_URL: &str = "http://127.0.0.1:18081/apis/ccompat/v7";
}

/// A configuration that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file does not parse.
    #[error("cannot read config {path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A value is invalid.
    #[error("config: {field} = {value:?}: {reason}")]
    Invalid {
        /// The field, as the file or the environment names it.
        field: String,
        /// Its value (never a secret's).
        value: String,
        /// What is wrong.
        reason: String,
    },
}

impl ConfigError {
    /// An invalid value of `field`.
    pub fn invalid(field: &str, value: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.into(),
            value: value.into(),
            reason: reason.into(),
        }
    }

    /// An invalid file of `field`: the error shows its path, never its content (a key's or a
    /// password's bytes).
    pub fn invalid_file(
        field: &str,
        path: &std::path::Path,
        reason: impl std::fmt::Display,
    ) -> Self {
        Self::invalid(field, path.display().to_string(), reason.to_string())
    }
}

/// Reads the TOML file at `path` over the type's defaults (every field may be left out,
/// an unknown one is an error), or the defaults alone without a path.
pub fn read_file<T: serde::de::DeserializeOwned + Default>(
    path: Option<&str>,
) -> Result<T, ConfigError> {
    let Some(path) = path else {
        return Ok(T::default());
    };
    let file_error = |message: String| ConfigError::File {
        path: path.into(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|error| file_error(error.to_string()))?;
    toml::from_str(&text).map_err(|error| file_error(error.to_string()))
}

/// Reads the text file at `path` that `field` names. Errors name `field` and the path,
/// never the content.
pub fn read_text(field: &str, path: &std::path::Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map_err(|error| ConfigError::invalid_file(field, path, format!("cannot read it: {error}")))
}

/// Reads a secret from the file at `path`, without its trailing newline. Errors name
/// `field` and the path, never the content.
pub fn read_secret(field: &str, path: &std::path::Path) -> Result<String, ConfigError> {
    let text = read_text(field, path)?;
    let secret = text.trim_end_matches(['\n', '\r']).to_owned();
    if secret.is_empty() {
        return Err(ConfigError::invalid_file(field, path, "the file is empty"));
    }
    Ok(secret)
}

/// Whether `name` is a slot or publication name we accept: 1-63 characters of a-z, 0-9
/// and `_` (PostgreSQL's own rules for slots, kept for publications too).
pub fn identifier(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Checks `name` of `field` is an [`identifier`]; the error says what a `kind` (slot,
/// publication) name may be.
pub fn check_identifier(field: &str, kind: &str, name: &str) -> Result<(), ConfigError> {
    if identifier(name) {
        return Ok(());
    }
    Err(ConfigError::invalid(
        field,
        name,
        format!("a {kind} name is 1-63 characters of a-z, 0-9 and _"),
    ))
}

/// `text` as the base URL of an HTTP API: `http://` or `https://` with a host, its path
/// ending in a slash so that paths joined onto it keep its last segment (a schema
/// registry's `…/apis/ccompat/v7`). The error says why not.
pub fn http_base_url(text: &str) -> Result<reqwest::Url, String> {
    let mut base = reqwest::Url::parse(text).map_err(|error| error.to_string())?;
    if !matches!(base.scheme(), "http" | "https") || base.host().is_none() {
        return Err("expected an http:// or https:// URL with a host".to_owned());
    }
    if !base.path().ends_with('/') {
        base.set_path(&format!("{}/", base.path()));
    }
    Ok(base)
}

/// `text` with the user information of a URL (`user:password@`) replaced by `<redacted>@`:
/// what a log line or an error may show of a URL a setting gave. Text that does not parse
/// as a URL and holds an `@` is replaced whole, since where its secret ends is unknown.
pub fn redact_url(text: &str) -> String {
    // `user:password@host` parses as a URL of scheme `user`, without an authority.
    let parsed = reqwest::Url::parse(text)
        .ok()
        .filter(|url| !url.cannot_be_a_base());
    let Some(url) = parsed else {
        return if text.contains('@') {
            "<a URL that does not parse, redacted>".to_owned()
        } else {
            text.to_owned()
        };
    };
    if url.username().is_empty() && url.password().is_none() {
        return text.to_owned();
    }
    let (scheme, rest) = text.split_once("://").unwrap_or((url.scheme(), text));
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://<redacted>@{host}{path}")
}

/// A `host:port` to listen on, or `None` for an empty value (disabled).
pub fn listen_address(field: &str, text: &str) -> Result<Option<SocketAddr>, ConfigError> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    text.trim()
        .parse()
        .map(Some)
        .map_err(|_| ConfigError::invalid(field, text, "expected host:port, or empty to disable"))
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn a_url_loses_its_user_information_and_nothing_else() {
        assert_eq!(
            redact_url("http://reguser:s3cretPW@127.0.0.1:18081/apis/ccompat/v6?a=b"),
            "http://<redacted>@127.0.0.1:18081/apis/ccompat/v6?a=b"
        );
        assert_eq!(
            redact_url("https://token@registry.example/x@y"),
            "https://<redacted>@registry.example/x@y"
        );
        for plain in ["http://127.0.0.1:18081/apis/ccompat/v7", "not a url"] {
            assert_eq!(redact_url(plain), plain);
        }
        assert!(!redact_url("reguser:s3cretPW@host:1").contains("s3cretPW"));
    }
}
