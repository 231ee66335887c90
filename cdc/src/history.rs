//! Which history a server is on, and whether a position the relay stored belongs to it.
//! Pure: no I/O; the relay feeds it what `IDENTIFY_SYSTEM`, `TIMELINE_HISTORY` and
//! `pg_replication_slots` said, and whether the outbox holds an event.
//!
//! # Why a position needs more than an LSN
//!
//! An LSN names a place in one server's write-ahead log. After a failover, a point-in-time
//! restore or a new cluster, the same numbers name other transactions:
//! - a promoted standby starts a new timeline at a switch point, and reuses every LSN after
//!   it for transactions the old primary never had;
//! - a server restored from a backup or a file-system snapshot goes back to lower LSNs, and
//!   writes new transactions over the numbers Kafka already holds;
//! - another cluster, or another database sharing the slot name, has nothing to do with it.
//!
//! Skipping "every transaction at or below the stored LSN" on any of those skips new
//! transactions in silence. So the exactly-once position records the system identifier,
//! the timeline and the database with the LSN ([`Identity`]), and [`resume`] decides from
//! them, the server's identity and its timeline history whether the position still names a
//! point of this server's past:
//!
//! 1. another system identifier or database: refused ([`HistoryError::Foreign`]);
//! 2. a lower timeline than the stored one: the old primary is back ([`HistoryError::OlderTimeline`]);
//! 3. a higher timeline: the stored timeline must be an ancestor, and the position at or
//!    before its switch point (the history both servers share). Past it, Kafka holds
//!    transactions the new primary never had ([`HistoryError::Diverged`]);
//! 4. the position must not be ahead of the server's WAL ([`HistoryError::Ahead`]);
//! 5. the slot must not be ahead of the position: the relay (in either mode) confirms the
//!    slot only once Kafka holds a position at or past it, so a slot past the position means
//!    it was moved by something else, and what lies between is not in Kafka
//!    ([`HistoryError::Gap`]);
//! 6. the database's heartbeat count must not be below the position's: every heartbeat
//!    bumps it in the transaction that writes the heartbeat to the WAL, so a database
//!    restored from a copy taken before a heartbeat the position covers has a lower count,
//!    however far it has written since ([`HistoryError::Restored`]). Rule 4 misses that
//!    case once the restored server's WAL has passed the position again.
//! 7. the newest event Kafka holds, when its transaction committed after the slot's
//!    confirmed position, must still be in the outbox: retention never removes a row the
//!    slot has not confirmed, so a database without it was restored or rewound to before
//!    that commit, and its new transactions reuse the LSNs Kafka holds
//!    ([`HistoryError::Rewound`]). It catches a restore rules 4 and 6 miss: one whose WAL
//!    has passed the position again, from a copy taken after the last heartbeat the
//!    position covers. [`must_hold`] names the event to look up (none when the slot
//!    confirmed it: retention may have removed it since), the relay asks the outbox, and
//!    [`still_held`] decides.
//!
//! [`resume`] applies rules 1 to 6; exactly once applies rule 7 after them. When all hold,
//! the transactions at or below the position are the same ones Kafka holds: below a switch
//! point the two timelines' WAL is one and the same.
//!
//! At least once skips nothing on a position's account, so [`continues`] applies only what
//! would make it publish from the wrong server or lose: rules 1 to 3 (not the divergence:
//! at least once never skips the new timeline's transactions), and rule 5.

use std::fmt;

use crate::lsn::format_lsn;

/// A server's identity as `IDENTIFY_SYSTEM` gives it, and the database of the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The cluster's system identifier (decimal): the same on a primary and its standbys,
    /// another on any other cluster.
    pub system_id: String,
    /// The timeline: 1 from `initdb`, one more at each promotion or archive recovery.
    pub timeline: u32,
    /// The database.
    pub database: String,
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "system {} timeline {} database {}",
            self.system_id, self.timeline, self.database
        )
    }
}

/// Where one ancestor timeline of a server ended: the server's history file says that
/// `timeline` switched to its child at `switch_point`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelineSwitch {
    /// The ancestor timeline.
    pub timeline: u32,
    /// The first LSN that is no longer its own.
    pub switch_point: u64,
}

