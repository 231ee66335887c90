//! The relay's replication slot as PostgreSQL's catalog describes it, and what the relay
//! does about it before it streams.
//!
//! A slot is where the relay's progress lives: PostgreSQL keeps the WAL after its confirmed
//! position and resends from there. A slot created now starts at its consistent point, so
//! whatever committed before that point is not in it, including a transaction that was
//! committing while the slot was being created. Hence ([`decide`], pure):
//!
//! - a slot is only ever created with an exported snapshot, and the outbox rows that
//!   snapshot holds (committed before the slot's consistent point) are published from it
//!   ([`super::recover`]): the first slot of a database by the relay itself, a lost one by
//!   `ledger relay recover`. It is registered in `relay_slots` (migration V12) as not ready
//!   until Kafka acknowledged them (V17), so a crash meanwhile makes the next start publish
//!   from a new snapshot again, never stream as if nothing were missing;
//! - a slot that is missing although it was registered (and ready) was lost (a promotion
//!   without a failover slot, a restore, a drop): the relay stops and names the recovery,
//!   `ledger relay recover`. It never re-creates a slot in silence;
//! - an invalidated slot (its WAL removed) or one of another kind, plugin or database is
//!   refused the same way;
//! - who holds the slot is read from `pg_replication_slots.active_pid`, not from the text
//!   of an error.
//!
//! The catalog's columns differ between versions (`failover`, `synced` and
//! `invalidation_reason` are 17's): the row is read as JSON, so one query fits all.

use pgwire_replication::ReplicationClient;
use serde::Deserialize;
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;
use tracing::{info, warn};

use super::RelayError;
use crate::config::RelayConfig;
use crate::lsn::parse_lsn;

/// The first PostgreSQL version with failover slots.
pub const FAILOVER_VERSION: i32 = 170_000;

/// One row of `pg_replication_slots`, the columns the relay reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct SlotState {
    /// `logical` or `physical`.
    pub slot_type: String,
    /// The output plugin.
    pub plugin: Option<String>,
    /// The slot's database.
    pub database: Option<String>,
    /// Whether a session holds it now.
    #[serde(default)]
    pub active: bool,
    /// The holder's process id.
    pub active_pid: Option<i32>,
    /// Where the slot resends from, `X/Y`.
    pub confirmed_flush_lsn: Option<String>,
    /// `reserved`, `extended`, `unreserved` or `lost` (WAL gone).
    pub wal_status: Option<String>,
    /// Why PostgreSQL invalidated it (17+).
    pub invalidation_reason: Option<String>,
    /// A failover slot (17+).
    #[serde(default)]
    pub failover: bool,
    /// Whether it lives only as long as its session.
    #[serde(default)]
    pub temporary: bool,
}

impl SlotState {
    /// The confirmed position; 0 when it has none yet.
    pub fn confirmed(&self) -> u64 {
        self.confirmed_flush_lsn
            .as_deref()
            .and_then(parse_lsn)
            .unwrap_or(0)
    }
}

/// Why the relay will not stream from its slot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// The slot was lost.
    #[error(
        "the replication slot {slot} is missing, though the relay streamed from it before (it is in relay_slots): it was lost in a failover without a failover slot, a restore, or a drop. A new slot would start now and skip what was committed since the old one's position, so the relay does not create one. Run `ledger relay recover` (docs/operators.md, \"Failover\")"
    )]
    Lost {
        /// The slot.
        slot: String,
    },
    /// PostgreSQL invalidated the slot.
    #[error(
        "the replication slot {slot} is invalidated ({reason}): PostgreSQL removed WAL it still needed, so what was committed since its position is no longer in the WAL. Run `ledger relay recover` (docs/operators.md, \"Failover\")"
    )]
    Invalidated {
        /// The slot.
        slot: String,
        /// PostgreSQL's reason.
        reason: String,
    },
    /// A slot of that name that is not the relay's kind.
    #[error(
        "the replication slot {slot} is not a pgoutput logical slot of this database ({found}): choose another `slot` name, or drop it if it is nobody's"
    )]
    Foreign {
        /// The slot.
        slot: String,
        /// What it is.
        found: String,
    },
    /// Failover slots asked for on a server without them.
    #[error(
        "slot_failover needs PostgreSQL 17 or later, and this server is version {version}: turn slot_failover off and follow the runbook for PostgreSQL 15 and 16 (docs/operators.md, \"Failover\")"
    )]
    FailoverUnsupported {
        /// `server_version_num`.
        version: i32,
    },
}

