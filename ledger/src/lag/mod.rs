//! How far the relay is behind, read from the database: the console's "lag", the lag
//! history it draws, and the service's lag gauges.
//!
//! The signal that tells idle from stuck is how long the oldest commit not yet published
//! has waited ([`SlotProgress::waiting`]): 0 when everything committed is published, however
//! long ago the last write was, and growing from the first unpublished commit on while the
//! relay does not confirm. It is read from the slot's confirmed position and the retention
//! marks (`sql/lag/slot_progress.sql` gives the argument), so it needs no relay process: a
//! dead or frozen relay shows as a wait that grows, where the relay's own gauges vanish or
//! freeze with it. An age since the newest confirmed mark is not this signal: it grows on an
//! idle ledger too (the console once read "at most 357 s" on a healthy, idle one).
//!
//! - [`slot_progress`]: the slot now.
//! - [`exact`]: the relay's own figure, exact while it streams and reports, which the
//!   console, the service's gauge and the alert rules share; the bound above otherwise.
//! - [`slot_wal`]: whether the server still keeps the WAL the slot needs, and for how long.
//! - [`history`]: a sample of it every round, kept a day, for the console's pictures.

pub mod exact;
pub mod history;
pub mod slot_wal;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use self::exact::{Lag, RelayReport};
use self::slot_wal::{SlotWal, WalStatus};

/// How far the relay's slot has come, as the console shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotProgress {
    /// Whether a relay streams from the slot now.
    pub streaming: bool,
    /// Bytes of WAL the slot has not confirmed; `None` when it has confirmed nothing.
    pub lag_bytes: Option<i64>,
    /// Bytes of WAL the slot keeps the server from recycling (from its `restart_lsn`): what
    /// fills the disk while the relay is down. `None` once PostgreSQL invalidated the slot
    /// for removed WAL (its `restart_lsn` is then NULL).
    pub retained_bytes: Option<i64>,
    /// Whether the server still keeps that WAL, and how much more it keeps.
    pub wal: SlotWal,
    /// The time of the newest retention mark the slot confirmed: everything committed before
    /// it is published. `None` until the slot passed a mark.
    pub published_before: Option<DateTime<Utc>>,
    /// When the transaction of the first outbox row that mark does not cover started; `None`
    /// when the mark covers every row, i.e. nothing committed waits.
    pub first_uncovered_row: Option<DateTime<Utc>>,
    /// The relay's own report of its lag, when it wrote one ([`exact`]).
    pub relay: Option<RelayReport>,
}

/// How long the oldest commit not yet published has waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// Every committed outbox row is published.
    Nothing,
    /// Rows may wait; the oldest unpublished commit came after this instant, so it has waited
    /// at most since then. Rows published since the newest mark the slot confirmed count as
    /// waiting until retention's next mark covers them: the bound comes down to the truth
    /// within about one retention round.
    AtMostSince {
        /// The instant.
        since: DateTime<Utc>,
        /// Whether a confirmed mark bounds it (without one, only the rows' own times do,
        /// which stay old while retention is off).
        marked: bool,
    },
}

impl SlotProgress {
    /// How long the oldest commit not yet published has waited.
    pub fn waiting(&self) -> Waiting {
        match (self.first_uncovered_row, self.published_before) {
            (None, _) => Waiting::Nothing,
            (Some(row), None) => Waiting::AtMostSince {
                since: row,
                marked: false,
            },
            (Some(row), Some(mark)) => Waiting::AtMostSince {
                since: row.max(mark),
                marked: true,
            },
        }
    }

    /// The WAL the slot needs, in bytes: what it keeps ([`SlotProgress::retained_bytes`])
    /// or, once PostgreSQL removed that WAL and cleared `restart_lsn`, the WAL written since
    /// its confirmed position, the least a relay would have to read again and which the
    /// server no longer has. So the figure goes on at the loss, a little lower (the
    /// confirmed position is at or after `restart_lsn`) and growing with the WAL, instead of
    /// vanishing the moment the data is lost.
    pub fn needed_wal_bytes(&self) -> Option<i64> {
        self.retained_bytes.or(self.lag_bytes)
    }

    /// The age of the oldest unpublished commit as everyone shows it: the relay's figure
    /// while it streams and reports, else the bound of [`SlotProgress::waiting`]
    /// ([`exact::decide`]).
    pub fn lag(&self) -> Lag {
        exact::decide(self.streaming, self.waiting(), self.relay)
    }

