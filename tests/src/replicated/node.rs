//! What the pair does to one of its servers: the settings every node has, making one a
//! standby of another, promoting it, and the waits and connections around that.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio_postgres::Client;

use super::{ReplicationOptions, SERVER_TIMEOUT};
use crate::database::connect;
use crate::postgres::PostgresServer;

/// The `postgresql.conf` lines of every node (why they are the same: [`crate::replicated`]).
pub(super) fn node_settings(options: &ReplicationOptions) -> String {
    let mut settings = String::from(
        "# The replicated harness's (tests/src/replicated/mod.rs), on every node.
# pg_rewind needs full page writes from its source, and hint bits in the WAL.
full_page_writes = on
wal_log_hints = on
# On a standby: copy the primary's failover slots, and keep the rows they need.
hot_standby = on
hot_standby_feedback = on
sync_replication_slots = on",
    );
    if options.synchronized_standby_slots {
        settings.push_str(&format!(
            "\n# On a primary: logical walsenders of failover slots wait for the standby.\n\
             synchronized_standby_slots = '{}'",
            options.physical_slot
        ));
    }
    settings
}

/// Makes `server` a standby of `primary` through `slot`: `standby.signal`, and its own
/// `primary_conninfo` and `primary_slot_name` in `postgresql.auto.conf` in place of any.
///
/// The `primary_conninfo` that `pg_basebackup -R` writes has no `dbname`, and slot sync
/// needs one: without it the standby only logs that it cannot sync. Being in
/// `postgresql.auto.conf`, it would override one in `postgresql.conf`.
pub(super) fn point_at(
    server: &PostgresServer,
    primary: &PostgresServer,
    slot: &str,
) -> anyhow::Result<()> {
    let auto_conf = server.data_dir.join("postgresql.auto.conf");
    let existing = std::fs::read_to_string(&auto_conf).unwrap_or_default();
    let mut lines: Vec<String> = existing
        .lines()
        .filter(|line| {
            let key = line.split('=').next().unwrap_or_default().trim();
            key != "primary_conninfo" && key != "primary_slot_name"
        })
        .map(str::to_owned)
        .collect();
    // Its port names the node in the primary's pg_stat_replication.
    lines.push(format!(
        "primary_conninfo = '{} application_name=node_{}'",
        primary.conninfo(),
        server.port
    ));
    lines.push(format!("primary_slot_name = '{slot}'"));
    server.write_data_file("postgresql.auto.conf", &(lines.join("\n") + "\n"))?;
    server.write_data_file("standby.signal", "")
}

/// Promotes `server` and waits until it accepts writes.
pub(super) async fn promote(server: &PostgresServer) -> anyhow::Result<()> {
    let client = admin(server).await?;
    let promoted: bool = client
        .query_one("SELECT pg_promote(true, 60)", &[])
        .await
        .context("promoting the standby")?
        .get(0);
    if !promoted {
        bail!(
            "the standby did not finish its promotion in 60 s; see {}",
            server.log_path().display()
        );
    }
    let deadline = Instant::now() + SERVER_TIMEOUT;
    loop {
        let writable: bool = client
            .query_one(
                "SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off'",
                &[],
            )
            .await?
            .get(0);
        if writable {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the promoted server accepts no writes after {SERVER_TIMEOUT:?}; see {}",
                server.log_path().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `standby` streams from its primary.
pub(super) async fn wait_streaming(standby: &PostgresServer) -> anyhow::Result<()> {
    let client = admin(standby).await?;
    let deadline = Instant::now() + SERVER_TIMEOUT;
    loop {
        let streaming = client
            .query_opt(
                "SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming'",
                &[],
            )
            .await?
            .is_some();
        if streaming {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the standby on port {} does not stream after {SERVER_TIMEOUT:?}; see {}",
                standby.port,
                standby.log_path().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Drops physical slot `slot` on `server` if it is there and unused (left by a standby
/// that is gone).
pub(super) async fn drop_physical_slot(server: &PostgresServer, slot: &str) -> anyhow::Result<()> {
    let client = admin(server).await?;
    let active: Option<bool> = client
        .query_opt(
            "SELECT active FROM pg_replication_slots WHERE slot_name = $1 AND slot_type = 'physical'",
            &[&slot],
        )
        .await?
        .map(|row| row.get(0));
    match active {
        None => Ok(()),
        Some(true) => bail!("physical slot {slot} on port {} is in use", server.port),
        Some(false) => {
            client
                .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
                .await
                .with_context(|| format!("dropping the leftover physical slot {slot}"))?;
            Ok(())
        }
    }
}

/// A superuser connection to `server`'s maintenance database.
pub(super) async fn admin(server: &PostgresServer) -> anyhow::Result<Client> {
    connect(&server.admin_url())
        .await
        .with_context(|| format!("connecting to the server on port {}", server.port))
}

/// Runs `work` (starting servers, base backups: seconds of blocking) off the runtime's
/// threads.
pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(work).await?
}
