//! `ledger relay recover`: what to do when the slot is gone, invalidated, or no longer
//! agrees with what Kafka holds (after a failover without failover slots, a restore, a
//! drop). The relay refuses to go on in those cases rather than skip in silence; this is
//! the way on.
//!
//! # What it does, and why it loses nothing
//!
//! 1. Checks the publication (created when missing, which needs the outbox's owner; refused
//!    when it does not carry exactly the outbox: [`super::publication`]), and registers the
//!    slot as not ready, with that publication's identity.
//! 2. Drops the slot if it is still there (a relay must not hold it), and creates it anew
//!    with an exported snapshot (`CREATE_REPLICATION_SLOT … (SNAPSHOT 'export')`). The
//!    snapshot sees exactly the transactions committed before the slot's consistent point;
//!    the slot streams every one committed after it.
//! 3. Reads, in that snapshot, every outbox row still kept: retention removes a row only
//!    once a slot confirmed it, so every row Kafka may lack is among them (and, with
//!    `--events-since`, the ledger's events recorded since then, for rows retention
//!    removed: deduplicated by event id).
//! 4. Holds the new slot (`START_REPLICATION` on the same session) while it publishes them
//!    in per-aggregate order and waits for Kafka's acknowledgement: a relay that starts
//!    meanwhile waits for the slot, so nothing newer overtakes them.
//! 5. Writes the relay's position at the slot's consistent point, so the relay resumes
//!    there (in exactly-once mode, committed under the relay's transactional id, which
//!    fences any relay still running); marks the slot ready; lets it go without confirming
//!    anything.
//!
//! A crash before step 5 leaves the slot not ready: the relay's next start does all of it
//! again from a new snapshot ([`super::slot::decide`]). The relay's first start in a
//! database is this too, so that a transaction committing while the first slot is created
//! is published from the snapshot rather than lost.
//!
//! It is **at least once** in its window: rows Kafka already had are published again
//! (consumers deduplicate on the event id), and they carry no `commit_lsn`, `commit_timestamp`
//! or `ordinal` header (the snapshot does not know them; see [`crate::publish::Origin`]).

use std::time::Duration;

use bytes::Bytes;
use pgwire_replication::ReplicationClient;
use rdkafka::producer::Producer as _;
use tokio_postgres::{Client, IsolationLevel};
use tracing::{info, warn};

use super::in_flight::{self, Answer, InFlight, Sent};
use super::{RelayError, connect, publication, slot};
use crate::config::{DeliveryMode, RelayConfig};
use crate::history::Identity;
use crate::infra::entry::Entry;
use crate::infra::pg::Settings;
use crate::lsn::{format_lsn, parse_lsn};
use crate::outbox::OutboxRow;
use crate::parking;
use crate::position::Position;
use crate::publish::{self, Origin, OutgoingMessage};
use crate::value_format::ENVELOPE_AGGREGATES;

/// Rows read per round trip from the snapshot.
const BATCH: i32 = 5_000;

/// What to republish besides the outbox.
#[derive(Debug, Clone, Default)]
pub struct RecoverOptions {
    /// Also the ledger's events recorded at or after this time that are no longer in the
    /// outbox (the role needs SELECT on `events`).
    pub events_since: Option<chrono::DateTime<chrono::Utc>>,
}

/// What a recovery did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The new slot's consistent point: the relay streams what committed after it.
    pub consistent_point: String,
    /// Whether an old slot was dropped.
    pub dropped_slot: bool,
    /// Outbox rows published again.
    pub outbox_rows: u64,
    /// Events from `events` published again (not in the outbox any more).
    pub events: u64,
    /// Rows parked (no rendering in their topic's format).
    pub parked: u64,
}

/// Recovers the slot of `config` (see the module doc). The relay must not be streaming.
/// Topics framed for registries get their schema ids first, as the relay's start does.
#[inline(never)]
pub fn recover<'a>(
    config: &'a RelayConfig,
    options: &'a RecoverOptions,
) -> Entry<'a, Result<Recovered, RelayError>> {
    Box::pin(recover_inner(config, options))
}

async fn recover_inner(
    config: &RelayConfig,
    options: &RecoverOptions,
) -> Result<Recovered, RelayError> {
    let config = crate::registry::register_topics(config.clone()).await?;
    super::schema_ids::check(&config).await?;
    let application_name = format!("ledger-relay-recover:{}", config.slot);
    let (primary, _, _) = connect::find_primary(&config, &application_name).await?;
    from_snapshot(&config, options, "recover", &primary).await
}