/// Parses a timeline history file (`TIMELINE_HISTORY`'s content): one line per ancestor,
/// `<timeline> <switch point> <reason>`, comments and blank lines ignored. `None` when a
/// line does not parse: a server whose history cannot be read cannot be trusted.
pub fn parse_history(content: &str) -> Option<Vec<TimelineSwitch>> {
    let mut switches = Vec::new();
    for line in content.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let timeline = fields.next()?.parse().ok()?;
        let switch_point = crate::lsn::parse_lsn(fields.next()?)?;
        switches.push(TimelineSwitch {
            timeline,
            switch_point,
        });
    }
    Some(switches)
}

/// What the relay stored about where Kafka stands: the server it read from, and the end
/// LSN of the last transaction Kafka holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The server's identity when the position was written.
    pub identity: Identity,
    /// End LSN of the last PostgreSQL transaction Kafka holds.
    pub end_lsn: u64,
    /// The slot's heartbeat count then, when the position carries one.
    pub heartbeats: Option<u64>,
    /// The newest event Kafka holds from the slot, when the position names one (rule 7).
    pub last_event: Option<NewestEvent>,
}

/// The newest event Kafka holds from a slot: an outbox row's event id and the commit LSN
/// of its transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewestEvent {
    /// The event id.
    pub id: String,
    /// The commit LSN of its transaction.
    pub commit_lsn: u64,
}

/// What the relay knows of the server now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// Its identity.
    pub identity: Identity,
    /// Its WAL flush position (`IDENTIFY_SYSTEM`'s `xlogpos`).
    pub wal_flush: u64,
    /// Its ancestors' switch points (empty on timeline 1).
    pub history: Vec<TimelineSwitch>,
    /// The slot's confirmed position.
    pub slot_confirmed: u64,
    /// The slot's heartbeat count in the database (`relay_slots.heartbeats`).
    pub heartbeats: u64,
}

/// Why a stored position does not describe this server's past. Each says what happened
/// and what to do (the relay stops: resuming would skip or repeat transactions in silence).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    /// The position was written by a relay of another cluster or database.
    #[error(
        "the relay's position belongs to {stored}, but this server is {server}. Two deployments share a slot name and a position topic, or the database was replaced: give each deployment its own slot or topic prefix; if this database replaced the old one on purpose, run `ledger relay recover` (docs/operators.md, \"Failover\")"
    )]
    Foreign {
        /// Where the position came from.
        stored: Identity,
        /// This server.
        server: Identity,
    },
    /// The server is on a timeline older than the position's: an old primary came back.
    #[error(
        "this server is on timeline {server} but the relay already published from timeline {stored}: this is an old primary that came back after a failover. Point the relay at the current primary (a multi-host URL with target_session_attrs=read-write) and keep the old one out of service"
    )]
    OlderTimeline {
        /// The position's timeline.
        stored: u32,
        /// The server's.
        server: u32,
    },
    /// The position's timeline is not an ancestor of the server's.
    #[error(
        "the relay published from timeline {stored}, which is not in the history of this server's timeline {server}: it was not promoted from that server. Run `ledger relay recover` once you know which server is the primary (docs/operators.md, \"Failover\")"
    )]
    UnknownTimeline {
        /// The position's timeline.
        stored: u32,
        /// The server's.
        server: u32,
    },
    /// Kafka holds transactions of the old timeline after its switch point.
    #[error(
        "Kafka holds transactions up to {} of timeline {timeline}, but this server left that timeline at {}: the standby was promoted before it had received everything the relay published, so Kafka has events this database never had. Set synchronized_standby_slots on the primary so this cannot happen; to go on, check with `ledger reconcile` what Kafka has that the database lacks, then run `ledger relay recover` (docs/operators.md, \"Failover\")",
        format_lsn(*.position), format_lsn(*.switch_point)
    )]
    Diverged {
        /// The position's timeline.
        timeline: u32,
        /// Where the server's history left it.
        switch_point: u64,
        /// The position.
        position: u64,
    },
    /// The position is ahead of everything the server has written.
    #[error(
        "the relay's position {} is ahead of this server's WAL ({}): the database was restored to an earlier point, so Kafka holds events it no longer has. Run `ledger relay recover` to publish from this server's history on (docs/operators.md, \"Restores\")",
        format_lsn(*.position), format_lsn(*.wal_flush)
    )]
    Ahead {
        /// The position.
        position: u64,
        /// The server's WAL flush position.
        wal_flush: u64,
    },
    /// The newest event Kafka holds is missing from a database that never confirmed it.
    #[error(
        "Kafka holds event {event_id}, committed at {} after the slot's confirmed position, but this database has no such outbox row: it was restored or rewound to a point before that commit, and its new transactions reuse the LSNs Kafka holds. Run `ledger relay recover` to publish from this server's history on (docs/operators.md, \"Restores\")",
        format_lsn(*.commit_lsn)
    )]
    Rewound {
        /// The event.
        event_id: String,
        /// Its commit LSN.
        commit_lsn: u64,
    },
    /// The database's heartbeat count is below the position's: it was restored.
    #[error(
        "Kafka holds a position written after the slot's heartbeat {stored}, but this database's count is {database}: it was restored from a copy taken before that heartbeat, and the LSNs it has written since name other transactions than the ones Kafka holds. Run `ledger relay recover` to publish from this server's history on (docs/operators.md, \"Restores\")"
    )]
    Restored {
        /// The position's count.
        stored: u64,
        /// The database's.
        database: u64,
    },
    /// The slot was moved past what Kafka holds.
    #[error(
        "the slot is confirmed to {} but Kafka holds transactions only up to {}: something other than the relay advanced the slot (pg_replication_slot_advance, or a slot created anew), and the transactions between are not in Kafka. Run `ledger relay recover` to publish the outbox rows still kept (docs/operators.md, \"Failover\")",
        format_lsn(*.confirmed), format_lsn(*.position)
    )]
    Gap {
        /// The slot's confirmed position.
        confirmed: u64,
        /// The position.
        position: u64,
    },
}