    /// [`SlotProgress::waiting`] in seconds at `now`: 0 when nothing waits.
    pub fn waited_seconds(&self, now: DateTime<Utc>) -> f64 {
        match self.waiting() {
            Waiting::Nothing => 0.0,
            Waiting::AtMostSince { since, .. } => (now - since).as_seconds_f64().max(0.0),
        }
    }
}

/// The progress of the slot `slot`, or `None` when there is no such slot.
pub async fn slot_progress(
    client: &impl GenericClient,
    slot: &str,
) -> Result<Option<SlotProgress>, tokio_postgres::Error> {
    Ok(client
        .query_opt(include_str!("../sql/lag/slot_progress.sql"), &[&slot])
        .await?
        .map(|row| {
            let status: Option<&str> = row.get("wal_status");
            SlotProgress {
                streaming: row.get("streaming"),
                lag_bytes: row.get("lag_bytes"),
                retained_bytes: row.get("retained_bytes"),
                wal: SlotWal {
                    status: status.and_then(WalStatus::parse),
                    safe_bytes: row.get("safe_wal_bytes"),
                    limit_bytes: row.get("wal_keep_limit_bytes"),
                },
                published_before: row.get("published_before"),
                first_uncovered_row: row.get("first_uncovered_row"),
                relay: report_in(&row),
            }
        }))
}

/// The relay's report of slot `slot` and whether a relay streams from it, read without the
/// rest of [`slot_progress`]: cheap enough to read five times a second. `None`: no slot.
pub async fn relay_report(
    client: &impl GenericClient,
    slot: &str,
) -> Result<Option<(bool, Option<RelayReport>)>, tokio_postgres::Error> {
    Ok(client
        .query_opt(include_str!("../sql/lag/relay_report.sql"), &[&slot])
        .await?
        .map(|row| (row.get("streaming"), report_in(&row))))
}

/// The report in a row of `slot_progress.sql` or `relay_report.sql`.
fn report_in(row: &tokio_postgres::Row) -> Option<RelayReport> {
    let reported: bool = row.get("relay_reported");
    reported.then(|| RelayReport {
        oldest_unconfirmed: row.get("relay_oldest_unconfirmed"),
        age: chrono::Duration::milliseconds(
            row.get::<_, Option<i64>>("relay_report_age_ms")
                .unwrap_or(0),
        ),
    })
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone};

    use super::*;

    fn progress(mark: Option<DateTime<Utc>>, row: Option<DateTime<Utc>>) -> SlotProgress {
        SlotProgress {
            streaming: true,
            lag_bytes: Some(4_096),
            retained_bytes: Some(8_192),
            wal: SlotWal::default(),
            published_before: mark,
            first_uncovered_row: row,
            relay: None,
        }
    }

    /// Idle: the newest confirmed mark is an hour old, WAL has moved since (heartbeats, other
    /// databases), and no row is uncovered: nothing waits. The old reading, the age of the
    /// mark, said an hour.
    #[test]
    fn an_idle_ledger_waits_for_nothing_however_old_the_mark() {
        let now = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
        let idle = progress(Some(now - Duration::hours(1)), None);
        assert_eq!(idle.waiting(), Waiting::Nothing);
        assert_eq!(idle.waited_seconds(now), 0.0);
    }

    /// A slot PostgreSQL invalidated for removed WAL has no `restart_lsn`: the WAL it needs
    /// is then counted from its confirmed position; otherwise from `restart_lsn`.
    #[test]
    fn a_lost_slot_needs_the_wal_since_its_confirmed_position() {
        let kept = progress(None, None);
        assert_eq!(kept.needed_wal_bytes(), Some(8_192));
        let lost = SlotProgress {
            retained_bytes: None,
            ..kept
        };
        assert_eq!(lost.needed_wal_bytes(), Some(4_096));
    }

    /// Stuck: a row written 90 s ago after a mark of an hour ago waits since the row.
    #[test]
    fn a_row_after_the_mark_waits_since_its_transaction_began() {
        let now = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
        let stuck = progress(
            Some(now - Duration::hours(1)),
            Some(now - Duration::seconds(90)),
        );
        assert_eq!(stuck.waited_seconds(now), 90.0);
        // A row whose transaction began before the mark (it was running when the mark was
        // taken) committed after the mark: the mark's time bounds it.
        let long = progress(
            Some(now - Duration::seconds(30)),
            Some(now - Duration::hours(2)),
        );
        assert_eq!(long.waited_seconds(now), 30.0);
        assert_eq!(
            progress(None, Some(now - Duration::seconds(5))).waiting(),
            Waiting::AtMostSince {
                since: now - Duration::seconds(5),
                marked: false
            }
        );
    }
}
