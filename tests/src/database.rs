//! A fresh database per test, with the ledger's migrations applied: a
//! [`ra_ledger_testing::ScratchDatabase`] on the run's PostgreSQL, dropped with the value.

use anyhow::Context;
use ra_ledger_cdc::infra::pg::ReplicationTarget;
use ra_ledger_testing::ScratchDatabase;
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

    /// The rows in the ledger's tables that a write changes: what a refused command or a
    /// bad request must leave as it was.
    pub async fn counts(&self) -> anyhow::Result<Counts> {
        let row = self
            .connect()
            .await?
            .query_one(
                "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM outbox), \
                        (SELECT count(*) FROM contacts), (SELECT count(*) FROM assignments), \
                        (SELECT count(*) FROM reassignment_runs)",
                &[],
            )
            .await?;
        Ok(Counts {
            events: row.get(0),
            outbox: row.get(1),
            contacts: row.get(2),
            assignments: row.get(3),
            reassignment_runs: row.get(4),
        })
    }

    /// The parts pgwire-replication needs to open a replication connection.
    pub fn replication_target(&self) -> anyhow::Result<ReplicationTarget> {
        let config = ra_ledger_cdc::infra::pg::config(&self.url, "test-replication")?;
        Ok(ReplicationTarget::of(&config))
    }
}

/// Rows in the ledger's tables ([`TestDatabase::counts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Events.
    pub events: i64,
    /// Outbox rows.
    pub outbox: i64,
    /// Contacts.
    pub contacts: i64,
    /// Assignments.
    pub assignments: i64,
    /// Reassignment runs.
    pub reassignment_runs: i64,
}

impl Counts {
    /// Events, outbox rows, contacts and assignments, in that order.
    pub fn ledger(self) -> [i64; 4] {
        [self.events, self.outbox, self.contacts, self.assignments]
    }
}

impl std::ops::Index<usize> for Counts {
    type Output = i64;

    /// The counts in the order of [`Counts`]'s fields: events 0, outbox rows 1, contacts 2,
    /// assignments 3, reassignment runs 4.
    fn index(&self, table: usize) -> &i64 {
        match table {
            0 => &self.events,
            1 => &self.outbox,
            2 => &self.contacts,
            3 => &self.assignments,
            4 => &self.reassignment_runs,
            _ => panic!("no table {table} in the counts"),
        }
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
