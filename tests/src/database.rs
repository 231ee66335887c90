//! A fresh database per test, with the ledger's migrations applied: a
//! [`ra_ledger::testing::ScratchDatabase`] on the run's PostgreSQL, dropped with the value.

use anyhow::Context;
use ra_ledger::testing::ScratchDatabase;
use ra_ledger_cdc::infra::pg::ReplicationTarget;
use tokio_postgres::Client;

use crate::stack::stack;

/// Prefix of the test databases' names.
const PREFIX: &str = "t";

/// A database of its own for one test, dropped (with its replication slots) when the value
/// is dropped.
#[derive(Debug)]
pub struct TestDatabase {
    /// Database name (`t_` and a random suffix).
    pub name: String,
    /// URL of the database, as the server's admin role.
    pub url: String,
    scratch: Option<ScratchDatabase>,
}

impl TestDatabase {
    /// Creates a database and applies the ledger's migrations to it.
    pub async fn new() -> anyhow::Result<Self> {
        Self::on(&stack().admin_url).await
    }

    /// Creates a migrated database on another server (e.g. a private one a test restarts).
    pub async fn on(admin_url: &str) -> anyhow::Result<Self> {
        Ok(Self::from(
            ScratchDatabase::create(admin_url, PREFIX).await?,
        ))
    }

    /// Creates an empty database, without migrations.
    pub async fn unmigrated() -> anyhow::Result<Self> {
        let scratch = ScratchDatabase::create_empty(&stack().admin_url, PREFIX).await?;
        Ok(Self::from(scratch))
    }

    /// A new connection to this database.
    pub async fn connect(&self) -> anyhow::Result<Client> {
        connect(&self.url).await
    }

    /// The parts pgwire-replication needs to open a replication connection.
    pub fn replication_target(&self) -> anyhow::Result<ReplicationTarget> {
        let config = ra_ledger_cdc::infra::pg::config(&self.url, "test-replication")?;
        Ok(ReplicationTarget::of(&config))
    }
}

impl From<ScratchDatabase> for TestDatabase {
    fn from(scratch: ScratchDatabase) -> Self {
        Self {
            name: scratch.name.clone(),
            url: scratch.url.clone(),
            scratch: Some(scratch),
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let Some(scratch) = self.scratch.take() else {
            return;
        };
        // Drop runs outside any runtime we may block on: clean up on a thread of its own.
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("building a cleanup runtime");
            runtime.block_on(scratch.drop())
        });
        match cleanup.join() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => eprintln!("warning: could not drop test database: {error:#}"),
            Err(_) => eprintln!("warning: dropping a test database panicked"),
        }
    }
}

/// Connects to `url`, driving the connection on a background task.
pub async fn connect(url: &str) -> anyhow::Result<Client> {
    let settings = ra_ledger_cdc::infra::pg::config(url, "ledger-tests")?;
    let (client, connection) = settings
        .sql
        .connect(settings.connector())
        .await
        .map_err(|error| anyhow::anyhow!(ra_ledger_cdc::infra::pg::explain(&error)))
        .context("connecting to the test PostgreSQL")?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}
