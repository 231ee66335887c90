//! The relay: streams committed outbox rows from the logical replication slot to Kafka in
//! commit order, and confirms the slot's position only once Kafka has everything before
//! it. Two delivery modes (`delivery` in [`RelayConfig`]):
//!
//! - `at_least_once` (the default), an [`at_least_once`] delivery: an idempotent producer, the slot
//!   confirmed behind Kafka's acknowledgements and a position record of them
//!   ([`crate::position`]). After any crash it resumes from the slot: duplicates are
//!   possible, loss is not; consumers deduplicate on the event id.
//! - `exactly_once`, an [`exactly_once`] delivery: a transactional producer per slot, whole
//!   PostgreSQL transactions grouped into Kafka transactions that also carry
//!   the relay's position ([`crate::position`]), the slot confirmed after each commit. A
//!   `read_committed` consumer sees each event once, each PostgreSQL transaction whole.
//!   Its module doc holds the safety argument.
//!
//! Both run behind one WAL reader ([`reader`]): it decodes the stream, keeps what both
//! share (the producer's messages in flight, [`in_flight`], their bound and Kafka's
//! answers) and asks the mode's delivery only what differs.
//!
//! What else publishes stays at least once in both modes: republished parked messages
//! ([`republish_requests`], `ledger relay parked republish`), digests and replays have
//! their own producers, outside the relay's transactions; their consumers keep
//! deduplicating on the event id (docs/exactly-once.md).
//!
//! [`run`] reconnects with backoff; each connection is a session, set up by [`setup`] the
//! same way for both modes: on the primary, its identity read, the slot and the publication
//! checked ([`slot`], [`publication`], [`gate`]); while it streams, the reader checks the
//! publication again and confirms no further than those checks vouch for, and [`health`]
//! watches what could stall it in silence, and [`lag_report`] writes its lag where the
//! service reads it. What ends a session is retried unless it needs
//! an operator ([`should_retry`]): a lost slot, a publication that stopped carrying the
//! outbox, a position from another history, a configuration that cannot work.

mod at_least_once;
mod exactly_once;
pub mod gate;
mod health;
mod in_flight;
pub mod lag_report;
pub mod publication;
mod reader;
pub mod recover;
pub mod schema_ids;
mod setup;
pub mod slot;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pgwire_replication::PgWireError;
use rdkafka::error::KafkaError;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, error, info, info_span, warn};

use crate::config::{DeliveryMode, RelayConfig};
use crate::history::{HistoryError, Identity};
use crate::metrics::RelayMetrics;
use crate::outbox::{OutboxError, OutboxLayout};
use crate::pgoutput::{DecodeError, Relation};

/// Prefix of the relay's heartbeat messages in the WAL.
pub const HEARTBEAT_PREFIX: &str = "ra-ledger.heartbeat";

