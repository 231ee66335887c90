//! Waiting for the transactions older than now to end, so that a snapshot taken next sees
//! each of them that committed. The replay's handoff (after reading the live end offsets)
//! and the digest builder (after reading its time) both need it: whatever was decided
//! before the instant they read must be in the snapshot they take after it.
//!
//! The fence is a fresh transaction id `y`, taken in a transaction of its own after that
//! instant. PostgreSQL hands out transaction ids in order (under `XidGenLock`), so a
//! transaction whose id is below `y` was given it before `y` was. Once no transaction
//! below `y` is in progress, each of them has committed or rolled back, and a snapshot
//! taken afterwards sees every one that committed. A transaction that holds no id yet is
//! not waited for: a writer that must be waited for takes its id first (see
//! `sql/stream_heads.sql`).

use std::time::{Duration, Instant};

use deadpool_postgres::GenericClient;

/// How often the transactions in progress are looked at while waiting.
const POLL: Duration = Duration::from_millis(10);

/// Why the wait ended without the older transactions ending.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// A statement failed.
    #[error("waiting for older transactions: {}", crate::db::describe(.0))]
    Database(#[from] tokio_postgres::Error),
    /// Some were still in progress when the wait's bound ran out.
    #[error("transactions older than the fence are still open after {waited:?}: {open}")]
    StillOpen {
        /// How long it waited.
        waited: Duration,
        /// The transactions still open, with the sessions running them, e.g. `xid 1234
        /// (pid 5678)`: for the log, where an operator can find the sessions.
        open: String,
    },
}

/// Takes a fresh transaction id, then waits until no transaction with a lower id is in
/// progress, at most `limit` (the error names those still open).
pub async fn wait_for_older(client: &impl GenericClient, limit: Duration) -> Result<(), WaitError> {
    let fence: String = client
        .query_one("SELECT pg_current_xact_id()::text", &[])
        .await?
        .get(0);
    let waiting_since = Instant::now();
    loop {
        let older = client
            .query(include_str!("sql/older_in_progress.sql"), &[&fence])
            .await?;
        if older.is_empty() {
            return Ok(());
        }
        if waiting_since.elapsed() > limit {
            let named: Vec<String> = older
                .iter()
                .map(|row| {
                    let xid: String = row.get("xid");
                    let pids: Option<String> = row.get("pids");
                    format!("xid {xid} (pid {})", pids.as_deref().unwrap_or("?"))
                })
                .collect();
            return Err(WaitError::StillOpen {
                waited: limit,
                open: named.join(", "),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}