/// Whether the relay may resume from `stored` on `server`: `Ok` when the transactions at
/// or below the stored position are the ones Kafka holds (see the module doc).
pub fn resume(stored: &Stored, server: &Server) -> Result<(), HistoryError> {
    let (ours, theirs) = (&stored.identity, &server.identity);
    if ours.system_id != theirs.system_id || ours.database != theirs.database {
        return Err(HistoryError::Foreign {
            stored: ours.clone(),
            server: theirs.clone(),
        });
    }
    if theirs.timeline < ours.timeline {
        return Err(HistoryError::OlderTimeline {
            stored: ours.timeline,
            server: theirs.timeline,
        });
    }
    if theirs.timeline > ours.timeline {
        let switch = server
            .history
            .iter()
            .find(|switch| switch.timeline == ours.timeline)
            .ok_or(HistoryError::UnknownTimeline {
                stored: ours.timeline,
                server: theirs.timeline,
            })?;
        if stored.end_lsn > switch.switch_point {
            return Err(HistoryError::Diverged {
                timeline: ours.timeline,
                switch_point: switch.switch_point,
                position: stored.end_lsn,
            });
        }
    }
    if stored.end_lsn > server.wal_flush {
        return Err(HistoryError::Ahead {
            position: stored.end_lsn,
            wal_flush: server.wal_flush,
        });
    }
    gap(stored, server)?;
    if let Some(count) = stored.heartbeats
        && server.heartbeats < count
    {
        return Err(HistoryError::Restored {
            stored: count,
            database: server.heartbeats,
        });
    }
    Ok(())
}

/// Rule 5: the slot is not ahead of the position.
fn gap(stored: &Stored, server: &Server) -> Result<(), HistoryError> {
    if server.slot_confirmed > stored.end_lsn {
        return Err(HistoryError::Gap {
            confirmed: server.slot_confirmed,
            position: stored.end_lsn,
        });
    }
    Ok(())
}

/// Rule 7's question: the event the outbox must still hold for `stored` to describe this
/// database, if any. The newest event Kafka holds, when its transaction committed after
/// the slot's confirmed position; at or below it, retention may have removed its row, and
/// nothing is asked.
pub fn must_hold<'a>(stored: &'a Stored, server: &Server) -> Option<&'a NewestEvent> {
    stored
        .last_event
        .as_ref()
        .filter(|event| event.commit_lsn > server.slot_confirmed)
}

/// Rule 7's verdict on the event [`must_hold`] named, once the outbox was asked: `held`
/// when it has the event's row.
pub fn still_held(event: &NewestEvent, held: bool) -> Result<(), HistoryError> {
    if held {
        return Ok(());
    }
    Err(HistoryError::Rewound {
        event_id: event.id.clone(),
        commit_lsn: event.commit_lsn,
    })
}

/// Whether at least once may stream from `server` given the newest position `stored`
/// (rules 1 to 3 but the divergence, and rule 5 when `both_modes_record`: the position was
/// written by a relay whose both modes write positions before they confirm, so the slot
/// cannot be ahead of it but by something else).
pub fn continues(
    stored: &Stored,
    server: &Server,
    both_modes_record: bool,
) -> Result<(), HistoryError> {
    follows(&stored.identity, &server.identity)?;
    if server.identity.timeline > stored.identity.timeline
        && !server
            .history
            .iter()
            .any(|switch| switch.timeline == stored.identity.timeline)
    {
        return Err(HistoryError::UnknownTimeline {
            stored: stored.identity.timeline,
            server: server.identity.timeline,
        });
    }
    if both_modes_record {
        gap(stored, server)?;
    }
    Ok(())
}