/// Why a session ended badly.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// PostgreSQL (SQL connection) failed.
    #[error("PostgreSQL: {}", crate::infra::pg::explain(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// The replication connection failed.
    #[error("replication stream: {0}")]
    Replication(#[from] PgWireError),
    /// Another session holds the slot (its process id from `pg_replication_slots`).
    #[error("slot {slot} is held by process {pid} (another relay?); waiting to take over")]
    SlotBusy {
        /// The slot.
        slot: String,
        /// The holder.
        pid: i32,
    },
    /// No host of the URL is a read-write primary.
    #[error(
        "no read-write primary to stream from ({target}); waiting for a promotion. List every server in the URL (postgres://u@a,b/db) so the relay finds the primary itself"
    )]
    NotPrimary {
        /// What each host was.
        target: String,
    },
    /// The slot cannot be streamed from.
    #[error("{0}")]
    Slot(#[from] slot::SlotError),
    /// The standby gate holds the relay before it streams: off, naming missing slots, or
    /// no standby with `without_standby = "hold"`.
    #[error("{0}")]
    Gate(#[from] gate::GateError),
    /// The standby gate's decision changed how the session may stream: a standby appeared
    /// while streaming without the gate, or the last one went.
    #[error("{0}")]
    GateChanged(#[from] gate::Change),
    /// The stored position does not describe this server's past.
    #[error("{0}")]
    History(#[from] HistoryError),
    /// A JSON topic's envelope is of a newer schema than the relay's: the stream waits
    /// (retried: nothing is skipped or parked) until the relay is upgraded.
    #[error("{0}")]
    NewerSchema(crate::value_format::RenderError),
    /// Exactly once: one PostgreSQL transaction cannot be published within the Kafka
    /// transaction timeout, so every attempt is aborted the same way.
    #[error(
        "the PostgreSQL transaction committed at {} carries {messages} or more messages and could not be published within the Kafka transaction timeout ({timeout_ms} ms): every attempt is aborted, and a PostgreSQL transaction is never split. Raise transaction_timeout_ms (at most the broker's transaction.max.timeout.ms), or run this relay with delivery = at_least_once until the slot has passed it (docs/exactly-once.md)",
        crate::lsn::format_lsn(*.commit_lsn)
    )]
    TransactionTooLarge {
        /// Its commit LSN.
        commit_lsn: u64,
        /// Messages sent of it when the Kafka transaction failed.
        messages: usize,
        /// The timeout.
        timeout_ms: u64,
    },
    /// The server's catalog or history answered what the relay cannot read.
    #[error("{0}; this is a bug or an unsupported server, stopping so nothing is skipped")]
    Catalog(String),
    /// Kafka failed in a way that may pass.
    #[error("Kafka: {0}")]
    Kafka(#[from] KafkaError),
    /// The WAL carries bytes we cannot decode.
    #[error(
        "cannot decode the replication stream: {0}. This is a bug or an unsupported server; stopping so nothing is skipped"
    )]
    Decode(#[from] DecodeError),
    /// The outbox does not look like the relay expects.
    #[error(
        "{0}. The stream carries the outbox other than the relay reads it: the table or the publication changed. Put it right, then run `ledger relay recover`, which publishes from the outbox what the stream left out (docs/operators.md, \"What the relay checks\")"
    )]
    Outbox(#[from] OutboxError),
    /// The publication does not carry exactly the outbox, or changed.
    #[error("{0}")]
    Publication(#[from] publication::PublicationError),
    /// The database URL is unusable.
    #[error("database URL: {0}")]
    Url(String),
    /// A topic framed for registries could not get its schema id at start: the registry
    /// is down, or it refused events.proto (its reason quoted).
    #[error("{0}. The relay publishes nothing until it has every framed topic's schema id")]
    Registry(#[from] crate::registry::RegistryError),
    /// The registry answers other schema ids than the relay recorded: lost or restored.
    #[error("{0}")]
    SchemaIds(#[from] schema_ids::SchemaIdError),
    /// The relay's position could not be read back from Kafka (both modes read it at
    /// start).
    #[error(
        "{0}. The relay retries; check that the position topic exists (`ledger topics create`)"
    )]
    Position(#[from] crate::position::PositionError),
}

impl RelayError {
    /// The replication stream broke the protocol: what it sent makes no sense where it came.
    pub(super) fn protocol(what: &str) -> Self {
        Self::Replication(PgWireError::Protocol(what.into()))
    }
}

/// Whether to reconnect after an error or stop and tell the operator. Pure.
///
/// Waiting for the cluster is retried: a busy slot, no primary yet, and every hold of the
/// standby gate ([`gate`]): each ends once the operator builds a standby or sets
/// `synchronized_standby_slots`, on the server, where the relay sees it at its next try;
/// a refusal would add a restart to that. What only an operator can mend stops the relay:
/// resuming on a lost slot or from a position of another history would skip transactions
/// in silence.
pub fn should_retry(error: &RelayError) -> bool {
    if let RelayError::Registry(registry) = error {
        // Registration happens once, before the relay reads: a registry that does not
        // answer yet stops this start, but a restart (systemd's) tries again.
        return registry.is_transient();
    }
    !matches!(
        error,
        RelayError::Decode(_)
            | RelayError::Outbox(_)
            | RelayError::Publication(_)
            | RelayError::Url(_)
            | RelayError::Slot(_)
            | RelayError::History(_)
            | RelayError::Catalog(_)
            | RelayError::SchemaIds(_)
            | RelayError::TransactionTooLarge { .. }
            // librdkafka refuses its configuration (a TLS file that is not a certificate,
            // an unknown property): no retry will change that.
            | RelayError::Kafka(KafkaError::ClientCreation(_))
    )
}

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
            let outcome = session(&config, &metrics, &shutdown, &mut known, &requests).await;
            requests.cancel();
            let _ = republisher.await;
            let _ = reporter.await;
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
            connection = setup::connect_sql(&config, "ra-ledger-relay-republish")
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
pub async fn run_process(config: RelayConfig) -> Result<(), RelayError> {
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

/// Keeps the column layout of the outbox relation a session was told about; any table but
/// the outbox the publication check found (by OID) is an error (the relay publishes the
/// outbox only), and so is a column of another type than the relay reads.
fn learn_relation(
    coverage: &publication::Coverage,
    layouts: &mut HashMap<u32, OutboxLayout>,
    relation: &Relation,
) -> Result<(), RelayError> {
    coverage.relation(
        relation.oid,
        &format!("{}.{}", relation.namespace, relation.name),
    )?;
    layouts.insert(relation.oid, OutboxLayout::from_relation(relation)?);
    Ok(())
}

/// The slot's position as `which` reads it, on a blocking thread.
async fn read_position(
    config: &RelayConfig,
    which: crate::position::Read,
) -> Result<Option<crate::position::Position>, RelayError> {
    let reader = config.clone();
    Ok(
        tokio::task::spawn_blocking(move || crate::position::read(&reader, which))
            .await
            .map_err(|_| RelayError::Kafka(KafkaError::Canceled))??,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_errors_stop_the_relay_and_passing_ones_are_retried() {
        let refused_config =
            RelayError::Kafka(KafkaError::ClientCreation("ssl.ca.location failed".into()));
        assert!(!should_retry(&refused_config));
        assert!(!should_retry(&RelayError::Url("bad".into())));
        assert!(should_retry(&RelayError::SlotBusy {
            slot: "s".into(),
            pid: 7
        }));
        assert!(should_retry(&RelayError::NotPrimary { target: "h".into() }));
        // A registry that does not answer at start: systemd's restart tries again; one that
        // refuses the schema: only an operator mends it.
        let registry_down = crate::registry::RegistryError::Unreachable {
            url: "http://r".into(),
            doing: "registering".into(),
            reason: "connection refused".into(),
        };
        assert!(should_retry(&RelayError::Registry(registry_down)));
        let incompatible = crate::registry::RegistryError::Incompatible {
            url: "http://r".into(),
            subject: "t-value".into(),
            level: "BACKWARD_TRANSITIVE".into(),
            reason: "field removed".into(),
        };
        assert!(!should_retry(&RelayError::Registry(incompatible)));
        for held in [
            gate::GateError::Missing {
                missing: vec!["standby".into()],
                standbys: vec!["other".into()],
            },
            gate::GateError::Off {
                standbys: vec!["standby".into()],
            },
            gate::GateError::NoStandby {
                named: vec!["standby".into()],
            },
        ] {
            assert!(should_retry(&RelayError::Gate(held)));
        }
        assert!(should_retry(&RelayError::GateChanged(
            gate::Change::StandbyBack {
                standbys: vec!["standby".into()]
            }
        )));
        assert!(!should_retry(&RelayError::Slot(slot::SlotError::Lost {
            slot: "s".into()
        })));
        assert!(!should_retry(&RelayError::History(HistoryError::Ahead {
            position: 2,
            wal_flush: 1
        })));
        assert!(should_retry(&RelayError::Kafka(KafkaError::Flush(
            rdkafka::types::RDKafkaErrorCode::AllBrokersDown
        ))));
    }
}
