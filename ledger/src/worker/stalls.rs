//! The stall healer: a run whose chain lost its page request gets it raised again.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::metrics::WorkerMetrics;
use crate::reassign;

/// Every few seconds: refreshes the runs-active and run-idle gauges, and raises again the page request of
/// every run that made no progress for `stall_after` (`None`: never). A chain whose request
/// was lost (a topic deleted, a partition nobody consumed) heals itself this way; the
/// cursor fence drops the request that was not lost, if it turns up.
pub(super) async fn watch_runs(
    pool: Pool,
    metrics: Arc<WorkerMetrics>,
    stall_after: Option<Duration>,
    shutdown: CancellationToken,
) {
    let every = stall_after.map_or(Duration::from_secs(5), |stall| {
        (stall / 4).clamp(Duration::from_millis(100), Duration::from_secs(5))
    });
    loop {
        if let Ok(client) = pool.get().await {
            if let Ok((count, idle)) = reassign::in_progress_summary(&client).await {
                metrics.runs_active.store(count, Ordering::Relaxed);
                metrics
                    .run_idle_millis
                    .store((idle * 1000.0) as i64, Ordering::Relaxed);
            }
            if let Some(stall_after) = stall_after {
                heal_stalled(&pool, &client, &metrics, stall_after).await;
            }
        }
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

/// Raises the page requests of stalled runs again (one worker per run does).
async fn heal_stalled(
    pool: &Pool,
    client: &deadpool_postgres::Object,
    metrics: &WorkerMetrics,
    stall_after: Duration,
) {
    let stalled = match reassign::stalled(client, stall_after).await {
        Ok(stalled) => stalled,
        Err(error) => {
            warn!(%error, "cannot look for stalled runs");
            return;
        }
    };
    for run_id in stalled {
        match reassign::reraise_stalled(pool, run_id, stall_after).await {
            Ok(Some(request)) => {
                metrics.stalls.fetch_add(1, Ordering::Relaxed);
                warn!(run = %run_id, page = request.page, stalled_for_s = stall_after.as_secs(),
                      "run made no progress; raised its page request again");
            }
            Ok(None) => {}
            Err(error) => warn!(run = %run_id, %error, "cannot raise a stalled run's page again"),
        }
    }
}
