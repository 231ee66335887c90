//! How to reach a schema registry, as the database and Kafka are reached: its URL without
//! credentials (errors and logs show it), a user with a password file (basic auth), a CA
//! file; and the checks of those settings that need no file read ([`RegistryAccess::check`]).
//!
//! Here, below both the relay's configuration and the registry's client, so that the
//! configuration checks the settings without using the client (issue 58: `config` and
//! `registry` used each other).

use std::path::PathBuf;

use reqwest::Url;

use crate::infra::settings::{http_base_url, redact_url};

/// A registry setting that cannot work: a URL that is not an `http://` or `https://` one,
/// or carries credentials; a user without a password file; a password over plain HTTP to
/// another machine. (`RegistryError::Setting` once the client has it.)
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} = {value:?}: {reason}")]
pub struct AccessError {
    /// The setting.
    pub field: &'static str,
    /// Its value (a URL redacted, never a secret).
    pub value: String,
    /// Why, and what to do.
    pub reason: String,
}

/// How to reach a registry: its URL and, as for the database and Kafka, a user with a
/// password file and a CA file (`schema_registry_user`, `schema_registry_password_file`,
/// `schema_registry_ca_file`).
#[derive(Debug, Clone, Default)]
pub struct RegistryAccess {
    /// The Confluent-compatible API, without user information.
    pub url: String,
    /// The user, for basic auth.
    pub user: Option<String>,
    /// The file holding the user's password.
    pub password_file: Option<PathBuf>,
    /// The CA (PEM) that signed the registry's certificate, trusted instead of the built-in
    /// roots.
    pub ca_file: Option<PathBuf>,
}

impl RegistryAccess {
    /// The registry at `url`, without credentials or a CA of its own.
    pub fn url(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            ..Self::default()
        }
    }

    /// Checks what can be checked without reading a file: the URL is an HTTP one without
    /// user information; a user comes with a password file and the other way round; a
    /// password crosses only TLS, or loopback. Pure.
    pub fn check(&self) -> Result<Url, AccessError> {
        let bad = |field: &'static str, value: &str, reason: String| AccessError {
            field,
            value: value.to_owned(),
            reason,
        };
        let shown = redact_url(&self.url);
        let base = http_base_url(&self.url).map_err(|reason| bad(URL, &shown, reason))?;
        if !base.username().is_empty() || base.password().is_some() {
            return Err(bad(
                URL,
                &shown,
                "a registry URL carries no credentials (errors and logs show the URL): put the user in schema_registry_user and the password in a file named by schema_registry_password_file (LEDGER_SCHEMA_REGISTRY_USER, LEDGER_SCHEMA_REGISTRY_PASSWORD_FILE)".into(),
            ));
        }
        match (&self.user, &self.password_file) {
            (Some(_), None) => {
                return Err(bad(
                    "schema_registry_password_file",
                    "",
                    "schema_registry_user is set: name the file holding its password (LEDGER_SCHEMA_REGISTRY_PASSWORD_FILE)".into(),
                ));
            }
            (None, Some(path)) => {
                return Err(bad(
                    "schema_registry_user",
                    "",
                    format!(
                        "schema_registry_password_file is set ({}): name the user it is the password of (LEDGER_SCHEMA_REGISTRY_USER)",
                        path.display()
                    ),
                ));
            }
            _ => {}
        }
        if self.user.is_some() && !password_may_cross(&base) {
            return Err(bad(
                URL,
                &shown,
                "a password would cross the network in clear: use the registry's https:// URL (schema_registry_ca_file names a private CA)".into(),
            ));
        }
        Ok(base)
    }
}

/// The setting of the registry's URL.
pub const URL: &str = "schema_registry_url";

/// Whether a password may be sent to `base`: over TLS, or to this machine. Pure.
fn password_may_cross(base: &Url) -> bool {
    let host = base.host_str().unwrap_or_default();
    base.scheme() == "https"
        || host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|address| address.is_loopback())
}