/// Creates the slot of `config` anew from a snapshot on `primary` and publishes what the
/// snapshot holds (the module doc); `by` registers who did (`recover`, or `relay` for the
/// first slot).
pub(super) async fn from_snapshot(
    config: &RelayConfig,
    options: &RecoverOptions,
    by: &str,
    primary: &Settings,
) -> Result<Recovered, RelayError> {
    let application_name = format!("ledger-relay-recover:{}", config.slot);
    let sql = crate::infra::pg::connect(primary).await?;
    // Parking and registering write; the snapshot's transaction only reads.
    let writer = crate::infra::pg::connect(primary).await?;
    let (identity_of_publication, dropped_slot) = begin(config, by, &sql, &writer).await?;
    let mut replication = ReplicationClient::connect_gated(connect::replication_config(
        config,
        primary,
        &application_name,
    ))
    .await?;
    let identity = identity_of(&mut replication, &sql).await?;
    let (consistent_point, snapshot) = create_slot(&mut replication, config).await?;
    let mut sql = sql;
    let reading = sql
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    reading
        .batch_execute(&format!("SET TRANSACTION SNAPSHOT '{snapshot}'"))
        .await?;
    // The snapshot is imported: the slot may now be held (the exporting session's next
    // command ends its export).
    replication.start().await?;
    replication.wait_started().await?;
    let producer = in_flight::idempotent(config)?;
    let mut published = Publisher::new(config, producer, &writer, consistent_point);
    publish_snapshot(&reading, &mut published, options).await?;
    published.settle().await?;
    reading.commit().await?;
    let heartbeats = slot::registration(&writer, &config.slot)
        .await?
        .map(|registration| registration.heartbeats);
    commit_position(config, &identity, consistent_point, heartbeats).await?;
    // Ready, and the generation's first record of what Kafka holds: every outbox row
    // committed before the consistent point was in the snapshot, and Kafka has them all.
    slot::register_snapshot(
        &writer,
        &config.slot,
        by,
        &config.publication,
        &identity_of_publication,
        slot::SnapshotState::Published {
            consistent_point,
            system_id: &identity.system_id,
        },
    )
    .await?;
    // Let the slot go without confirming anything: the relay streams from its start.
    replication.stop();
    let _ = tokio::time::timeout(Duration::from_secs(5), replication.shutdown()).await;
    let recovered = Recovered {
        consistent_point: format_lsn(consistent_point),
        dropped_slot,
        outbox_rows: published.outbox_rows,
        events: published.events,
        parked: published.parked,
    };
    info!(?recovered, slot = %config.slot, "{}", if by == "recover" {
        "slot recovered; start the relay"
    } else {
        "the first slot is created, and the rows its snapshot holds are in Kafka"
    });
    Ok(recovered)
}

/// The server the replication session reached, and the database.
async fn identity_of(
    replication: &mut ReplicationClient,
    sql: &Client,
) -> Result<Identity, RelayError> {
    let identify = replication.identify_system().await?;
    let database: String = sql
        .query_one("SELECT current_database()", &[])
        .await?
        .get(0);
    Ok(Identity {
        system_id: identify.system_id,
        timeline: identify.timeline,
        database,
    })
}

/// Step 1 (the module doc): a slot a relay holds is refused before anything is written, so a
/// refused recovery changes nothing (it used to mark the running relay's registration not
/// ready first); the publication is checked (created when missing); the old slot is dropped
/// (PostgreSQL refuses to drop a slot a session holds, so a relay that took it meanwhile
/// keeps it and its registration), then registered as publishing: a crash between the two
/// leaves a ready registration without a slot, which the relay refuses as lost until this
/// runs again, never a running relay's registration undone. Returns the publication's
/// identity and whether a slot was dropped.
async fn begin(
    config: &RelayConfig,
    by: &str,
    sql: &Client,
    writer: &Client,
) -> Result<(String, bool), RelayError> {
    if let Some(pid) = slot::holder(sql, &config.slot).await? {
        return Err(RelayError::SlotBusy {
            slot: config.slot.clone(),
            pid,
        });
    }
    let (checked, _) = publication::ensure(sql, config, true).await?;
    let dropped_slot = drop_old_slot(sql, &config.slot).await?;
    slot::register_snapshot(
        writer,
        &config.slot,
        by,
        &config.publication,
        &checked.identity,
        slot::SnapshotState::Publishing,
    )
    .await?;
    Ok((checked.identity, dropped_slot))
}

