//! The standby gate of PostgreSQL 17 and later: `synchronized_standby_slots` on the primary
//! names the physical slots of the standbys that may be promoted, and a logical walsender
//! of a failover slot sends nothing those standbys have not flushed. With it, the relay
//! can never publish what a promoted standby will lack.
//!
//! The gate also fails in silence: when it names a slot the server does not have (after a
//! promotion, the new primary keeps the old primary's setting, naming its own former
//! slot), decoding waits for ever and PostgreSQL says so only in its own log. And it
//! gates failover slots only: a slot whose failover is off is never held.
//!
//! # What the relay does about it ([`GateState::decide`], pure)
//!
//! With `slot_failover`, at each session's start and every `health_check_interval_ms`
//! while it streams ([`super::health`]), in this order:
//!
//! 1. **The gate is set and names only physical slots this primary has**: the slot is a
//!    failover slot and the relay streams behind the gate ([`Gate::Behind`]). PostgreSQL
//!    holds decoding while a named standby lags; the relay reports it.
//! 2. **The primary has no standby**: no persistent physical slot, so no server can take
//!    over with a copy of the relay's slot (slot sync needs `primary_slot_name`), and no
//!    promotion can happen. This is the state a promotion leaves until a standby is built:
//!    the gate has nobody to wait for, yet PostgreSQL waits for ever on a slot it names and
//!    lacks. `without_standby` chooses:
//!    - `stream` (the default): the slot's failover is turned off and the relay streams
//!      without the gate, and pages ([`Gate::WithoutStandby`]);
//!    - `hold`: nothing is published until a standby is built with the slot the gate
//!      names ([`GateError::NoStandby`]).
//! 3. **A standby's physical slot exists but the gate is empty or names others**: the relay
//!    holds until the gate names the standbys' slots ([`GateError::Off`],
//!    [`GateError::Missing`]).
//!
//! Every hold is retried, none is a refusal: each ends once the operator acts on the
//! server (a standby built, the setting changed and reloaded), and the relay sees that at
//! its next try, with no restart.
//!
//! While a session streams, the same decision ends it ([`Gate::ended_by`]) when it changes
//! the way the session may stream, and the next session starts at once the new way:
//! - streaming without the gate, a standby's physical slot appears (`pg_basebackup -C`
//!   makes it before the backup starts): the slot becomes a failover slot behind the gate
//!   again, or the relay holds. What the relay publishes without the gate while a physical
//!   slot exists is at most one `health_check_interval_ms` of it;
//! - streaming behind the gate, the last physical slot goes (with `stream`).
//!
//! # Why the relay changes its slot, not the setting
//!
//! Turning failover off on its own slot needs only the `REPLICATION` the relay has, and
//! touches nothing else of the server. Emptying `synchronized_standby_slots` instead would
//! need a superuser (or `GRANT ALTER SYSTEM ON PARAMETER synchronized_standby_slots` and
//! `EXECUTE` on `pg_reload_conf()`), would ungate every failover slot of the server, other
//! subscribers' too, and would have to be set again naming the new standby's slot, which
//! only the operator knows. Left as it is, the setting already names the slot to build the
//! standby with, and building it is all it takes for the relay to go back behind the gate.
//! The relay never re-creates its slot either way.

use tokio_postgres::Client;

use crate::config::WithoutStandby;

/// The wait event of a logical walsender held back by the gate (PostgreSQL 17+).
pub const GATE_WAIT_EVENT: &str = "WaitForStandbyConfirmation";

/// How a session with `slot_failover` streams (rules 1 and 2 of the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Behind the gate: the slot a failover slot.
    Behind,
    /// Without the gate, the primary having no standby: the slot's failover off.
    WithoutStandby,
}

impl Gate {
    /// Whether the slot must be a failover slot for this.
    pub fn failover(self) -> bool {
        self == Self::Behind
    }

    /// Whether the decision `now`, taken while a session streams this way, ends the
    /// session, and why (the module doc). Pure.
    pub fn ended_by(self, now: &Result<Gate, GateError>, state: &GateState) -> Option<Change> {
        match (self, now) {
            (Self::WithoutStandby, Ok(Self::WithoutStandby)) => None,
            (Self::WithoutStandby, _) => Some(Change::StandbyBack {
                standbys: state.standbys.clone(),
            }),
            (Self::Behind, Ok(Self::WithoutStandby)) => Some(Change::StandbyGone {
                named: state.named.clone(),
            }),
            // PostgreSQL holds the walsender itself; the relay reports it.
            (Self::Behind, _) => None,
        }
    }
}

