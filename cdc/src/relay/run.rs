//! The relay's run: the process, its sessions and what runs beside them. [`run`]
//! reconnects with backoff; each connection is a session, set up by [`super::setup`] the
//! same way for both modes and streamed by the configured delivery ([`super::at_least_once`],
//! [`super::exactly_once`]), watched by [`super::health`], with [`super::lag_report`]
//! writing its lag, [`super::partitions`] reading the event topics' partition counts, and a
//! republisher serving parked messages writers asked for. What ends a
//! session is retried unless it needs an operator ([`super::should_retry`]). (Issue 58,
//! item 2: this was the relay's `mod.rs`, both the top of its folder and the floor the
//! rooms below import from; `mod.rs` now holds only what they share.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{Instrument, error, info, info_span, warn};

use super::{
    RelayError, at_least_once, connect, exactly_once, gate, health, lag_report, partitions,
    schema_ids, setup, should_retry,
};
use crate::config::{DeliveryMode, RelayConfig};
use crate::history::Identity;
use crate::infra::entry::Entry;
use crate::metrics::RelayMetrics;

/// Runs the relay until `shutdown` is cancelled or a definite error, reconnecting with
/// backoff after transient ones. First, once, the schema of every topic framed for
/// registries is registered ([`crate::registry`]); a registry that does not answer, or
/// refuses it, stops the relay before it reads anything.
pub async fn run(
    config: RelayConfig,
    metrics: Arc<RelayMetrics>,
    shutdown: CancellationToken,
) -> Result<(), RelayError> {
    let span = info_span!("relay", slot = %config.slot);
    async move {
        let registered = async {
            let registered = crate::registry::register_topics(config.clone()).await?;
            schema_ids::check_until(&registered, &shutdown).await?;
            Ok::<_, RelayError>(registered)
        };
        let config = match registered.await {
            Ok(registered) => registered,
            Err(error) => {
                error!(%error, "relay stopped");
                // An incompatible schema stays so until an operator acts: the verdict says
                // so, as for any refusal. A registry that does not answer yet is not one.
                if !should_retry(&error) {
                    lag_report::refused(&config, &error).await;
                }
                return Err(error);
            }
        };
        if shutdown.is_cancelled() {
            return Ok(());
        }
        let mut backoff = Duration::from_millis(100);
        let max_backoff = Duration::from_millis(config.reconnect_backoff_max_ms);
        // The server the sessions of this process streamed from: a reconnect that reaches
        // an older timeline (an old primary back) or another cluster is refused.
        let mut known: Option<Identity> = None;
        loop {
            metrics.session_started();
            let started = Instant::now();
            // Beside the stream: the parked messages writers asked to publish again.
            let requests = shutdown.child_token();
            let republisher = tokio::spawn(republish_requests(config.clone(), requests.clone()));
            // And its lag, for the service and the console.
            let reporter = tokio::spawn(lag_report::run(
                config.clone(),
                Arc::clone(&metrics),
                requests.clone(),
            ));
            // And the event topics' partition counts.
            let partitions = tokio::spawn(partitions::watch(
                config.clone(),
                Arc::clone(&metrics),
                requests.clone(),
            ));
            let outcome = session(&config, &metrics, &shutdown, &mut known, &requests).await;
            requests.cancel();
            let _ = republisher.await;
            let _ = reporter.await;
            let _ = partitions.await;
            metrics.set_streaming(false);
            match outcome {
                Ok(()) => return Ok(()),
                Err(error) if !should_retry(&error) => {
                    error!(%error, "relay stopped");
                    lag_report::refused(&config, &error).await;
                    return Err(error);
                }
                Err(error @ RelayError::SlotBusy { .. }) => info!(%error, "slot busy"),
                Err(error) => {
                    warn!(%error, retry_in = ?backoff, "relay session ended; reconnecting")
                }
            }
            if started.elapsed() > Duration::from_secs(30) {
                backoff = Duration::from_millis(100);
            }
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(()),
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(max_backoff);
        }
    }
    .instrument(span)
    .await
}

