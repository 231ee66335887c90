//! Connections to PostgreSQL: a pool for services, single clients for tools. The URL is
//! read by [`ra_ledger_cdc::infra::pg`], as for every other connection.

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use ra_ledger_cdc::infra::pg;
use tokio_postgres::Client;

pub use ra_ledger_cdc::infra::pg::with_database;

/// Why connecting failed.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The URL does not parse.
    #[error(transparent)]
    Url(#[from] pg::UrlError),
    /// Connecting or authenticating failed.
    #[error("cannot connect to PostgreSQL at {target}: {}{}", pg::explain(.source), stack_hint(.source))]
    Connect {
        /// Host and port tried, without credentials.
        target: String,
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// Building the pool failed.
    #[error("cannot build the connection pool: {0}")]
    Pool(#[from] deadpool_postgres::BuildError),
}

fn stack_hint(error: &tokio_postgres::Error) -> &'static str {
    let refused = std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<std::io::Error>())
        .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
    if refused {
        ". Is the stack up (`deploy/stack status`)?"
    } else {
        ""
    }
}

/// Opens one connection and drives it on a background task.
pub async fn connect(url: &str, application_name: &str) -> Result<Client, DbError> {
    let config = pg::config(url, application_name)?;
    pg::connect(&config)
        .await
        .map_err(|source| DbError::Connect {
            target: pg::target(&config),
            source,
        })
}

/// Builds a pool of at most `max_size` connections.
pub fn pool(url: &str, application_name: &str, max_size: usize) -> Result<Pool, DbError> {
    pool_of(pg::config(url, application_name)?, max_size)
}

/// Builds the pool of a service that answers people: a statement waits at most
/// `lock_timeout` for a lock (a row a reassignment page or a forgotten session holds), then
/// the command fails as a conflict to retry instead of hanging (SQLSTATE 55P03).
pub fn command_pool(
    url: &str,
    application_name: &str,
    max_size: usize,
    lock_timeout: std::time::Duration,
) -> Result<Pool, DbError> {
    let mut settings = pg::config(url, application_name)?;
    let setting = format!("-c lock_timeout={}", lock_timeout.as_millis().max(1));
    let config = &mut settings.sql;
    let options = match config.get_options() {
        Some(existing) if !existing.trim().is_empty() => format!("{existing} {setting}"),
        _ => setting,
    };
    config.options(&options);
    pool_of(settings, max_size)
}

fn pool_of(settings: pg::Settings, max_size: usize) -> Result<Pool, DbError> {
    if let Some(weakness) = settings.weakness() {
        tracing::warn!("{weakness}");
    }
    let connector = settings.connector();
    let manager = Manager::from_config(
        settings.sql,
        connector,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Ok(Pool::builder(manager).max_size(max_size).build()?)
}

/// A database error with what an operator needs to find its cause: the SQLSTATE, the
/// server's message, and the constraint, table and column it names. The driver's own
/// `Display` says only "db error".
pub fn describe(error: &tokio_postgres::Error) -> String {
    let Some(db) = error.as_db_error() else {
        return error.to_string();
    };
    let mut text = format!("{} (SQLSTATE {})", db.message(), db.code().code());
    for (name, value) in [
        ("constraint", db.constraint()),
        ("table", db.table()),
        ("column", db.column()),
    ] {
        if let Some(value) = value {
            text.push_str(&format!(", {name} {value}"));
        }
    }
    text
}

/// Statements prepared once per connection and reused: one round trip per execution
/// instead of two. Everything on the hot path goes through these.
pub mod cached {
    use deadpool_postgres::GenericClient;
    use tokio_postgres::types::ToSql;
    use tokio_postgres::{Error, Row};

    /// Runs a cached statement and returns its rows.
    pub async fn query(
        client: &impl GenericClient,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Error> {
        let statement = client.prepare_cached(sql).await?;
        client.query(&statement, params).await
    }

    /// Runs a cached statement that returns at most one row.
    pub async fn query_opt(
        client: &impl GenericClient,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Error> {
        let statement = client.prepare_cached(sql).await?;
        client.query_opt(&statement, params).await
    }

    /// Runs a cached statement that returns exactly one row.
    pub async fn query_one(
        client: &impl GenericClient,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, Error> {
        let statement = client.prepare_cached(sql).await?;
        client.query_one(&statement, params).await
    }

    /// Runs a cached statement and returns the number of rows it changed.
    pub async fn execute(
        client: &impl GenericClient,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, Error> {
        let statement = client.prepare_cached(sql).await?;
        client.execute(&statement, params).await
    }
}
