//! The write path every command shares: events and their outbox rows appended and folded
//! into the projections in the caller's transaction, and a command's whole transaction run
//! again when PostgreSQL chose it as the victim of a deadlock.
//!
//! Locks are taken in one order everywhere, so deadlocks are rare rather than routine:
//! 1. the jurisdiction's primary-contact advisory lock (shared by assign, replace, run
//!    starts and pages; exclusive by contact creation and supersede);
//! 2. a reassignment run's row;
//! 3. assignment rows, in `assignment_id` order;
//! 4. the streams' versions, by inserting events (`UNIQUE (stream, stream_version)`).
//!
//! The transaction time is read after the locks (see [`store::read_heads`]).

use std::marker::PhantomData;
use std::time::Duration;

use futures::future::BoxFuture;

use deadpool_postgres::{GenericClient, Pool, Transaction};
use ra_ledger_proto::v1;

use crate::error::CommandError;
use crate::projections;
use crate::store::{self, Heads, Metadata, RecordedEvent, StreamAppend};

/// Attempts of a command whose transaction keeps losing deadlocks or serialization
/// failures; then the client gets a 409 and may try again.
pub const ATTEMPTS: u32 = 3;

/// Appends `appends` on top of `heads`, at their time, and folds the events into the
/// projections, all in the caller's transaction; on any error the transaction rolls back
/// when dropped.
pub async fn record(
    client: &impl GenericClient,
    appends: &[StreamAppend],
    heads: &Heads,
    metadata: &Metadata,
) -> Result<Vec<RecordedEvent>, CommandError> {
    let recorded = store::append_at(client, appends, heads, metadata).await?;
    let envelopes: Vec<&v1::Envelope> = recorded.iter().map(|event| &event.envelope).collect();
    projections::apply_batch(client, &envelopes).await?;
    Ok(recorded)
}

/// What a command's closure gets besides its transaction: nothing at run time. Its type
/// tells the compiler that the transaction's borrow `'t` ends before the borrows `'env` the
/// command captures, so the command's boxed future may hold both. (A plain async closure
/// would do, but rustc cannot yet prove its future `Send` for every lifetime, which axum's
/// handlers need.)
pub(crate) type Scope<'t, 'env> = PhantomData<&'t &'env ()>;

/// A command's work in its transaction.
pub(crate) type Work<'t, T> = BoxFuture<'t, Result<T, CommandError>>;

/// Runs commands against the ledger database: the commands themselves are in
/// the commands module; this is the skeleton they share.
#[derive(Debug, Clone)]
pub struct Ledger {
    pool: Pool,
}

impl Ledger {
    /// A ledger on `pool`.
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }

    /// The pool, for queries.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Runs `command` in a transaction of its own and commits it: the skeleton every
    /// command shares. The command takes its locks, reads, appends with [`record`] and reads
    /// back; on any error the transaction rolls back. A command PostgreSQL aborted to break
    /// a deadlock (or a serialization failure) runs again from the start, up to
    /// [`ATTEMPTS`] times in all, then answers a conflict.
    pub(crate) async fn write<'env, T>(
        &self,
        mut command: impl for<'t> FnMut(&'t Transaction<'t>, Scope<'t, 'env>) -> Work<'t, T>,
    ) -> Result<T, CommandError> {
        let mut attempts = 1;
        loop {
            let outcome: Result<T, CommandError> = async {
                let mut client = self.pool().get().await?;
                let tx = client.transaction().await?;
                let value = command(&tx, PhantomData).await?;
                tx.commit().await?;
                Ok(value)
            }
            .await;
            match outcome {
                Err(error) if error.is_transient() && attempts < ATTEMPTS => {
                    tracing::info!(%error, attempt = attempts,
                        "transaction lost to a concurrent one; retrying");
                    tokio::time::sleep(Duration::from_millis(10 * u64::from(attempts))).await;
                    attempts += 1;
                }
                Err(error) if error.is_transient() => {
                    return Err(CommandError::Conflict(format!(
                        "concurrent changes to the same rows kept aborting this command \
                         ({ATTEMPTS} attempts; last: {error}); retry"
                    )));
                }
                outcome => return outcome,
            }
        }
    }
}