/// One session: set up on the primary, watched by [`health`] while it streams in the
/// configured mode. The watch may end it (cleanly, as a shutdown would) when the standby
/// gate's decision changes how it may stream ([`gate::Gate::ended_by`]); it ends then with
/// that change as its error, retried.
async fn session(
    config: &RelayConfig,
    metrics: &Arc<RelayMetrics>,
    shutdown: &CancellationToken,
    known: &mut Option<Identity>,
    stop_watch: &CancellationToken,
) -> Result<(), RelayError> {
    let application_name = format!("ledger-relay:{}", config.slot);
    let opened = match setup::open(config, &application_name).await {
        Ok(opened) => opened,
        Err(error) => {
            if let RelayError::Gate(held) = &error {
                // No session, so no health check: the gauges say it here.
                metrics.set_gate(true, held.missing());
                metrics.set_without_standby(false);
            }
            return Err(error);
        }
    };
    if let Some(earlier) = known.as_ref() {
        crate::history::follows(earlier, &opened.server.identity)?;
    }
    *known = Some(opened.server.identity.clone());
    metrics.set_timeline(opened.server.identity.timeline);
    metrics.set_without_standby(opened.gate == Some(gate::Gate::WithoutStandby));
    let end = shutdown.child_token();
    let watch = tokio::spawn(health::watch(
        config.clone(),
        health::Watched {
            primary: opened.primary.clone(),
            standbys: opened.standbys.clone(),
            gate: opened.gate,
        },
        Arc::clone(metrics),
        stop_watch.clone(),
        end.clone(),
    ));
    let outcome = match config.delivery {
        DeliveryMode::AtLeastOnce => at_least_once::run(config, metrics, &end, opened).await,
        DeliveryMode::ExactlyOnce => exactly_once::run(config, metrics, &end, opened).await,
    };
    if shutdown.is_cancelled() || !end.is_cancelled() {
        return outcome;
    }
    // The watch ended the session, and returns why.
    outcome?;
    match watch.await {
        Ok(Some(change)) => Err(change.into()),
        // Only the watch cancels `end` but a shutdown, and it says why when it does.
        Ok(None) => Err(RelayError::Catalog(
            "the health watch ended the session without a reason".into(),
        )),
        Err(failed) => Err(RelayError::Catalog(format!(
            "the health watch failed: {failed}"
        ))),
    }
}

/// How often the relay looks for parked messages a writer asked to publish again.
const REPUBLISH_POLL: Duration = Duration::from_secs(2);

/// Publishes requested parked messages (see [`crate::parking::republish_requested`]) every
/// [`REPUBLISH_POLL`] until `stop`; errors are logged and retried at the next poll.
async fn republish_requests(config: RelayConfig, stop: CancellationToken) {
    let mut connection = None;
    let producer = match crate::publish::producer(&config) {
        Ok(producer) => producer,
        Err(error) => {
            warn!(%error, "no producer for parked republish requests");
            return;
        }
    };
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = tokio::time::sleep(REPUBLISH_POLL) => {}
        }
        if connection.is_none() {
            connection = connect::connect_sql(&config, "ra-ledger-relay-republish")
                .await
                .map_err(|error| warn!(%error, "cannot connect for parked republish requests"))
                .ok();
        }
        let Some(client) = connection.as_mut() else {
            continue;
        };
        match crate::parking::republish_requested(client, &producer).await {
            Ok(outcomes) => {
                for outcome in outcomes {
                    match outcome {
                        crate::parking::Republished::Sent { id } => {
                            info!(id, "parked message republished on request")
                        }
                        crate::parking::Republished::Refused { id, error } => {
                            warn!(id, %error, "parked message still refused; request cleared")
                        }
                    }
                }
            }
            Err(error) => {
                warn!(%error, "parked republish requests failed; reconnecting");
                connection = None;
            }
        }
    }
}

/// Runs the relay as a process does: `/metrics` on the configured address, SIGTERM or
/// Ctrl-C starts a clean shutdown. `ledger relay` is this.
#[inline(never)]
pub fn run_process(config: RelayConfig) -> Entry<'static, Result<(), RelayError>> {
    Box::pin(run_process_inner(config))
}

async fn run_process_inner(config: RelayConfig) -> Result<(), RelayError> {
    if let Some(weakness) = config.kafka_settings().weakness() {
        tracing::warn!("{weakness}");
    }
    let metrics = Arc::new(RelayMetrics::default());
    let rendered = Arc::clone(&metrics);
    crate::infra::runtime::run_process(
        config.metrics_listen,
        move || rendered.render(),
        |shutdown| run(config, metrics, shutdown),
    )
    .await
}
