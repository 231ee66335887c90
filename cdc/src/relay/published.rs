//! The relay's own record of what Kafka holds: `relay_slots.published_lsn` (migration V20),
//! the one fact outbox retention deletes on.
//!
//! The slot's confirmed position is not that fact: PostgreSQL sets it at a new slot's
//! consistent point before the snapshot's rows are in Kafka, and a DBA's
//! `pg_replication_slot_advance` or a peek moves it past rows nobody published. The record
//! is written by the relay alone, after Kafka acknowledged (what the reader confirms is
//! what the delivery says Kafka has durably, [`super::reader`]), under the registration
//! generation the session started in and while that registration is ready, with the
//! server's system identifier. A snapshot writes the generation's first record itself
//! ([`super::recover`]).
//!
//! It is also never ahead of the slot: the record is the lesser of what the relay confirmed
//! and the slot's position as PostgreSQL has it (`sql/record_published.sql`). Else a crash
//! between the record and PostgreSQL hearing of the confirm would leave outbox rows deleted
//! that the slot resends, and exactly once's rule 7 ([`crate::history`]) would refuse a
//! healthy relay as rewound: the protocol model found that (docs/protocol.md).
//!
//! How often: at most once per [`RECORD_EVERY`] while the stream moves, and once more at a
//! clean stop. Retention rounds are ten seconds apart, so a second costs nothing there, and
//! an idle relay writes nothing: the record's own transaction carries no outbox row, and
//! pgoutput sends no empty transaction, so it never moves what the relay confirms.

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use super::RelayError;
use crate::lsn::format_lsn;

/// The least time between two records while the stream moves.
pub(super) const RECORD_EVERY: Duration = Duration::from_secs(1);

/// Where the session's record stands.
#[derive(Debug)]
pub(super) struct Published {
    slot: String,
    generation: i64,
    system_id: String,
    /// The last LSN recorded by this session (0: none yet).
    recorded: u64,
    /// When it was recorded.
    at: Option<Instant>,
}

impl Published {
    /// The record of `slot` on the server `system_id`, under registration `generation`.
    pub(super) fn new(slot: &str, generation: i64, system_id: &str) -> Self {
        Self {
            slot: slot.to_owned(),
            generation,
            system_id: system_id.to_owned(),
            recorded: 0,
            at: None,
        }
    }

    /// Whether `confirmed` is worth a record now: past the last one, and (unless `now`)
    /// at least [`RECORD_EVERY`] after it. Pure.
    pub(super) fn due(&self, confirmed: u64, now: bool, at: Instant) -> bool {
        confirmed > self.recorded
            && (now
                || self
                    .at
                    .is_none_or(|last| at.duration_since(last) >= RECORD_EVERY))
    }

    /// Records that Kafka holds every outbox row committed below `confirmed`, when due
    /// ([`Self::due`]). `confirmed` must be what the delivery said Kafka has.
    pub(super) async fn record(
        &mut self,
        sql: &Client,
        confirmed: u64,
        now: bool,
    ) -> Result<(), RelayError> {
        let at = Instant::now();
        if !self.due(confirmed, now, at) {
            return Ok(());
        }
        let lsn = format_lsn(confirmed);
        let written: Option<u64> = sql
            .query_opt(
                include_str!("../sql/record_published.sql"),
                &[&self.slot, &self.generation, &self.system_id, &lsn],
            )
            .await?
            .and_then(|row| crate::lsn::parse_lsn(&row.get::<_, String>(0)));
        match written {
            // PostgreSQL may not have heard of the confirm yet: the rest next time.
            Some(written) => self.recorded = written,
            None => tracing::debug!(
                slot = %self.slot,
                generation = self.generation,
                "nothing recorded of what Kafka holds: PostgreSQL has not confirmed the slot that far yet, or the registration is not ready or of another generation (a recovery began?); retention keeps the outbox rows until it is"
            ),
        }
        self.at = Some(at);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_due_once_a_second_while_the_stream_moves_and_at_a_clean_stop() {
        let mut published = Published::new("s", 1, "7");
        let start = Instant::now();
        assert!(!published.due(0, true, start), "nothing confirmed yet");
        assert!(published.due(10, false, start), "the first one at once");
        published.recorded = 10;
        published.at = Some(start);
        assert!(!published.due(10, true, start), "nothing new");
        assert!(!published.due(20, false, start + RECORD_EVERY / 2));
        assert!(
            published.due(20, true, start + RECORD_EVERY / 2),
            "a clean stop"
        );
        assert!(published.due(20, false, start + RECORD_EVERY));
    }
}
