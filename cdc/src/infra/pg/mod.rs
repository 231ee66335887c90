//! PostgreSQL connection settings from a database URL, read in one place for every
//! connection the project makes: the ledger's pools and tools, the relay's SQL connection
//! and its replication stream. [`url`] edits URLs as text; [`replication`] is the stream's
//! connection.

use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio_postgres::config::Host;
use tokio_postgres::{Client, Config};

mod replication;
pub mod tls;
mod url;

pub use replication::ReplicationTarget;
pub use tls::{SslMode, Tls};
pub use url::{with_database, with_password};

use url::tls_params;

/// A database URL that does not parse, or whose TLS settings cannot work.
#[derive(Debug, thiserror::Error)]
#[error("invalid database URL: {0}")]
pub struct UrlError(String);

/// A database URL, read: the driver's settings, and the TLS ones (libpq's `sslmode`,
/// `sslrootcert`, `sslcert`, `sslkey`) that tokio-postgres does not know.
#[derive(Clone)]
pub struct Settings {
    /// The driver's settings (host, role, password, database, options).
    pub sql: Config,
    /// How connections are encrypted and verified.
    pub tls: Tls,
    connector: tls::RustlsConnect,
}

impl std::fmt::Debug for Settings {
    // Never print the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("target", &target(self))
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl Settings {
    /// What makes the TLS connections of tokio-postgres (and deadpool's pools).
    pub fn connector(&self) -> tls::RustlsConnect {
        self.connector.clone()
    }

    /// One settings per host of a multi-host URL (`host=a,b` or `postgres://a:1,b:2/db`), in
    /// the URL's order, each with everything else of the URL: what a client that must know
    /// which host it reached (the relay's replication stream goes to the same server as its
    /// SQL connection) connects with. A single-host URL gives itself.
    pub fn hosts(&self) -> Vec<Settings> {
        let hosts = self.sql.get_hosts();
        if hosts.len() <= 1 {
            return vec![self.clone()];
        }
        let ports = self.sql.get_ports();
        let addresses = self.sql.get_hostaddrs();
        hosts
            .iter()
            .enumerate()
            .map(|(index, host)| {
                let mut sql = single_host_base(&self.sql);
                match host {
                    Host::Tcp(name) => sql.host(name),
                    Host::Unix(path) => sql.host_path(path),
                };
                if let Some(address) = addresses
                    .get(index)
                    .filter(|_| addresses.len() == hosts.len())
                {
                    sql.hostaddr(*address);
                }
                // libpq: one port for every host, or one per host.
                let port = match ports.len() {
                    0 => 5432,
                    1 => ports[0],
                    _ => ports.get(index).copied().unwrap_or(5432),
                };
                sql.port(port);
                Settings {
                    sql,
                    tls: self.tls.clone(),
                    connector: self.connector.clone(),
                }
            })
            .collect()
    }

    /// Why these settings leave a remote server's connections open to a man in the middle,
    /// if they do: a non-loopback host with a mode weaker than `verify-full`.
    pub fn weakness(&self) -> Option<String> {
        if loopback(&self.sql) || self.tls.mode == SslMode::VerifyFull {
            return None;
        }
        let what = match self.tls.mode {
            SslMode::Disable => "unencrypted",
            SslMode::Prefer => "unencrypted when the server offers no TLS, and never verified",
            SslMode::Require => "encrypted but the server is not verified",
            SslMode::VerifyCa => "verified against the CA but not against the host name",
            SslMode::VerifyFull => unreachable!(),
        };
        Some(format!(
            "connections to {} use sslmode={}: {what}; set sslmode=verify-full (and \
             sslrootcert) unless the network is trusted",
            target(self),
            self.tls.mode.as_str()
        ))
    }
}

/// Parses `url` (a `postgres://` URL or a libpq key=value string) and sets
/// `application_name`, so operators can find the connection in `pg_stat_activity`.
///
/// TLS: `sslmode` is one of libpq's (`disable`, `prefer`, `require`, `verify-ca`,
/// `verify-full`); unset, it is `prefer` for loopback hosts and Unix sockets (as libpq) and
/// `verify-full` for any other host. As in libpq, `require` with `sslrootcert` verifies the
/// chain (`verify-ca`). Without `sslrootcert`, verification uses Mozilla's roots.
pub fn config(url: &str, application_name: &str) -> Result<Settings, UrlError> {
    let (rest, params) = tls_params(url)?;
    let mut sql = Config::from_str(&rest).map_err(|error| UrlError(error.to_string()))?;
    sql.application_name(application_name);
    let mut tls = Tls {
        mode: SslMode::Prefer,
        defaulted: true,
        root_cert: None,
        client_cert: None,
        client_key: None,
    };
    for (key, value) in params {
        match key.as_str() {
            "sslmode" => {
                tls.mode = SslMode::parse(&value).ok_or_else(|| {
                    UrlError(format!(
                        "sslmode={value:?}: expected disable, prefer, require, verify-ca or \
                         verify-full"
                    ))
                })?;
                tls.defaulted = false;
            }
            // libpq's "system" store: this project's is Mozilla's (webpki-roots).
            "sslrootcert" if value == "system" => tls.root_cert = None,
            "sslrootcert" => tls.root_cert = Some(PathBuf::from(value)),
            "sslcert" => tls.client_cert = Some(PathBuf::from(value)),
            "sslkey" => tls.client_key = Some(PathBuf::from(value)),
            _ => unreachable!("tls_params returns only TLS keys"),
        }
    }
    if tls.defaulted && !loopback(&sql) {
        tls.mode = SslMode::VerifyFull;
    }
    if tls.mode == SslMode::Require && tls.root_cert.is_some() {
        tls.mode = SslMode::VerifyCa;
    }
    sql.ssl_mode(tls.driver_mode());
    let connector = tls
        .connector()
        .map_err(|error| UrlError(error.to_string()))?;
    Ok(Settings {
        sql,
        tls,
        connector,
    })
}

/// `config` without its hosts, ports and host choice: everything else a connection uses.
fn single_host_base(config: &Config) -> Config {
    let mut sql = Config::new();
    if let Some(user) = config.get_user() {
        sql.user(user);
    }
    if let Some(password) = config.get_password() {
        sql.password(password);
    }
    if let Some(dbname) = config.get_dbname() {
        sql.dbname(dbname);
    }
    if let Some(options) = config.get_options() {
        sql.options(options);
    }
    if let Some(name) = config.get_application_name() {
        sql.application_name(name);
    }
    if let Some(timeout) = config.get_connect_timeout() {
        sql.connect_timeout(*timeout);
    }
    if let Some(timeout) = config.get_tcp_user_timeout() {
        sql.tcp_user_timeout(*timeout);
    }
    sql.ssl_mode(config.get_ssl_mode())
        .ssl_negotiation(config.get_ssl_negotiation())
        .keepalives(config.get_keepalives())
        .keepalives_idle(config.get_keepalives_idle())
        .channel_binding(config.get_channel_binding());
    if let Some(interval) = config.get_keepalives_interval() {
        sql.keepalives_interval(interval);
    }
    if let Some(retries) = config.get_keepalives_retries() {
        sql.keepalives_retries(retries);
    }
    sql
}

/// Whether every host is this machine: a loopback address, `localhost` or a Unix socket.
fn loopback(config: &Config) -> bool {
    config.get_hosts().iter().all(|host| match host {
        Host::Unix(_) => true,
        Host::Tcp(name) => {
            name == "localhost"
                || name
                    .trim_matches(|c| c == '[' || c == ']')
                    .parse::<IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
    })
}

/// Where settings point, without the password: `host:port/database`.
pub fn target(settings: &Settings) -> String {
    let config = &settings.sql;
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
/// The first connection of a process with weak TLS settings for a remote host logs why.
pub async fn connect(settings: &Settings) -> Result<Client, tokio_postgres::Error> {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if let Some(weakness) = settings.weakness()
        && !WARNED.swap(true, Ordering::Relaxed)
    {
        tracing::warn!("{weakness}");
    }
    let (client, connection) = settings.sql.connect(settings.connector()).await?;
    let application = settings
        .sql
        .get_application_name()
        .unwrap_or_default()
        .to_owned();
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(error = %explain(&error), %application, "PostgreSQL connection closed with an error");
        }
    });
    Ok(client)
}

