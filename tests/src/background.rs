//! A service (relay, worker) running as a task of the test's runtime.

use std::future::Future;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A service task with its metrics and a clean-shutdown switch.
#[derive(Debug)]
pub struct Background<M, E> {
    /// Its metrics.
    pub metrics: Arc<M>,
    /// Cancel for a clean shutdown.
    pub shutdown: CancellationToken,
    /// The task.
    pub task: JoinHandle<Result<(), E>>,
}

impl<M: Default, E: Send + 'static> Background<M, E> {
    /// Spawns `run(metrics, shutdown)`.
    pub fn spawn<F>(run: impl FnOnce(Arc<M>, CancellationToken) -> F) -> Self
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
    {
        let metrics = Arc::new(M::default());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(Arc::clone(&metrics), shutdown.clone()));
        Self {
            metrics,
            shutdown,
            task,
        }
    }
}

impl<M, E: std::error::Error + Send + Sync + 'static> Background<M, E> {
    /// Clean shutdown; returns the service's result.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.task.await??;
        Ok(())
    }
}
