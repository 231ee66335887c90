//! The replication stream's connection: [`ReplicationTarget`], read from the same
//! [`Settings`] as the SQL connections, so both reach the same server with the same TLS.

use tokio_postgres::config::Host;

use super::Settings;

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
    /// TLS, as for the SQL connections.
    pub tls: pgwire_replication::TlsConfig,
}

impl std::fmt::Debug for ReplicationTarget {
    // Never print the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicationTarget")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("database", &self.database)
            .field("tls", &self.tls.mode)
            .finish_non_exhaustive()
    }
}

impl ReplicationTarget {
    /// The replication target of database settings.
    pub fn of(settings: &Settings) -> Self {
        let config = &settings.sql;
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
            tls: settings.tls.replication(),
        }
    }

    /// A replication stream of `slot` and `publication` to this target.
    pub fn stream(
        self,
        slot: impl Into<String>,
        publication: &str,
    ) -> pgwire_replication::ReplicationConfig {
        pgwire_replication::ReplicationConfig::new(
            self.host,
            self.user,
            self.password,
            self.database,
            slot,
            publication,
        )
        .with_port(self.port)
        .with_tls(self.tls)
    }
}