/// The slot `slot`'s row, or `None` when there is no such slot.
pub async fn inspect(sql: &Client, slot: &str) -> Result<Option<SlotState>, RelayError> {
    let row = sql
        .query_opt(include_str!("../sql/slot_state.sql"), &[&slot])
        .await?;
    match row {
        None => Ok(None),
        Some(row) => {
            let json: String = row.get(0);
            serde_json::from_str(&json)
                .map(Some)
                .map_err(|error| RelayError::Url(format!("pg_replication_slots: {error}")))
        }
    }
}

/// Whether the relay may stream from `state` in database `database`: the right kind, and
/// not invalidated. Pure.
pub fn check(slot: &str, database: &str, state: &SlotState) -> Result<(), SlotError> {
    let foreign = |found: String| SlotError::Foreign {
        slot: slot.to_owned(),
        found,
    };
    if state.slot_type != "logical" {
        return Err(foreign(format!("a {} slot", state.slot_type)));
    }
    if state.plugin.as_deref() != Some("pgoutput") {
        return Err(foreign(format!(
            "plugin {}",
            state.plugin.as_deref().unwrap_or("none")
        )));
    }
    if state.database.as_deref() != Some(database) {
        return Err(foreign(format!(
            "database {}",
            state.database.as_deref().unwrap_or("none")
        )));
    }
    let reason = state.invalidation_reason.clone().or_else(|| {
        (state.wal_status.as_deref() == Some("lost")).then(|| "wal_status lost".to_owned())
    });
    if let Some(reason) = reason {
        return Err(SlotError::Invalidated {
            slot: slot.to_owned(),
            reason,
        });
    }
    Ok(())
}

/// What `relay_slots` remembers of a slot (migrations V12 and V17).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registration {
    /// The publication it streams through (unknown before V17).
    pub publication: Option<String>,
    /// That publication's identity when the relay last found it right.
    pub publication_identity: Option<String>,
    /// Whether the rows committed before its consistent point were all published.
    pub ready: bool,
    /// How many heartbeats the relay wrote through it ([`crate::history`], rule 6).
    pub heartbeats: u64,
    /// The generation of its record of what Kafka holds: bumped by every snapshot
    /// (migration V20). A session records under the generation it started in.
    pub generation: i64,
    /// That record: Kafka holds every outbox row committed below this LSN.
    pub published: Option<u64>,
}

/// The slot `slot`'s registration, if it has one.
pub async fn registration(sql: &Client, slot: &str) -> Result<Option<Registration>, RelayError> {
    let row = sql
        .query_opt(include_str!("../sql/slot_registration.sql"), &[&slot])
        .await
        .map_err(|error| {
            let missing = [SqlState::UNDEFINED_COLUMN, SqlState::UNDEFINED_TABLE];
            match error.code() {
                Some(code) if missing.contains(code) => RelayError::Catalog(format!(
                    "relay_slots is older than this relay ({}): run `ledger migrate` (migration V17) first",
                    crate::infra::pg::explain(&error)
                )),
                _ => error.into(),
            }
        })?;
    Ok(row.map(|row| Registration {
        publication: row.get(0),
        publication_identity: row.get(1),
        ready: row.get(2),
        heartbeats: u64::try_from(row.get::<_, i64>(3)).unwrap_or(0),
        generation: row.get(4),
        published: row
            .get::<_, Option<String>>(5)
            .as_deref()
            .and_then(parse_lsn),
    }))
}

/// What the relay does about its slot before it streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Stream from it.
    Stream,
    /// Create it with a snapshot and publish what the snapshot holds first: the database's
    /// first slot, or one whose rows were not all published when the last try stopped.
    FromSnapshot {
        /// Which of the two.
        first: bool,
    },
}