/// The server an earlier session of this process streamed from, against the one a new
/// session reached: another cluster, or a lower timeline (an old primary back), is refused.
/// What at-least-once delivery checks, having no stored position: within one process, a
/// reconnect never goes back to an old primary.
pub fn follows(earlier: &Identity, now: &Identity) -> Result<(), HistoryError> {
    if earlier.system_id != now.system_id || earlier.database != now.database {
        return Err(HistoryError::Foreign {
            stored: earlier.clone(),
            server: now.clone(),
        });
    }
    if now.timeline < earlier.timeline {
        return Err(HistoryError::OlderTimeline {
            stored: earlier.timeline,
            server: now.timeline,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(timeline: u32) -> Identity {
        Identity {
            system_id: "7321".into(),
            timeline,
            database: "ledger".into(),
        }
    }

    fn server(timeline: u32, history: &[(u32, u64)]) -> Server {
        Server {
            identity: identity(timeline),
            wal_flush: 10_000,
            history: history
                .iter()
                .map(|&(timeline, switch_point)| TimelineSwitch {
                    timeline,
                    switch_point,
                })
                .collect(),
            slot_confirmed: 500,
            heartbeats: 40,
        }
    }

    fn stored(timeline: u32, end_lsn: u64) -> Stored {
        Stored {
            identity: identity(timeline),
            end_lsn,
            heartbeats: None,
            last_event: None,
        }
    }

    #[test]
    fn the_newest_event_is_looked_up_above_the_slot_only_and_must_be_there() {
        // The slot confirmed 500 (`server`).
        let with_event = |commit_lsn| Stored {
            last_event: Some(NewestEvent {
                id: "e-1".into(),
                commit_lsn,
            }),
            ..stored(1, 600)
        };
        let server = server(1, &[]);
        assert_eq!(must_hold(&stored(1, 600), &server), None, "no event named");
        assert_eq!(
            must_hold(&with_event(500), &server),
            None,
            "confirmed by the slot: retention may have removed it"
        );
        let above = with_event(501);
        let event = must_hold(&above, &server).expect("above the slot: looked up");
        assert_eq!(event.id, "e-1");
        assert_eq!(still_held(event, true), Ok(()));
        let error = still_held(event, false).unwrap_err();
        assert_eq!(
            error,
            HistoryError::Rewound {
                event_id: "e-1".into(),
                commit_lsn: 501
            }
        );
        assert!(
            error.to_string().contains("ledger relay recover"),
            "says what to run: {error}"
        );
    }

    #[test]
    fn a_database_whose_heartbeats_went_back_was_restored() {
        let counted = |heartbeats| Stored {
            heartbeats: Some(heartbeats),
            ..stored(1, 600)
        };
        assert_eq!(resume(&counted(40), &server(1, &[])), Ok(()));
        assert_eq!(resume(&counted(12), &server(1, &[])), Ok(()));
        // The sketch: the WAL passed the position again, so rule 4 holds; the
        // count did not come back.
        assert_eq!(
            resume(&counted(65), &server(1, &[])),
            Err(HistoryError::Restored {
                stored: 65,
                database: 40
            })
        );
        assert_eq!(
            resume(&stored(1, 600), &server(1, &[])),
            Ok(()),
            "a position of an older relay carries no count"
        );
    }

    #[test]
    fn at_least_once_refuses_another_history_but_not_a_divergence_or_a_restore() {
        let server_2 = server(2, &[(1, 800)]);
        assert_eq!(
            continues(&stored(1, 900), &server_2, true),
            Ok(()),
            "diverged: no loss"
        );
        assert_eq!(
            continues(&stored(2, 600), &server(1, &[]), true),
            Err(HistoryError::OlderTimeline {
                stored: 2,
                server: 1
            })
        );
        assert_eq!(
            continues(&stored(3, 600), &server(4, &[(1, 10), (2, 20)]), true),
            Err(HistoryError::UnknownTimeline {
                stored: 3,
                server: 4
            })
        );
        let mut other = server(1, &[]);
        other.identity.system_id = "9".into();
        assert!(matches!(
            continues(&stored(1, 600), &other, true),
            Err(HistoryError::Foreign { .. })
        ));
        assert_eq!(
            continues(&stored(1, 400), &server(1, &[]), true),
            Err(HistoryError::Gap {
                confirmed: 500,
                position: 400
            })
        );
        assert_eq!(
            continues(&stored(1, 400), &server(1, &[]), false),
            Ok(()),
            "an older relay's at least once moved the slot without writing positions"
        );
        let restored = Stored {
            heartbeats: Some(99),
            ..stored(1, 20_000)
        };
        assert_eq!(continues(&restored, &server(1, &[]), true), Ok(()));
    }

    #[test]
    fn a_history_file_parses_and_garbage_does_not() {
        let content =
            "1\t0/3000160\tno recovery target specified\n\n# comment\n2\t1/A0\tbefore 2026-01-01\n";
        assert_eq!(
            parse_history(content),
            Some(vec![
                TimelineSwitch {
                    timeline: 1,
                    switch_point: 0x300_0160
                },
                TimelineSwitch {
                    timeline: 2,
                    switch_point: 0x1_0000_00A0
                },
            ])
        );
        assert_eq!(parse_history(""), Some(vec![]));
        assert_eq!(parse_history("one 0/1 x"), None);
        assert_eq!(parse_history("1 zz x"), None);
        assert_eq!(parse_history("1"), None);
    }

    #[test]
    fn the_same_timeline_resumes_within_the_wal_and_behind_the_slot() {
        assert_eq!(resume(&stored(1, 600), &server(1, &[])), Ok(()));
        assert_eq!(resume(&stored(1, 500), &server(1, &[])), Ok(()));
        assert_eq!(
            resume(&stored(1, 20_000), &server(1, &[])),
            Err(HistoryError::Ahead {
                position: 20_000,
                wal_flush: 10_000
            })
        );
        assert_eq!(
            resume(&stored(1, 400), &server(1, &[])),
            Err(HistoryError::Gap {
                confirmed: 500,
                position: 400
            })
        );
    }

    #[test]
    fn another_cluster_or_database_is_foreign() {
        let mut other = server(1, &[]);
        other.identity.system_id = "9999".into();
        assert!(matches!(
            resume(&stored(1, 600), &other),
            Err(HistoryError::Foreign { .. })
        ));
        let mut other_database = server(1, &[]);
        other_database.identity.database = "staging".into();
        let error = resume(&stored(1, 600), &other_database).unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("database ledger") && text.contains("database staging"),
            "names both identities: {text}"
        );
    }

    #[test]
    fn a_failover_resumes_only_from_the_shared_history() {
        // Promoted at 800: the position at 600 is in the history both servers share.
        assert_eq!(resume(&stored(1, 600), &server(2, &[(1, 800)])), Ok(()));
        assert_eq!(resume(&stored(1, 800), &server(2, &[(1, 800)])), Ok(()));
        // Past it: Kafka holds what the new primary never had.
        assert_eq!(
            resume(&stored(1, 900), &server(2, &[(1, 800)])),
            Err(HistoryError::Diverged {
                timeline: 1,
                switch_point: 800,
                position: 900
            })
        );
        // Two failovers: timeline 1 ended at 700, timeline 2 at 900.
        assert_eq!(
            resume(&stored(1, 600), &server(3, &[(1, 700), (2, 900)])),
            Ok(())
        );
        assert!(matches!(
            resume(&stored(1, 800), &server(3, &[(1, 700), (2, 900)])),
            Err(HistoryError::Diverged {
                switch_point: 700,
                ..
            })
        ));
        assert_eq!(
            resume(&stored(2, 600), &server(3, &[(1, 700)])),
            Err(HistoryError::UnknownTimeline {
                stored: 2,
                server: 3
            })
        );
        assert_eq!(
            resume(&stored(2, 600), &server(1, &[])),
            Err(HistoryError::OlderTimeline {
                stored: 2,
                server: 1
            })
        );
    }

    #[test]
    fn a_reconnect_never_goes_back_to_an_old_primary() {
        assert_eq!(follows(&identity(1), &identity(1)), Ok(()));
        assert_eq!(follows(&identity(1), &identity(2)), Ok(()));
        assert!(matches!(
            follows(&identity(2), &identity(1)),
            Err(HistoryError::OlderTimeline { .. })
        ));
        let mut other = identity(1);
        other.system_id = "1".into();
        assert!(matches!(
            follows(&identity(1), &other),
            Err(HistoryError::Foreign { .. })
        ));
    }
}