/// Why the gate keeps the relay from streaming. Each is a hold: retried until the server
/// is put right.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    /// No standby, and `without_standby = "hold"`.
    #[error("{}", no_standby(.named))]
    NoStandby {
        /// The slots the gate names (none when it is empty), all missing here.
        named: Vec<String>,
    },
    /// Standbys, and no gate.
    #[error(
        "slot_failover is on but the primary's synchronized_standby_slots is empty, while it has the physical slots {standbys} (standbys): without the gate the relay may publish what a promoted standby never received, and those events would be on Kafka but not in the database. The relay holds until it is set: ALTER SYSTEM SET synchronized_standby_slots = '{standbys}'; SELECT pg_reload_conf(); (docs/operators.md, \"PostgreSQL 17 and later: failover slots\")",
        standbys = .standbys.join(", ")
    )]
    Off {
        /// The primary's persistent physical slots.
        standbys: Vec<String>,
    },
    /// The gate names slots the server does not have, and it has others.
    #[error(
        "synchronized_standby_slots names {missing} that this server does not have as a physical slot, so PostgreSQL holds logical decoding until it exists; the server's physical slots are {standbys}. Build the standby with that slot (pg_basebackup -C -S {first} -R) or set synchronized_standby_slots to the current standbys' slots (ALTER SYSTEM SET synchronized_standby_slots = '{standbys}'; SELECT pg_reload_conf();); the relay streams as soon as it can (docs/operators.md, \"PostgreSQL 17 and later: failover slots\")",
        missing = .missing.join(", "),
        first = .missing.first().map_or("<slot>", String::as_str),
        standbys = .standbys.join(", ")
    )]
    Missing {
        /// The named slots that are not physical slots here.
        missing: Vec<String>,
        /// The primary's persistent physical slots.
        standbys: Vec<String>,
    },
}

impl GateError {
    /// How many slots the gate names that the server lacks.
    pub fn missing(&self) -> usize {
        match self {
            Self::NoStandby { named } => named.len(),
            Self::Off { .. } => 0,
            Self::Missing { missing, .. } => missing.len(),
        }
    }
}

/// [`GateError::NoStandby`]'s message: the fix depends on whether the gate names a slot.
fn no_standby(named: &[String]) -> String {
    let fix = match named.first() {
        Some(slot) => format!(
            "synchronized_standby_slots names {}, which it lacks, so PostgreSQL would hold the relay's failover slot for ever anyway. Build the new standby with that slot: pg_basebackup -C -S {slot} -R, with sync_replication_slots = on, hot_standby_feedback = on and a dbname in primary_conninfo on it; the relay streams once it has confirmed the WAL",
            named.join(", ")
        ),
        None => "synchronized_standby_slots is empty. Build a standby with a physical slot (pg_basebackup -C -S <slot> -R, with sync_replication_slots = on, hot_standby_feedback = on and a dbname in primary_conninfo on it), then ALTER SYSTEM SET synchronized_standby_slots = '<slot>'; SELECT pg_reload_conf(); the relay streams once the standby has confirmed the WAL".to_owned(),
    };
    format!(
        "this primary has no standby (no physical replication slot), so no server could take over with the relay's slot, and the relay holds (without_standby = \"hold\"): nothing reaches Kafka until there is one, while writes go on and wait in the slot. {fix}. To stream without a standby meanwhile, set without_standby = \"stream\" and restart the relay (docs/operators.md, \"After a promotion that left no standby\")"
    )
}

/// What the relay logs when a session streams without the gate ([`Gate::WithoutStandby`]):
/// what that means, and the fix, given the slots the gate names.
pub fn streaming_without_standby(named: &[String]) -> String {
    let build = match named.first() {
        Some(slot) => format!(
            "build it with the slot synchronized_standby_slots names: pg_basebackup -C -S {slot} -R"
        ),
        None => "build it with a physical slot (pg_basebackup -C -S <slot> -R), then ALTER SYSTEM SET synchronized_standby_slots = '<slot>'; SELECT pg_reload_conf();".to_owned(),
    };
    format!(
        "the primary has no standby (no physical replication slot): the relay streams WITHOUT the standby gate, its slot's failover off (without_standby = \"stream\"). No promotion can happen now, but the next failover is not covered until a standby exists: {build}, with sync_replication_slots = on, hot_standby_feedback = on and a dbname in primary_conninfo on it. Once its physical slot exists the relay goes back behind the gate by itself (docs/operators.md, \"After a promotion that left no standby\")"
    )
}

