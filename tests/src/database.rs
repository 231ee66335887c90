//! A fresh database per test, with the ledger's migrations applied.

use std::time::Duration;

use anyhow::Context;
use tokio_postgres::{Client, NoTls};

use crate::stack::stack;

/// A database of its own for one test, dropped (with its replication slots) when the value
/// is dropped.
#[derive(Debug)]
pub struct TestDatabase {
    /// Database name (`t_` and a random suffix).
    pub name: String,
    /// URL of the database, as the server's admin role.
    pub url: String,
    admin_url: String,
}

impl TestDatabase {
    /// Creates a database and applies the ledger's migrations to it.
    pub async fn new() -> anyhow::Result<Self> {
        let database = Self::unmigrated().await?;
        let mut client = database.connect().await?;
        ra_ledger::migrate::run(&mut client).await?;
        Ok(database)
    }

    /// Creates a migrated database on another server (e.g. a private one a test restarts).
    pub async fn on(admin_url: &str) -> anyhow::Result<Self> {
        let database = Self::create(admin_url).await?;
        let mut client = database.connect().await?;
        ra_ledger::migrate::run(&mut client).await?;
        Ok(database)
    }

    /// Creates an empty database, without migrations.
    pub async fn unmigrated() -> anyhow::Result<Self> {
        Self::create(&stack().admin_url).await
    }

    async fn create(admin_url: &str) -> anyhow::Result<Self> {
        let name = format!("t_{}", crate::random_suffix());
        let admin = connect(admin_url).await?;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .with_context(|| format!("creating database {name}"))?;
        let url = ra_ledger::db::with_database(admin_url, &name);
        Ok(Self {
            name,
            url,
            admin_url: admin_url.to_owned(),
        })
    }

    /// A new connection to this database.
    pub async fn connect(&self) -> anyhow::Result<Client> {
        connect(&self.url).await
    }

    /// The parts pgwire-replication needs to open a replication connection.
    pub fn replication_target(&self) -> anyhow::Result<ReplicationTarget> {
        let config: tokio_postgres::Config = self.url.parse()?;
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
            _ => anyhow::bail!("the test database must be reached over TCP"),
        };
        Ok(ReplicationTarget {
            host,
            port: config.get_ports().first().copied().unwrap_or(5432),
            user: config.get_user().unwrap_or("postgres").to_owned(),
            password: config
                .get_password()
                .map(|password| String::from_utf8_lossy(password).into_owned())
                .unwrap_or_default(),
            database: self.name.clone(),
        })
    }
}

/// Where to open a replication connection.
#[derive(Debug, Clone)]
pub struct ReplicationTarget {
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Role.
    pub user: String,
    /// Password.
    pub password: String,
    /// Database.
    pub database: String,
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // Drop runs outside any runtime we may block on: clean up on a thread of its own.
        let name = self.name.clone();
        let admin_url = self.admin_url.clone();
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("building a cleanup runtime");
            runtime.block_on(drop_database(&admin_url, &name))
        });
        match cleanup.join() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => eprintln!("warning: could not drop test database: {error:#}"),
            Err(_) => eprintln!("warning: dropping a test database panicked"),
        }
    }
}

async fn drop_database(admin_url: &str, name: &str) -> anyhow::Result<()> {
    let admin = connect(admin_url).await?;
    // A database with replication slots cannot be dropped, not even WITH (FORCE).
    for _ in 0..50 {
        admin
            .execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots \
                 WHERE database = $1 AND active_pid IS NOT NULL",
                &[&name],
            )
            .await?;
        let dropped = admin
            .query(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
                 WHERE database = $1 AND NOT active",
                &[&name],
            )
            .await;
        let remaining: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE database = $1",
                &[&name],
            )
            .await?
            .get(0);
        if dropped.is_ok() && remaining == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await
        .with_context(|| format!("dropping database {name}"))?;
    Ok(())
}

/// Connects to `url`, driving the connection on a background task.
pub async fn connect(url: &str) -> anyhow::Result<Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .with_context(|| "connecting to the test PostgreSQL".to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}
