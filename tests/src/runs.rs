//! Driving reassignment runs in tests without a broker: the chain followed in this process,
//! page request by page request, and the helpers that pin a race down (lock waiters).

use std::time::Duration;

use ra_ledger::reassign::{self, PageOutcome, PageRequest, RunState, RunStatus};
use ra_ledger_cdc::consumer;
use tokio_postgres::Client;
use uuid::Uuid;

use crate::TestDatabase;

/// A count from `sql`.
pub async fn count(
    client: &Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> i64 {
    client
        .query_one(sql, params)
        .await
        .expect("a count query")
        .get(0)
}

/// Sessions of the test's database waiting for a lock.
pub async fn lock_waiters(client: &Client) -> i64 {
    count(
        client,
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock'",
        &[],
    )
    .await
}

/// Waits until `n` sessions wait for a lock; panics with `why` after 10 s.
pub async fn lock_waiters_reach(client: &Client, n: i64, why: &str) {
    for _ in 0..200 {
        if lock_waiters(client).await >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{why}: {n} lock waiter(s) never showed up");
}

/// Every page request of a run, in order, as the worker would decode them from Kafka.
pub async fn page_requests(client: &Client, run_id: Uuid) -> anyhow::Result<Vec<PageRequest>> {
    let rows = client
        .query(
            "SELECT payload FROM events WHERE stream = $1 AND event_type = 'ReassignmentPageRequested' \
             ORDER BY stream_version",
            &[&format!("reassignment-{run_id}")],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let envelope = consumer::decode(row.get::<_, &[u8]>(0))?;
            Ok(PageRequest::from_envelope(&envelope)
                .map_err(anyhow::Error::msg)?
                .expect("a page request"))
        })
        .collect()
}

/// Follows a run's chain in this process as a worker that never crashes would: handles the
/// newest page request until the run completes (failed attempts are retried, as the worker
/// does). Returns the final status.
pub async fn follow_chain(database: &TestDatabase, run_id: Uuid) -> anyhow::Result<RunStatus> {
    let pool = ra_ledger::db::pool(&database.url, "follow-chain", 2)?;
    let client = database.connect().await?;
    let reader = pool.get().await?;
    for _ in 0..10_000 {
        let status = reassign::status(&reader, run_id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("run {run_id} not found"))?;
        if status.status == RunState::Completed {
            return Ok(status);
        }
        let next = page_requests(&client, run_id)
            .await?
            .pop()
            .ok_or_else(|| anyhow::anyhow!("run {run_id} has no page request"))?;
        match reassign::handle(&pool, &next, reassign::DEFAULT_MAX_ATTEMPTS).await {
            Ok(PageOutcome::Processed(_)) => {}
            Ok(other) => {
                anyhow::bail!("the newest request of run {run_id} was not processed: {other:?}")
            }
            Err(error) => {
                eprintln!("page failed, retrying: {error}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    anyhow::bail!("run {run_id} did not complete")
}