/// Publishes, from the snapshot `reading` imported, the events of `options.events_since`
/// whose outbox rows are gone, then every outbox row still kept, in their order.
async fn publish_snapshot(
    reading: &tokio_postgres::Transaction<'_>,
    published: &mut Publisher<'_>,
    options: &RecoverOptions,
) -> Result<(), RelayError> {
    if let Some(since) = options.events_since {
        let aggregates: Vec<&str> = ENVELOPE_AGGREGATES.to_vec();
        let portal = reading
            .bind(
                include_str!("../sql/recover_events.sql"),
                &[&since, &aggregates],
            )
            .await?;
        loop {
            let rows = reading.query_portal(&portal, BATCH).await?;
            for row in &rows {
                published.events += 1;
                published.send(event_row(row)).await?;
            }
            if rows.len() < BATCH as usize {
                break;
            }
        }
    }
    let portal = reading
        .bind(include_str!("../sql/recover_outbox.sql"), &[])
        .await?;
    loop {
        let rows = reading.query_portal(&portal, BATCH).await?;
        for row in &rows {
            published.outbox_rows += 1;
            published.send(outbox_row(row)).await?;
        }
        if rows.len() < BATCH as usize {
            break;
        }
    }
    Ok(())
}

/// Drops the slot if it exists and no session holds it. Returns whether it did.
async fn drop_old_slot(sql: &Client, slot: &str) -> Result<bool, RelayError> {
    let Some(state) = slot::inspect(sql, slot).await? else {
        return Ok(false);
    };
    if let Some(pid) = state.active_pid {
        return Err(RelayError::SlotBusy {
            slot: slot.to_owned(),
            pid,
        });
    }
    warn!(
        %slot,
        confirmed = state.confirmed_flush_lsn.as_deref().unwrap_or("none"),
        "dropping the old slot; the outbox rows it had not confirmed are published again"
    );
    sql.execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await?;
    Ok(true)
}

/// Creates the slot with an exported snapshot on a gated session; returns its consistent
/// point and the snapshot's name.
async fn create_slot(
    replication: &mut ReplicationClient,
    config: &RelayConfig,
) -> Result<(u64, String), RelayError> {
    let failover = if config.slot_failover {
        ", FAILOVER true"
    } else {
        ""
    };
    let rows = replication
        .simple_query(&format!(
            "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput (SNAPSHOT 'export'{failover})",
            config.slot
        ))
        .await?;
    let column = |index: usize| -> Option<String> {
        rows.first()?
            .get(index)?
            .as_deref()
            .map(|value| String::from_utf8_lossy(value).into_owned())
    };
    let point = column(1).and_then(|text| parse_lsn(&text));
    match (point, column(2)) {
        (Some(point), Some(snapshot)) => Ok((point, snapshot)),
        _ => Err(RelayError::Catalog(
            "CREATE_REPLICATION_SLOT answered no consistent point or snapshot".into(),
        )),
    }
}

/// An outbox row of `recover_outbox.sql`.
fn outbox_row(row: &tokio_postgres::Row) -> (OutboxRow, Option<u32>) {
    (
        OutboxRow {
            id: row.get(0),
            event_id: row.get(1),
            aggregate_type: row.get(2),
            aggregate_id: row.get(3),
            event_type: row.get(4),
            payload: Bytes::from(row.get::<_, Vec<u8>>(5)),
            traceparent: row.get(6),
        },
        row.get::<_, Option<i64>>(7).map(|xid| xid as u32),
    )
}

/// An event of `recover_events.sql`, as the outbox row it was written with: the stream
/// `<aggregate type>-<aggregate id>`, as a replay reads it.
fn event_row(row: &tokio_postgres::Row) -> (OutboxRow, Option<u32>) {
    let stream: String = row.get(2);
    let (aggregate_type, aggregate_id) = stream.split_once('-').unwrap_or((&stream, ""));
    (
        OutboxRow {
            id: row.get(0),
            event_id: row.get(1),
            aggregate_type: aggregate_type.to_owned(),
            aggregate_id: aggregate_id.to_owned(),
            event_type: row.get(3),
            payload: Bytes::from(row.get::<_, Vec<u8>>(4)),
            traceparent: row.get(5),
        },
        row.get::<_, Option<i64>>(6).map(|xid| xid as u32),
    )
}