/// Why a session that streams ends: the gate's decision changed how it may stream.
/// Retried at once, the new way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Change {
    /// Streaming without the gate, a standby's physical slot appeared.
    #[error(
        "the primary has a standby's physical slot again ({}): the session ends, and the relay goes back behind synchronized_standby_slots, its slot a failover slot again, or holds until that setting names the standby's slot",
        .standbys.join(", ")
    )]
    StandbyBack {
        /// The primary's persistent physical slots now.
        standbys: Vec<String>,
    },
    /// Streaming behind the gate, the last physical slot went (`without_standby = "stream"`).
    #[error(
        "the primary has no standby any more (no physical replication slot; synchronized_standby_slots names {}): the session ends, and the relay streams without the gate (without_standby = \"stream\") until a standby is built",
        if .named.is_empty() { "none".to_owned() } else { .named.join(", ") }
    )]
    StandbyGone {
        /// The slots the gate names.
        named: Vec<String>,
    },
}

/// The slot names of a `synchronized_standby_slots` value (a comma-separated list whose
/// names may be double-quoted).
pub fn slot_names(setting: &str) -> Vec<String> {
    setting
        .split(',')
        .map(|name| name.trim().trim_matches('"').to_owned())
        .filter(|name| !name.is_empty())
        .collect()
}

/// What the gate looks like on the server now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GateState {
    /// The slots `synchronized_standby_slots` names (none before PostgreSQL 17).
    pub named: Vec<String>,
    /// Those the server does not have as physical slots.
    pub missing: Vec<String>,
    /// The server's persistent physical slots: its standbys' (a temporary one, such as a
    /// base backup's without `-C`, can be no standby's `primary_slot_name`).
    pub standbys: Vec<String>,
}

/// The catalog's physical slots, each with whether it is temporary.
pub type PhysicalSlots<'a> = &'a [(String, bool)];

impl GateState {
    /// From the setting's value and the server's physical slots. Pure.
    pub fn of(setting: &str, physical: PhysicalSlots<'_>) -> Self {
        let named = slot_names(setting);
        let missing = named
            .iter()
            .filter(|name| !physical.iter().any(|(slot, _)| slot == *name))
            .cloned()
            .collect();
        let standbys = physical
            .iter()
            .filter(|(_, temporary)| !temporary)
            .map(|(slot, _)| slot.clone())
            .collect();
        Self {
            named,
            missing,
            standbys,
        }
    }

    /// Reads the setting and the server's physical slots.
    pub async fn read(sql: &Client) -> Result<Self, tokio_postgres::Error> {
        let row = sql
            .query_one(include_str!("../sql/gate_state.sql"), &[])
            .await?;
        let setting: Option<String> = row.get("setting");
        let names: Vec<String> = row.get("physical");
        let temporary: Vec<bool> = row.get("temporary");
        let physical: Vec<(String, bool)> = names.into_iter().zip(temporary).collect();
        Ok(Self::of(setting.as_deref().unwrap_or_default(), &physical))
    }

