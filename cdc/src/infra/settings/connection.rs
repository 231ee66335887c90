//! The connection block every process shares (`database_url`, whose query holds the TLS
//! settings, and `database_password_file`): [`DatabaseUrl`], a URL that keeps its password
//! out of `Debug` and so out of every log line and error that prints a config. The model
//! is etl's `PgConnectionConfig`, whose password is a `SecretString`.

use std::path::Path;

use super::{ConfigError, read_secret};
use crate::infra::pg;

/// A PostgreSQL URL (or libpq key=value string), TLS settings included (`sslmode`,
/// `sslrootcert`, ...). `Debug` shows where it points, never its password; the text itself
/// is had only by asking for it ([`DatabaseUrl::expose`], or as a `&str`), to connect.
#[derive(Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    /// The URL's text, password and all: for the driver, never for a log.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// This URL with the password in `password_file` (when given): `database_password_file`,
    /// or `LEDGER_DATABASE_PASSWORD_FILE`. Again after the URL changed (idempotent).
    pub fn with_password_file(&self, password_file: Option<&Path>) -> Result<Self, ConfigError> {
        let Some(path) = password_file else {
            return Ok(self.clone());
        };
        let password = read_secret("database_password_file", path)?;
        pg::with_password(&self.0, &password)
            .map(Self)
            .map_err(|error| ConfigError::invalid("database_url", "<redacted>", error.to_string()))
    }

    /// Checks the URL the way a connection would read it (host, port, TLS settings), so a
    /// bad URL stops the process before it starts. The error never shows the URL: it may
    /// carry a password.
    pub fn check(&self) -> Result<(), ConfigError> {
        pg::config(&self.0, "check")
            .map(drop)
            .map_err(|error| ConfigError::invalid("database_url", "<redacted>", error.to_string()))
    }
}

impl std::fmt::Debug for DatabaseUrl {
    // Where it points (host:port/database), or nothing of a URL that does not parse: never
    // the password, wherever the URL carries it (user info, `password=`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match pg::config(&self.0, "debug") {
            Ok(settings) => write!(
                f,
                "DatabaseUrl({} <password redacted>)",
                pg::target(&settings)
            ),
            Err(_) => f.write_str("DatabaseUrl(<unparsed, redacted>)"),
        }
    }
}

impl std::ops::Deref for DatabaseUrl {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for DatabaseUrl {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for DatabaseUrl {
    // For a child process's environment.
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_ref()
    }
}

impl From<String> for DatabaseUrl {
    fn from(url: String) -> Self {
        Self(url)
    }
}

impl From<&str> for DatabaseUrl {
    fn from(url: &str) -> Self {
        Self(url.to_owned())
    }
}

impl From<&String> for DatabaseUrl {
    fn from(url: &String) -> Self {
        Self(url.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_where_a_url_points_and_never_its_password() {
        for url in [
            "postgres://u:hunter2@db.internal:5433/ledger",
            "host=db.internal port=5433 dbname=ledger user=u password=hunter2",
            "postgres://u@db.internal:5433/ledger?password=hunter2",
            "not a url hunter2",
        ] {
            let debug = format!("{:?}", DatabaseUrl::from(url));
            assert!(!debug.contains("hunter2"), "{debug}");
        }
        let debug = format!("{:?}", DatabaseUrl::from("postgres://u:p@db:5433/ledger"));
        assert_eq!(debug, "DatabaseUrl(db:5433/ledger <password redacted>)");
    }
}
