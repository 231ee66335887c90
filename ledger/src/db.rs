//! Connections to PostgreSQL: a pool for services, single clients for tools.

use std::str::FromStr;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::{Client, NoTls};

/// Why connecting failed.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The URL does not parse.
    #[error("invalid database URL: {0}")]
    Url(#[source] tokio_postgres::Error),
    /// Connecting or authenticating failed.
    #[error(
        "cannot connect to PostgreSQL at {target}: {source}. Is the stack up (`deploy/stack status`)?"
    )]
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

/// Parses `url` and sets `application_name`, so operators can find the connection in
/// `pg_stat_activity`.
pub fn config(url: &str, application_name: &str) -> Result<tokio_postgres::Config, DbError> {
    let mut config = tokio_postgres::Config::from_str(url).map_err(DbError::Url)?;
    config.application_name(application_name);
    Ok(config)
}

/// Describes where a config points, without the password.
pub fn target(config: &tokio_postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_default();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let dbname = config.get_dbname().unwrap_or_default();
    format!("{host}:{port}/{dbname}")
}

/// Opens one connection and drives it on a background task.
pub async fn connect(url: &str, application_name: &str) -> Result<Client, DbError> {
    let config = config(url, application_name)?;
    let (client, connection) = config
        .connect(NoTls)
        .await
        .map_err(|source| DbError::Connect {
            target: target(&config),
            source,
        })?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(%error, "PostgreSQL connection closed with an error");
        }
    });
    Ok(client)
}

/// Builds a pool of at most `max_size` connections.
pub fn pool(url: &str, application_name: &str, max_size: usize) -> Result<Pool, DbError> {
    pool_of(config(url, application_name)?, max_size)
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
    let mut config = config(url, application_name)?;
    let setting = format!("-c lock_timeout={}", lock_timeout.as_millis().max(1));
    let options = match config.get_options() {
        Some(existing) if !existing.trim().is_empty() => format!("{existing} {setting}"),
        _ => setting,
    };
    config.options(&options);
    pool_of(config, max_size)
}

fn pool_of(config: tokio_postgres::Config, max_size: usize) -> Result<Pool, DbError> {
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Ok(Pool::builder(manager).max_size(max_size).build()?)
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
    use super::with_database;

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
