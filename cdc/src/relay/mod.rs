//! The relay: streams committed outbox rows from the logical replication slot to Kafka in
//! commit order, and confirms the slot's position only once Kafka has everything before
//! it. Two delivery modes (`delivery` in [`RelayConfig`](crate::config::RelayConfig)):
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
//! A session's prologue and tail are shared too ([`stream`]): its connections split
//! between the delivery and the reader, then the stream run and stopped.
//!
//! What else publishes stays at least once in both modes: republished parked messages
//! (`republish_requests` in `run.rs`, `ledger relay parked republish`), digests and replays have
//! their own producers, outside the relay's transactions; their consumers keep
//! deduplicating on the event id (docs/exactly-once.md).
//!
//! [`run()`] reconnects with backoff; each connection is a session, set up by [`setup`] the
//! same way for both modes: on the primary, its identity read, the slot and the publication
//! checked ([`slot`], [`publication`], [`gate`]); while it streams, the reader checks the
//! publication again and confirms no further than those checks vouch for, and [`health`]
//! watches what could stall it in silence, and [`lag_report`] writes its lag where the
//! service reads it. What ends a session is retried unless it needs
//! an operator ([`should_retry`]): a lost slot, a publication that stopped carrying the
//! outbox, a position from another history, a configuration that cannot work.

mod at_least_once;
mod connect;
pub mod coverage;
mod exactly_once;
pub mod gate;
mod health;
mod in_flight;
pub mod lacking;
pub mod lag_report;
pub mod partitions;
pub mod publication;
mod published;
mod reader;
pub mod recover;
mod run;
pub mod schema_ids;
mod setup;
pub mod slot;
mod stream;

pub use run::{run, run_process};

use pgwire_replication::PgWireError;
use rdkafka::error::KafkaError;

use crate::confluent_wire::SchemaId;
use crate::history::HistoryError;
use crate::outbox::OutboxError;
use crate::pgoutput::DecodeError;

/// Prefix of the relay's heartbeat messages in the WAL.
pub const HEARTBEAT_PREFIX: &str = "ra-ledger.heartbeat";

/// Where the runbook says what to do.
const SCHEMA_IDS_RUNBOOK: &str = "docs/operators.md#schema-ids-recorded";

/// A registry that answers other ids than the relay recorded ([`schema_ids`]). Kept here,
/// with [`RelayError`], so that this folder's top depends on no room that depends on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaIdError {
    /// The same schema has another id now.
    #[error(
        "the schema registry answers id {answered} for events.proto under subject {subject}, which this relay recorded as id {recorded} (relay_schema_ids, fingerprint {fingerprint}): the registry was lost or restored, and the records framed with id {recorded} would no longer decode, or decode with another schema. Restore the registry with its ids (Apicurio: export and import; Confluent: IMPORT mode), or, once the topic's readers know, delete that row of relay_schema_ids to accept id {answered} ({SCHEMA_IDS_RUNBOOK})"
    )]
    Changed {
        /// The subject.
        subject: String,
        /// The id recorded.
        recorded: SchemaId,
        /// The id the registry answers now.
        answered: SchemaId,
        /// The schema's fingerprint.
        fingerprint: String,
    },
    /// The id the registry answers was recorded for another schema.
    #[error(
        "the schema registry answers id {answered} for events.proto under subject {subject}, an id this relay recorded for another schema (relay_schema_ids, fingerprint {other}): the registry was lost or restored, and records framed with id {answered} would decode with the wrong schema. Restore the registry with its ids (Apicurio: export and import; Confluent: IMPORT mode) ({SCHEMA_IDS_RUNBOOK})"
    )]
    Reused {
        /// The subject.
        subject: String,
        /// The id.
        answered: SchemaId,
        /// The fingerprint recorded with it.
        other: String,
    },
}

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
    SchemaIds(#[from] SchemaIdError),
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