/// Publishes rows with the relay's idempotent producer, at most `max_in_flight` at once;
/// parks what Kafka refuses for good, as the relay does.
struct Publisher<'a> {
    config: &'a RelayConfig,
    writer: &'a Client,
    consistent_point: u64,
    in_flight: InFlight<()>,
    outbox_rows: u64,
    events: u64,
    parked: u64,
}

impl<'a> Publisher<'a> {
    fn new(
        config: &'a RelayConfig,
        producer: in_flight::Producer,
        writer: &'a Client,
        consistent_point: u64,
    ) -> Self {
        Self {
            config,
            writer,
            consistent_point,
            in_flight: InFlight::new(producer),
            outbox_rows: 0,
            events: 0,
            parked: 0,
        }
    }

    async fn send(&mut self, (row, xid): (OutboxRow, Option<u32>)) -> Result<(), RelayError> {
        while self.in_flight.len() >= self.config.max_in_flight {
            self.settle_one().await?;
        }
        let message = match OutgoingMessage::with_origin(self.config, row, Origin::Events { xid }) {
            Ok(message) => message,
            Err(unrenderable) => {
                return self
                    .park(&unrenderable.message, &unrenderable.error.to_string())
                    .await;
            }
        };
        match self.in_flight.send(message, ()) {
            Ok(()) => {}
            Err(refused) => self.refused(&refused.message, refused.error).await?,
        }
        Ok(())
    }

    async fn settle_one(&mut self) -> Result<(), RelayError> {
        // It sends no record of its own: only a message's failure counts.
        if let Some(Answer {
            sent: Sent::Message { message, .. },
            result: Err(error),
        }) = self.in_flight.next().await
        {
            self.refused(&message, error).await?;
        }
        Ok(())
    }

    async fn settle(&mut self) -> Result<(), RelayError> {
        while !self.in_flight.is_empty() {
            self.settle_one().await?;
        }
        Ok(())
    }

    /// A refusal for good is parked; any other failure ends the recovery (run it again).
    async fn refused(
        &mut self,
        message: &OutgoingMessage,
        error: rdkafka::error::KafkaError,
    ) -> Result<(), RelayError> {
        if publish::classify(&error) == publish::DeliveryFailure::Permanent {
            return self.park(message, &error.to_string()).await;
        }
        Err(error.into())
    }

    async fn park(&mut self, message: &OutgoingMessage, error: &str) -> Result<(), RelayError> {
        warn!(event_id = %message.row.event_id, %error, "parking a message Kafka will not take");
        parking::park(self.writer, message, self.consistent_point, error).await?;
        self.parked += 1;
        Ok(())
    }
}

/// Writes a position at `point`, so that the relay resumes there: the positions Kafka held
/// name the old slot's history. Exactly once commits it under the relay's transactional id,
/// which fences any instance still running; at least once writes it with its idempotent
/// producer.
async fn commit_position(
    config: &RelayConfig,
    identity: &Identity,
    point: u64,
    heartbeats: Option<u64>,
) -> Result<(), RelayError> {
    let record = Position::new(
        &config.slot,
        identity,
        point,
        point,
        None,
        heartbeats,
        config.delivery,
    )
    .encode();
    let topic = config.position_topic();
    if config.delivery == DeliveryMode::AtLeastOnce {
        let mut in_flight = InFlight::<()>::new(in_flight::idempotent(config)?);
        in_flight.send_record(&topic, 0, config.slot.as_bytes(), &record, point)?;
        return match in_flight.next().await {
            Some(Answer {
                result: Err(error), ..
            }) => Err(error.into()),
            _ => Ok(()),
        };
    }
    let producer = in_flight::transactional(config, &identity.system_id)?;
    let slot = config.slot.clone();
    let timeout = config.transaction_timeout();
    tokio::task::spawn_blocking(move || -> Result<(), rdkafka::error::KafkaError> {
        producer.init_transactions(timeout)?;
        producer.begin_transaction()?;
        // Its delivery report goes unread: the commit fails unless Kafka took it.
        producer
            .send(
                rdkafka::producer::BaseRecord::with_opaque_to(&topic, 0)
                    .partition(0)
                    .key(slot.as_bytes())
                    .payload(&record),
            )
            .map_err(|(error, _)| error)?;
        producer.commit_transaction(timeout)
    })
    .await
    .map_err(|_| RelayError::Kafka(rdkafka::error::KafkaError::Canceled))??;
    Ok(())
}
