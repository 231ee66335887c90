//! The standby gate of PostgreSQL 17 and later: `synchronized_standby_slots` on the primary
//! names the physical slots of the standbys that may be promoted, and a logical walsender
//! of a failover slot sends nothing those standbys have not flushed. With it, the relay
//! can never publish what a promoted standby will lack.
//!
//! The gate also fails in silence: when it names a slot the server does not have (after a
//! promotion, the new primary keeps the old primary's setting, naming its own former
//! slot), decoding waits for ever and PostgreSQL says so only in its own log. So the relay
//! checks it before streaming ([`check`]) and, while streaming, samples its own walsender's
//! wait event ([`super::health`]).

use tokio_postgres::Client;

use super::RelayError;

/// The wait event of a logical walsender held back by the gate (PostgreSQL 17+).
pub const GATE_WAIT_EVENT: &str = "WaitForStandbyConfirmation";

/// Why the gate keeps the relay from streaming.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    /// Failover slots without a gate.
    #[error(
        "slot_failover is on but the primary's synchronized_standby_slots is empty: without it the relay may publish what a promoted standby never received, and those events would be on Kafka but not in the database. Set synchronized_standby_slots to the standbys' physical slots (docs/operators.md, \"Failover\")"
    )]
    Off,
    /// The gate names slots the server does not have.
    #[error(
        "synchronized_standby_slots names {} that this server does not have as a physical slot, so PostgreSQL holds logical decoding until it exists. After a promotion, build the new standby with that slot (pg_basebackup -C -S <slot>) or set synchronized_standby_slots to the current standbys' slots; the relay streams as soon as it can (docs/operators.md, \"Failover\")",
        .missing.join(", ")
    )]
    Missing {
        /// The named slots that are not physical slots here.
        missing: Vec<String>,
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

/// What the gate looks like on the server now: the named slots, and those of them that
/// are not physical slots here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GateState {
    /// The slots `synchronized_standby_slots` names (none before PostgreSQL 17).
    pub named: Vec<String>,
    /// Those the server does not have as physical slots.
    pub missing: Vec<String>,
}

impl GateState {
    /// Reads the setting and the slots it names.
    pub async fn read(sql: &Client) -> Result<Self, RelayError> {
        let setting: Option<String> = sql
            .query_one(
                "SELECT current_setting('synchronized_standby_slots', true)",
                &[],
            )
            .await?
            .get(0);
        let named = slot_names(setting.as_deref().unwrap_or_default());
        if named.is_empty() {
            return Ok(Self::default());
        }
        let missing = sql
            .query(include_str!("../sql/gate_missing.sql"), &[&named])
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        Ok(Self { named, missing })
    }

    /// Whether a failover slot may stream behind this gate. Pure.
    pub fn verdict(&self) -> Result<(), GateError> {
        if self.named.is_empty() {
            return Err(GateError::Off);
        }
        if !self.missing.is_empty() {
            return Err(GateError::Missing {
                missing: self.missing.clone(),
            });
        }
        Ok(())
    }
}

/// Before a failover slot streams: the gate must be set, and name only slots that exist.
pub async fn check(sql: &Client) -> Result<(), RelayError> {
    Ok(GateState::read(sql).await?.verdict()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_lists_slot_names() {
        assert_eq!(slot_names(""), Vec::<String>::new());
        assert_eq!(
            slot_names("standby_1, \"Standby 2\" ,"),
            vec!["standby_1".to_owned(), "Standby 2".to_owned()]
        );
    }

    #[test]
    fn a_gate_must_be_set_and_name_slots_that_exist() {
        assert_eq!(GateState::default().verdict(), Err(GateError::Off));
        let missing = GateState {
            named: vec!["a".into(), "b".into()],
            missing: vec!["b".into()],
        };
        let error = missing.verdict().unwrap_err();
        assert!(error.to_string().contains("names b that"), "{error}");
        let set = GateState {
            named: vec!["a".into()],
            missing: vec![],
        };
        assert_eq!(set.verdict(), Ok(()));
    }
}