/// What to do about `slot` given its catalog row and its registration (the module doc).
/// Pure.
pub fn decide(
    slot: &str,
    state: Option<&SlotState>,
    registration: Option<&Registration>,
) -> Result<Start, SlotError> {
    match (state, registration) {
        (_, Some(registration)) if !registration.ready => Ok(Start::FromSnapshot { first: false }),
        (None, Some(_)) => Err(SlotError::Lost {
            slot: slot.to_owned(),
        }),
        (None, None) => Ok(Start::FromSnapshot { first: true }),
        (Some(_), _) => Ok(Start::Stream),
    }
}

/// Makes an existing slot ready to stream: refuses a lost, foreign or busy one, registers
/// it with `checked`'s publication, and makes it a failover slot or not as `failover` says
/// (`None`: left as it is, `slot_failover` being off). Returns its state. `replication` is
/// the gated session, not yet started.
pub async fn prepare(
    sql: &Client,
    replication: &mut ReplicationClient,
    config: &RelayConfig,
    database: &str,
    identity: &str,
    failover: Option<bool>,
) -> Result<SlotState, RelayError> {
    let slot = &config.slot;
    let state = inspect(sql, slot)
        .await?
        .ok_or_else(|| SlotError::Lost { slot: slot.clone() })?;
    check(slot, database, &state)?;
    if let Some(pid) = state.active_pid {
        return Err(RelayError::SlotBusy {
            slot: slot.clone(),
            pid,
        });
    }
    register(sql, slot, "relay", &config.publication, identity).await?;
    match failover {
        Some(failover) if failover != state.failover => {
            if failover {
                info!(%slot, "turning failover on for the slot");
            } else {
                warn!(%slot, "turning failover off for the slot: the primary has no standby, and the standby gate holds only failover slots");
            }
            // Only a slot no session holds can be altered: checked just above.
            replication
                .simple_query(&format!(
                    "ALTER_REPLICATION_SLOT {slot} ( FAILOVER {failover} )"
                ))
                .await?;
            Ok(inspect(sql, slot).await?.unwrap_or(state))
        }
        Some(_) => Ok(state),
        None => {
            if state.failover {
                warn!(%slot, "the slot is a failover slot but slot_failover is off: the standby gate is not checked");
            }
            Ok(state)
        }
    }
}

/// Refuses `slot_failover` on a server older than PostgreSQL 17 (`server_version_num`).
pub fn failover_supported(version: i32) -> Result<(), SlotError> {
    if version < FAILOVER_VERSION {
        return Err(SlotError::FailoverUnsupported { version });
    }
    Ok(())
}

/// Records that the relay has a slot of this name, so that its loss is seen later (`by`:
/// who saw it first), with the publication it streams through and that publication's
/// identity, unless they are known already.
pub async fn register(
    sql: &Client,
    slot: &str,
    by: &str,
    publication: &str,
    identity: &str,
) -> Result<(), RelayError> {
    sql.execute(
        include_str!("../sql/register_slot.sql"),
        &[&slot, &by, &publication, &identity],
    )
    .await?;
    Ok(())
}

/// What a snapshot's registration says of Kafka ([`register_snapshot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotState<'a> {
    /// Its rows are being published: a new generation begins, with no record of what
    /// Kafka holds, so retention deletes nothing.
    Publishing,
    /// Kafka acknowledged every row it holds: the registration is ready, and Kafka holds
    /// every outbox row committed before the slot's consistent point on that server.
    Published {
        /// The slot's consistent point.
        consistent_point: u64,
        /// The server's system identifier.
        system_id: &'a str,
    },
}

/// Registers a slot created with a snapshot anew ([`super::recover`]): its publication
/// and identity as `checked` now, and whether what the snapshot holds is in Kafka yet.
/// Returns the registration's generation.
pub async fn register_snapshot(
    sql: &Client,
    slot: &str,
    by: &str,
    publication: &str,
    identity: &str,
    state: SnapshotState<'_>,
) -> Result<i64, RelayError> {
    let (ready, point, system_id) = match state {
        SnapshotState::Publishing => (false, None, None),
        SnapshotState::Published {
            consistent_point,
            system_id,
        } => (
            true,
            Some(crate::lsn::format_lsn(consistent_point)),
            Some(system_id),
        ),
    };
    let row = sql
        .query_one(
            include_str!("../sql/register_snapshot.sql"),
            &[
                &slot,
                &by,
                &publication,
                &identity,
                &ready,
                &point,
                &system_id,
            ],
        )
        .await?;
    Ok(row.get(0))
}

