//! PostgreSQL connection settings from a database URL, read in one place for every
//! connection the project makes: the ledger's pools and tools, the relay's SQL connection
//! and its replication stream.

use std::str::FromStr;

use tokio_postgres::config::Host;
use tokio_postgres::{Client, Config, NoTls};

/// A database URL that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("invalid database URL: {0}")]
pub struct UrlError(String);

/// Parses `url` (a `postgres://` URL or a libpq key=value string) and sets
/// `application_name`, so operators can find the connection in `pg_stat_activity`.
pub fn config(url: &str, application_name: &str) -> Result<Config, UrlError> {
    let mut config = Config::from_str(url).map_err(|error| UrlError(error.to_string()))?;
    config.application_name(application_name);
    Ok(config)
}

/// Where a configuration points, without the password: `host:port/database`.
pub fn target(config: &Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|host| match host {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_default();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let dbname = config.get_dbname().unwrap_or_default();
    format!("{host}:{port}/{dbname}")
}

/// Opens one connection and drives it on a background task, which logs how it ended.
pub async fn connect(config: &Config) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = config.connect(NoTls).await?;
    let application = config.get_application_name().unwrap_or_default().to_owned();
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(%error, %application, "PostgreSQL connection closed with an error");
        }
    });
    Ok(client)
}

/// What a replication connection needs, from the same URL as the SQL connection.
#[derive(Clone, PartialEq, Eq)]
pub struct ReplicationTarget {
    /// Host name, address or socket folder.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Role.
    pub user: String,
    /// Password (empty when none).
    pub password: String,
    /// Database.
    pub database: String,
}

impl std::fmt::Debug for ReplicationTarget {
    // Never print the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicationTarget")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("database", &self.database)
            .finish_non_exhaustive()
    }
}

impl ReplicationTarget {
    /// The replication target of a configuration.
    pub fn of(config: &Config) -> Self {
        Self {
            host: match config.get_hosts().first() {
                Some(Host::Tcp(host)) => host.clone(),
                Some(Host::Unix(path)) => path.display().to_string(),
                None => "127.0.0.1".into(),
            },
            port: config.get_ports().first().copied().unwrap_or(5432),
            user: config.get_user().unwrap_or("postgres").to_owned(),
            password: config
                .get_password()
                .map(|password| String::from_utf8_lossy(password).into_owned())
                .unwrap_or_default(),
            database: config.get_dbname().unwrap_or("postgres").to_owned(),
        }
    }
}

/// `url` with its database replaced by `database` (credentials, host and query kept).
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(base, query)| (base, Some(query)));
    let authority = base.find("://").map_or(0, |scheme| scheme + 3);
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |slash| slash + authority);
    let mut out = format!("{}/{database}", &base[..path]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_database_of_a_url() {
        assert_eq!(
            with_database("postgres://u:p@h:1/postgres", "t_1"),
            "postgres://u:p@h:1/t_1"
        );
        assert_eq!(
            with_database("postgres://u:p@h:1", "t_1"),
            "postgres://u:p@h:1/t_1"
        );
        assert_eq!(
            with_database("postgres://u@h/db?sslmode=disable", "t_1"),
            "postgres://u@h/t_1?sslmode=disable"
        );
    }

    #[test]
    fn targets_name_host_port_and_database_without_the_password() {
        let config = config("postgres://role:secret@db.example:6543/ledger", "t").unwrap();
        assert_eq!(target(&config), "db.example:6543/ledger");
        let replication = ReplicationTarget::of(&config);
        assert_eq!(
            (replication.user.as_str(), replication.password.as_str()),
            ("role", "secret")
        );
        assert!(!format!("{replication:?}").contains("secret"));
        assert!(super::config("postgres://[::1", "t").is_err());
    }
}
