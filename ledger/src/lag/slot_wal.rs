//! Whether the server still keeps the WAL the relay's slot needs, and for how much longer:
//! `pg_replication_slots.wal_status` and `safe_wal_size`, and the limit past which
//! PostgreSQL gives up on the slot (`max_slot_wal_keep_size`). Read with the slot's
//! progress (`sql/lag/slot_progress.sql`), every round of `ledger serve`'s gauges.
//!
//! Without a limit a slot nobody consumes keeps every WAL file from its `restart_lsn` on,
//! until the disk is full. With one, a checkpoint that finds the slot needing more
//! invalidates it: the WAL is removed, `restart_lsn` becomes NULL, `wal_status` reads
//! `lost`, and the relay stops and needs `ledger relay recover`. The limit turns a full disk
//! into a lost slot; these readings are the warning before either.
//!
//! How PostgreSQL (15 to 18) computes them (`pg_get_replication_slots`,
//! `GetWALAvailability`), in whole WAL segments from the slot's `restart_lsn`:
//!
//! - **reserved**: the WAL the slot needs is within `max_wal_size`;
//! - **extended**: beyond `max_wal_size`, still kept for the slot (or by `wal_keep_size`);
//! - **unreserved**: beyond the limit: the next checkpoint removes WAL the slot needs. It
//!   goes back to reserved or extended if the slot catches up before that checkpoint;
//! - **lost**: removed, or the slot invalidated for another cause (16 and later have
//!   others): it cannot be used again.
//!
//! `safe_wal_size` is the WAL that can still be written before the slot is unreserved: the
//! limit, plus what is left of the segment its `restart_lsn` is in, minus what the slot
//! keeps already. Negative while unreserved; NULL when the slot is lost, and when there is
//! no limit (`max_slot_wal_keep_size = -1`, the default).

/// `pg_replication_slots.wal_status`, from most to least safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalStatus {
    /// The WAL the slot needs is within `max_wal_size`.
    Reserved,
    /// Beyond `max_wal_size`, still kept.
    Extended,
    /// Beyond the limit: the next checkpoint removes WAL the slot needs.
    Unreserved,
    /// The WAL the slot needs is gone: the slot is invalidated for good.
    Lost,
}

impl WalStatus {
    /// Every status, in PostgreSQL's order.
    pub const ALL: [Self; 4] = [Self::Reserved, Self::Extended, Self::Unreserved, Self::Lost];

    /// PostgreSQL's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reserved => "reserved",
            Self::Extended => "extended",
            Self::Unreserved => "unreserved",
            Self::Lost => "lost",
        }
    }

    /// The status PostgreSQL's word names; `None` for any other (none exists up to 18).
    pub fn parse(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == word)
    }
}

/// The slot's WAL as PostgreSQL reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotWal {
    /// `wal_status`; `None` when PostgreSQL gives none (a slot that never reserved WAL,
    /// which a logical slot always does).
    pub status: Option<WalStatus>,
    /// `safe_wal_size`: bytes of WAL that can still be written before the slot is
    /// unreserved; negative once it is; `None` when the slot is lost or there is no limit.
    pub safe_bytes: Option<i64>,
    /// The limit, in bytes: `max_slot_wal_keep_size` (or `wal_keep_size` when larger, as
    /// `safe_wal_size` counts it), in whole WAL segments as PostgreSQL applies it; `None`
    /// when there is none (`max_slot_wal_keep_size = -1`).
    pub limit_bytes: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_reads_back_from_its_word_and_no_other_word_is_one() {
        for status in WalStatus::ALL {
            assert_eq!(WalStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(WalStatus::parse("Lost"), None);
        assert_eq!(WalStatus::parse(""), None);
    }
}