/// The process holding `slot`, if any.
pub async fn holder(sql: &Client, slot: &str) -> Result<Option<i32>, RelayError> {
    Ok(inspect(sql, slot).await?.and_then(|state| state.active_pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours() -> SlotState {
        SlotState {
            slot_type: "logical".into(),
            plugin: Some("pgoutput".into()),
            database: Some("ledger".into()),
            confirmed_flush_lsn: Some("1/A0".into()),
            wal_status: Some("reserved".into()),
            ..SlotState::default()
        }
    }

    #[test]
    fn a_slot_is_created_only_from_a_snapshot_and_never_in_silence_again() {
        let registered = |ready| Registration {
            ready,
            ..Registration::default()
        };
        assert_eq!(
            decide("s", None, None),
            Ok(Start::FromSnapshot { first: true }),
            "the database's first slot"
        );
        assert_eq!(
            decide("s", None, Some(&registered(true))),
            Err(SlotError::Lost { slot: "s".into() }),
            "a slot that streamed before"
        );
        assert_eq!(
            decide("s", Some(&ours()), Some(&registered(true))),
            Ok(Start::Stream)
        );
        assert_eq!(
            decide("s", Some(&ours()), None),
            Ok(Start::Stream),
            "a slot created before it was registered (an older ledger migrate) streams"
        );
        for state in [None, Some(&ours())] {
            assert_eq!(
                decide("s", state, Some(&registered(false))),
                Ok(Start::FromSnapshot { first: false }),
                "a snapshot not yet all in Kafka when the last try stopped"
            );
        }
    }

    #[test]
    fn a_slot_row_reads_from_any_version_as_json() {
        // PostgreSQL 15: no failover, synced or invalidation_reason.
        let v15: SlotState = serde_json::from_str(
            r#"{"slot_name":"s","plugin":"pgoutput","slot_type":"logical","datoid":5,"database":"ledger","temporary":false,"active":true,"active_pid":42,"xmin":null,"catalog_xmin":"740","restart_lsn":"0/1","confirmed_flush_lsn":"0/15D6A40","wal_status":"reserved","safe_wal_size":null,"two_phase":false}"#,
        )
        .unwrap();
        assert_eq!(v15.active_pid, Some(42));
        assert_eq!(v15.confirmed(), 0x15D_6A40);
        assert!(!v15.failover);
        let v18: SlotState = serde_json::from_str(
            r#"{"slot_type":"logical","plugin":"pgoutput","database":"ledger","active":false,"active_pid":null,"confirmed_flush_lsn":null,"wal_status":"lost","invalidation_reason":"wal_removed","failover":true,"synced":true,"temporary":false}"#,
        )
        .unwrap();
        assert!(v18.failover);
        assert_eq!(v18.confirmed(), 0);
    }

    #[test]
    fn only_an_intact_pgoutput_slot_of_this_database_streams() {
        assert_eq!(check("s", "ledger", &ours()), Ok(()));
        let physical = SlotState {
            slot_type: "physical".into(),
            ..ours()
        };
        assert!(matches!(
            check("s", "ledger", &physical),
            Err(SlotError::Foreign { .. })
        ));
        let other_database = check("s", "staging", &ours()).unwrap_err().to_string();
        assert!(
            other_database.contains("database ledger"),
            "{other_database}"
        );
        let wal2json = SlotState {
            plugin: Some("wal2json".into()),
            ..ours()
        };
        assert!(check("s", "ledger", &wal2json).is_err());
        let lost = SlotState {
            wal_status: Some("lost".into()),
            ..ours()
        };
        assert!(matches!(
            check("s", "ledger", &lost),
            Err(SlotError::Invalidated { .. })
        ));
        let invalidated = SlotState {
            invalidation_reason: Some("rows_removed".into()),
            ..ours()
        };
        let text = check("s", "ledger", &invalidated).unwrap_err().to_string();
        assert!(
            text.contains("rows_removed") && text.contains("ledger relay recover"),
            "{text}"
        );
    }
}