/// The whole story of a driver error (tokio-postgres' own `Display` stops at "db error" or
/// "error performing TLS handshake"), then what to do about it when that is known.
pub fn explain(error: &tokio_postgres::Error) -> String {
    let mut text = error.to_string();
    if let Some(db) = error.as_db_error() {
        text.push_str(&format!(
            ": {} (SQLSTATE {})",
            db.message(),
            db.code().code()
        ));
    } else {
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
    }
    let hint = if text.contains("no pg_hba.conf entry") && text.contains("no encryption") {
        Some(
            "the server accepts only TLS connections: set sslmode=verify-full and sslrootcert=<its CA file> in the URL",
        )
    } else if text.contains("server does not support TLS") {
        Some(
            "the server offers no TLS, and the URL's sslmode requires it (sslmode=disable only on a trusted network)",
        )
    } else if text.contains("UnknownIssuer") || text.contains("BadSignature") {
        Some(
            "the server's certificate is not signed by a CA in sslrootcert (Mozilla's roots when unset)",
        )
    } else if text.contains("NotValidForName") || text.contains("not valid for name") {
        Some(
            "the server's certificate does not name this host: connect by a name it carries, or use sslmode=verify-ca",
        )
    } else if text.contains("is not a host name TLS can verify") {
        Some("verify-full needs a host name or IP address the certificate can name")
    } else {
        None
    };
    if let Some(hint) = hint {
        // A sentence of its own after the driver's words.
        let mut chars = hint.chars();
        let first = chars
            .next()
            .map(|c| c.to_ascii_uppercase())
            .unwrap_or_default();
        text.push_str(&format!(". {first}{}", chars.as_str()));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multi_host_url_splits_into_one_settings_per_host() {
        let multi = config(
            "postgres://role:secret@127.0.0.1:5001,127.0.0.1:5002/ledger?target_session_attrs=read-write&connect_timeout=7",
            "relay",
        )
        .unwrap();
        let hosts = multi.hosts();
        assert_eq!(hosts.len(), 2);
        assert_eq!(target(&hosts[0]), "127.0.0.1:5001/ledger");
        assert_eq!(target(&hosts[1]), "127.0.0.1:5002/ledger");
        for host in &hosts {
            assert_eq!(host.sql.get_password(), Some(&b"secret"[..]));
            assert_eq!(host.sql.get_application_name(), Some("relay"));
            assert_eq!(
                host.sql.get_connect_timeout(),
                Some(&std::time::Duration::from_secs(7))
            );
            assert_eq!(ReplicationTarget::of(host).user, "role");
        }
        let shared_port = config("host=a,b port=6000 user=u dbname=d", "t").unwrap();
        let ports: Vec<u16> = shared_port
            .hosts()
            .iter()
            .map(|host| ReplicationTarget::of(host).port)
            .collect();
        assert_eq!(ports, vec![6000, 6000]);
        let single = config("postgres://u@h:1/d", "t").unwrap();
        assert_eq!(single.hosts().len(), 1);
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

    #[test]
    fn tls_settings_are_read_as_libpq_reads_them() {
        let local = config("postgres://u:p@127.0.0.1:5432/db", "t").unwrap();
        assert_eq!(
            (local.tls.mode, local.tls.defaulted),
            (SslMode::Prefer, true)
        );
        assert!(local.weakness().is_none());
        let remote = config("postgres://u:p@db.example/db", "t").unwrap();
        assert_eq!(
            (remote.tls.mode, remote.tls.defaulted),
            (SslMode::VerifyFull, true)
        );
        assert!(remote.weakness().is_none());
        let weak = config(
            "postgres://u:p@db.example/db?sslmode=require&application_name=x",
            "t",
        )
        .unwrap();
        assert_eq!(weak.tls.mode, SslMode::Require);
        let weakness = weak.weakness().unwrap();
        assert!(
            weakness.contains("db.example") && !weakness.contains(":p@"),
            "{weakness}"
        );
        // libpq: require with a root certificate verifies the chain.
        let ca = std::env::temp_dir().join(format!("ra-ledger-pg-ca-{}.pem", std::process::id()));
        std::fs::write(&ca, TEST_CA).unwrap();
        let url = format!(
            "postgres://u@db.example/db?sslmode=require&sslrootcert={}",
            ca.display().to_string().replace('/', "%2F")
        );
        let ca_checked = config(&url, "t").unwrap();
        assert_eq!(ca_checked.tls.mode, SslMode::VerifyCa);
        assert_eq!(ca_checked.tls.root_cert.as_deref(), Some(ca.as_path()));
        let keyword = config(
            &format!(
                "host=db.example user=u password='p w' sslmode=verify-ca sslrootcert='{}'",
                ca.display()
            ),
            "t",
        )
        .unwrap();
        assert_eq!(keyword.tls.mode, SslMode::VerifyCa);
        assert_eq!(keyword.sql.get_password(), Some(&b"p w"[..]));
        let _ = std::fs::remove_file(&ca);
        let bad = config("postgres://u:secret@h/db?sslmode=verify_full", "t").unwrap_err();
        assert!(
            bad.to_string().contains("verify_full") && !bad.to_string().contains("secret"),
            "{bad}"
        );
        let missing = config(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert=/nonexistent.pem",
            "t",
        )
        .unwrap_err();
        assert!(
            missing.to_string().contains("/nonexistent.pem"),
            "{missing}"
        );
        let replication = ReplicationTarget::of(&remote);
        assert_eq!(
            replication.tls.mode,
            pgwire_replication::config::SslMode::VerifyFull
        );
    }

    // A throwaway self-signed CA (openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256).
    const TEST_CA: &str = include_str!("test-ca.pem");
}