    /// How a failover slot may stream, or why it holds (the module doc's rules, in their
    /// order). Pure.
    pub fn decide(&self, without_standby: WithoutStandby) -> Result<Gate, GateError> {
        if !self.named.is_empty() && self.missing.is_empty() {
            return Ok(Gate::Behind);
        }
        if self.standbys.is_empty() {
            return match without_standby {
                WithoutStandby::Stream => Ok(Gate::WithoutStandby),
                WithoutStandby::Hold => Err(GateError::NoStandby {
                    named: self.named.clone(),
                }),
            };
        }
        if self.named.is_empty() {
            return Err(GateError::Off {
                standbys: self.standbys.clone(),
            });
        }
        Err(GateError::Missing {
            missing: self.missing.clone(),
            standbys: self.standbys.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn physical(slots: &[(&str, bool)]) -> Vec<(String, bool)> {
        slots
            .iter()
            .map(|(slot, temporary)| ((*slot).to_owned(), *temporary))
            .collect()
    }

    #[test]
    fn the_setting_lists_slot_names() {
        assert_eq!(slot_names(""), Vec::<String>::new());
        assert_eq!(
            slot_names("standby_1, \"Standby 2\" ,"),
            vec!["standby_1".to_owned(), "Standby 2".to_owned()]
        );
    }

    #[test]
    fn the_state_names_missing_slots_and_counts_only_persistent_ones_as_standbys() {
        let state = GateState::of("a, b", &physical(&[("a", false), ("backup", true)]));
        assert_eq!(state.named, ["a", "b"]);
        assert_eq!(state.missing, ["b"]);
        assert_eq!(state.standbys, ["a"]);
    }

    /// Each rule of the module doc, in its order, under both `without_standby` choices.
    #[test]
    fn a_failover_slot_streams_behind_a_set_gate_without_one_only_with_no_standby_and_holds_otherwise()
     {
        use WithoutStandby::{Hold, Stream};
        // Rule 1: the gate names slots that exist, whatever else there is.
        let set = GateState::of("sb", &physical(&[("sb", false), ("other", false)]));
        for choice in [Stream, Hold] {
            assert_eq!(set.decide(choice), Ok(Gate::Behind));
        }
        // Rule 2: no persistent physical slot. After a promotion the gate names the old
        // standby's slot; an operator may have emptied it; a base backup's temporary slot
        // is no standby.
        for setting in ["sb", ""] {
            let promoted = GateState::of(setting, &physical(&[("backup", true)]));
            assert_eq!(promoted.decide(Stream), Ok(Gate::WithoutStandby));
            let held = promoted.decide(Hold).unwrap_err();
            assert_eq!(
                held,
                GateError::NoStandby {
                    named: slot_names(setting)
                }
            );
            assert_eq!(held.missing(), slot_names(setting).len());
        }
        let note = streaming_without_standby(&["sb".into()]);
        assert!(note.contains("pg_basebackup -C -S sb -R"), "{note}");
        let held = GateState::of("sb", &[])
            .decide(Hold)
            .unwrap_err()
            .to_string();
        assert!(held.contains("pg_basebackup -C -S sb -R"), "{held}");
        assert!(held.contains("without_standby = \"stream\""), "{held}");
        let held = GateState::of("", &[]).decide(Hold).unwrap_err().to_string();
        assert!(
            held.contains("ALTER SYSTEM SET synchronized_standby_slots = '<slot>'"),
            "{held}"
        );
        // Rule 3: a standby's slot exists; the gate is empty or names another.
        let off = GateState::of("", &physical(&[("sb2", false)]));
        for choice in [Stream, Hold] {
            let error = off.decide(choice).unwrap_err();
            assert_eq!(
                error,
                GateError::Off {
                    standbys: vec!["sb2".into()]
                }
            );
            assert!(
                error
                    .to_string()
                    .contains("ALTER SYSTEM SET synchronized_standby_slots = 'sb2'"),
                "{error}"
            );
        }
        let elsewhere = GateState::of("sb", &physical(&[("sb2", false)]));
        for choice in [Stream, Hold] {
            let error = elsewhere.decide(choice).unwrap_err();
            assert_eq!(error.missing(), 1);
            let text = error.to_string();
            assert!(text.contains("names sb that"), "{text}");
            assert!(text.contains("pg_basebackup -C -S sb -R"), "{text}");
            assert!(text.contains("= 'sb2'"), "{text}");
        }
    }

    #[test]
    fn a_session_ends_when_the_decision_changes_how_it_may_stream() {
        use WithoutStandby::{Hold, Stream};
        let promoted = GateState::of("sb", &[]);
        let rebuilding = GateState::of("sb", &physical(&[("sb", false)]));
        let elsewhere = GateState::of("sb", &physical(&[("sb2", false)]));
        let without = Gate::WithoutStandby;
        assert_eq!(without.ended_by(&promoted.decide(Stream), &promoted), None);
        for state in [&rebuilding, &elsewhere] {
            assert_eq!(
                without.ended_by(&state.decide(Stream), state),
                Some(Change::StandbyBack {
                    standbys: state.standbys.clone()
                }),
                "{state:?}"
            );
        }
        // Behind the gate, PostgreSQL holds a missing or lagging standby itself; only
        // `stream` leaves the gate once no standby is left.
        let behind = Gate::Behind;
        assert_eq!(
            behind.ended_by(&rebuilding.decide(Stream), &rebuilding),
            None
        );
        assert_eq!(behind.ended_by(&elsewhere.decide(Stream), &elsewhere), None);
        assert_eq!(behind.ended_by(&promoted.decide(Hold), &promoted), None);
        let gone = behind.ended_by(&promoted.decide(Stream), &promoted);
        assert_eq!(
            gone,
            Some(Change::StandbyGone {
                named: vec!["sb".into()]
            })
        );
        assert!(Gate::Behind.failover());
        assert!(!Gate::WithoutStandby.failover());
    }
}
