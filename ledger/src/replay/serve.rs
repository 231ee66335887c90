//! The worker-side host of replays: `ledger worker` runs every requested or unfinished
//! replay, one at a time, beside its pages.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use ra_ledger_cdc::infra::kafka::KafkaSettings;
use ra_ledger_cdc::registry::SchemaRegistry;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use uuid::Uuid;

use super::run::{Outcome, RunError, run};
use crate::metrics::ReplayMetrics;

/// Runs requested and unfinished replays, one at a time, until `shutdown` (in `ledger
/// worker`). A replay another process runs is left to it; one whose runner died is resumed
/// from its checkpoint.
pub async fn serve(
    pool: Pool,
    kafka: KafkaSettings,
    registry: Option<SchemaRegistry>,
    metrics: Arc<ReplayMetrics>,
    poll: Duration,
    shutdown: CancellationToken,
) {
    loop {
        match next_round(&pool, &kafka, registry.as_ref(), &metrics, &shutdown).await {
            Ok(()) => {}
            Err(error) => warn!(%error, "replays: will retry"),
        }
        tokio::select! {
            () = tokio::time::sleep(poll) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

async fn next_round(
    pool: &Pool,
    kafka: &KafkaSettings,
    registry: Option<&SchemaRegistry>,
    metrics: &ReplayMetrics,
    shutdown: &CancellationToken,
) -> Result<(), RunError> {
    let ids: Vec<Uuid> = pool
        .get()
        .await?
        .query(include_str!("../sql/replay/unfinished.sql"), &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    for id in ids {
        if shutdown.is_cancelled() {
            return Ok(());
        }
        match run(pool, kafka, registry, id, metrics, shutdown, &mut |_| {}).await {
            Ok(Outcome::Busy | Outcome::AlreadyEnded(_)) => {}
            Ok(outcome) => info!(replay = %id, ?outcome, "replay run ended"),
            Err(error) => {
                warn!(replay = %id, %error, "replay run failed; resumes from its checkpoint")
            }
        }
    }
    Ok(())
}
