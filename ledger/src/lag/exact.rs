//! The age of the oldest commit not yet published, as the console, the service's gauge
//! (`ra_outbox_oldest_unpublished_commit_age_seconds`) and the alert rules say it: the
//! relay's own figure while it streams and reports, else the database's bound, said to be
//! one (issue 48).
//!
//! The relay knows exactly what waits: the commit times it read and what Kafka has
//! acknowledged (`ra_relay_oldest_unconfirmed_commit_age_seconds`). It writes the oldest
//! unconfirmed commit to `relay_lag_reports` every 200 ms when it changed, every second
//! anyway (`ra_ledger_cdc::relay::lag_report`). The database alone knows less: the slot's
//! confirmed position and the retention marks bound the wait from above, and the bound came
//! down to the truth only at retention's next mark (the console read "waited at most 11 s"
//! after every burst the relay had published in under a second). So [`decide`] applies, in
//! this order:
//!
//! 1. no slot streams: [`BoundReason::NotStreaming`]. A relay that is not streaming does
//!    not see what commits meanwhile, so its last report may say 0 while rows wait;
//! 2. no report from the relay for this slot (a relay older than migration V18, or the
//!    table emptied by a crash): [`BoundReason::NoReport`];
//! 3. a report older than [`REPORT_FRESH`] (the relay frozen, or unable to write it):
//!    [`BoundReason::StaleReport`];
//! 4. otherwise the relay's figure, exact: [`Lag::Exact`].

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Waiting;

/// A report at most this old is the relay's present: it writes one every second at least,
/// so an older one is a relay frozen or cut off from the database. While a frozen relay's
/// last report is still fresh, the figure can miss a commit for at most this long.
pub const REPORT_FRESH: Duration = Duration::from_secs(2);

/// The relay's last report for its slot, as read from the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayReport {
    /// Commit time of the oldest transaction the relay read and has not confirmed; `None`
    /// when everything it read is confirmed.
    pub oldest_unconfirmed: Option<DateTime<Utc>>,
    /// How old the report was when read (the database's clock on both sides).
    pub age: chrono::Duration,
}

/// Why the age is a bound from the database and not the relay's figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundReason {
    /// No relay streams from the slot.
    NotStreaming,
    /// The relay has written no report for the slot.
    NoReport,
    /// The relay's report is this old.
    StaleReport(chrono::Duration),
}

impl BoundReason {
    /// The reason in words, for the console and the logs.
    pub fn describe(self) -> String {
        match self {
            Self::NotStreaming => "no relay streams from the slot".to_owned(),
            Self::NoReport => {
                "the relay has not reported its lag (a relay before migration V18?)".to_owned()
            }
            Self::StaleReport(age) => format!(
                "the relay's last report is {} s old (frozen, or it cannot write to the database)",
                age.num_seconds()
            ),
        }
    }
}

/// How long the oldest commit not yet published has waited, and how that is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lag {
    /// The relay's own figure: the oldest commit it read and Kafka has not acknowledged
    /// (`None`: nothing it read waits).
    Exact {
        /// That commit's time.
        oldest: Option<DateTime<Utc>>,
    },
    /// From the slot and the retention marks only: at most this ([`Waiting`]).
    Bound {
        /// The bound.
        waiting: Waiting,
        /// Why not the relay's figure.
        why: BoundReason,
    },
}

impl Lag {
    /// The age in seconds at `now`; 0 when nothing waits.
    pub fn seconds(&self, now: DateTime<Utc>) -> f64 {
        let since = match *self {
            Self::Exact { oldest } => oldest,
            Self::Bound { waiting, .. } => match waiting {
                Waiting::Nothing => None,
                Waiting::AtMostSince { since, .. } => Some(since),
            },
        };
        since.map_or(0.0, |since| (now - since).as_seconds_f64().max(0.0))
    }

    /// Whether the figure is only an upper bound.
    pub fn is_bound(&self) -> bool {
        matches!(self, Self::Bound { .. })
    }
}

/// The lag from what the database says of the slot (`streaming`, the bound `waiting`) and
/// the relay's `report`: the rules of the module doc, in their order. Pure.
pub fn decide(streaming: bool, waiting: Waiting, report: Option<RelayReport>) -> Lag {
    let bound = |why| Lag::Bound { waiting, why };
    if !streaming {
        return bound(BoundReason::NotStreaming);
    }
    let Some(report) = report else {
        return bound(BoundReason::NoReport);
    };
    let fresh = chrono::Duration::from_std(REPORT_FRESH).unwrap_or_default();
    if report.age > fresh {
        return bound(BoundReason::StaleReport(report.age));
    }
    Lag::Exact {
        oldest: report.oldest_unconfirmed,
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap() + chrono::Duration::seconds(seconds)
    }

    fn report(oldest: Option<i64>, age_ms: i64) -> Option<RelayReport> {
        Some(RelayReport {
            oldest_unconfirmed: oldest.map(at),
            age: chrono::Duration::milliseconds(age_ms),
        })
    }

    /// After a burst the relay published in under a second, the bound still said "at most
    /// 11 s" until retention's next mark: a fresh report of nothing waiting says 0.
    #[test]
    fn a_streaming_relay_that_reports_is_believed_over_the_bound() {
        let bound = Waiting::AtMostSince {
            since: at(-11),
            marked: true,
        };
        let lag = decide(true, bound, report(None, 150));
        assert_eq!(lag, Lag::Exact { oldest: None });
        assert_eq!(lag.seconds(at(0)), 0.0);
        assert!(!lag.is_bound());
        let waiting = decide(true, bound, report(Some(-2), 150));
        assert_eq!(waiting.seconds(at(0)), 2.0);
    }

    /// Each rule in turn: not streaming, no report, a stale report fall back to the bound,
    /// and say why.
    #[test]
    fn without_a_live_relay_the_bound_is_said_to_be_one() {
        let bound = Waiting::AtMostSince {
            since: at(-30),
            marked: true,
        };
        let stopped = decide(false, bound, report(None, 100));
        assert_eq!(
            stopped,
            Lag::Bound {
                waiting: bound,
                why: BoundReason::NotStreaming
            }
        );
        assert_eq!(stopped.seconds(at(0)), 30.0);
        assert!(stopped.is_bound());
        assert_eq!(
            decide(true, bound, None),
            Lag::Bound {
                waiting: bound,
                why: BoundReason::NoReport
            }
        );
        let frozen = decide(true, bound, report(None, 2_001));
        assert_eq!(
            frozen,
            Lag::Bound {
                waiting: bound,
                why: BoundReason::StaleReport(chrono::Duration::milliseconds(2_001))
            }
        );
        assert_eq!(
            BoundReason::StaleReport(chrono::Duration::milliseconds(2_001)).describe(),
            "the relay's last report is 2 s old (frozen, or it cannot write to the database)"
        );
        assert!(decide(true, bound, report(None, 2_000)).seconds(at(0)) == 0.0);
    }
}
