//! `ledger grant`: least-privilege roles. Run as the owner role (the one `ledger migrate`
//! runs as), after migrating; the roles themselves (LOGIN, and REPLICATION for the relay)
//! are created by the operator.

use ra_ledger::{db, migrate};

#[derive(Debug, clap::Subcommand)]
pub enum GrantCommand {
    /// The role of `ledger serve` and `ledger worker`: reads; appends events and outbox rows;
    /// maintains projections, runs and outbox retention. Never UPDATE, DELETE or TRUNCATE on
    /// events, no DDL, owns nothing.
    App {
        /// The role (LOGIN).
        role: String,
    },
    /// The role of `ledger relay` (LOGIN REPLICATION): reads the outbox, writes
    /// outbox_parked, nothing else.
    Relay {
        /// The role (LOGIN REPLICATION).
        role: String,
    },
}

pub async fn run(database_url: &str, command: GrantCommand) -> anyhow::Result<()> {
    let client = db::connect(database_url, "ledger-grant").await?;
    let pending = migrate::pending(&client).await?;
    anyhow::ensure!(
        pending.is_empty(),
        "migrations {pending:?} are pending: run `ledger migrate` first, so the grants cover every table"
    );
    let describe = |error: tokio_postgres::Error| anyhow::anyhow!(db::describe(&error));
    match command {
        GrantCommand::App { role } => {
            migrate::grant_app_role(&client, &role)
                .await
                .map_err(describe)?;
            outln!(
                "granted {role}: SELECT on every table; INSERT on events and outbox; \
                 INSERT, UPDATE on projections and runs; DELETE on published outbox rows"
            );
        }
        GrantCommand::Relay { role } => {
            migrate::grant_relay_role(&client, &role)
                .await
                .map_err(describe)?;
            outln!(
                "granted {role}: SELECT on outbox; SELECT, INSERT, UPDATE on outbox_parked; SELECT, INSERT and UPDATE of its registration's columns on relay_slots; SELECT, INSERT, UPDATE on relay_lag_reports"
            );
        }
    }
    Ok(())
}
