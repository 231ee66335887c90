//! Process signals.

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Cancels `token` on SIGTERM or Ctrl-C.
pub fn cancel_on_signal(token: CancellationToken) {
    tokio::spawn(async move {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(terminate) => terminate,
                Err(error) => {
                    warn!(%error, "cannot listen for SIGTERM");
                    return;
                }
            };
        tokio::select! {
            _ = terminate.recv() => info!("SIGTERM: stopping"),
            _ = tokio::signal::ctrl_c() => info!("Ctrl-C: stopping"),
            _ = token.cancelled() => {}
        }
        token.cancel();
    });
}
