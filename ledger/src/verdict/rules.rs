//! The rules of the verdict, pure: facts in, one [`Verdict`] out.
//!
//! Each rule looks at the [`Facts`] and either finds nothing or a [`Finding`]: a state
//! (degraded or failing), the reason in a sentence and the runbook section that says what
//! to do. The verdict is the worst state found; its reason is the first finding of that
//! state in the order of [`RULES`], and the others follow as `also`. Nothing found:
//! healthy, with what was checked.
//!
//! The rules, in their order (a new one, such as a witness quorum, is one function and one
//! line in [`RULES`]):
//!
//! 1. [`relay_refused`]: the relay refused to go on and stopped, in its own words (a lost
//!    slot, a publication that stopped carrying the outbox, a position from another
//!    history), while no relay streams (failing).
//! 2. [`slot_lost`]: PostgreSQL removed WAL the slot needed; the relay refuses to start
//!    until `ledger relay recover` (failing).
//! 3. [`slot_missing`]: no slot; a registered one was lost, and the relay refuses to start
//!    (failing).
//! 4. [`relay_not_streaming`]: no relay streams from the slot: nothing reaches Kafka
//!    (failing).
//! 5. [`wal_unreserved`]: the next checkpoint removes WAL the slot needs (failing).
//! 6. [`commit_waiting`]: the oldest unpublished commit waited more than
//!    [`COMMIT_FAILING`] (failing), or more than [`COMMIT_DEGRADED`] (degraded).
//! 7. [`headroom_low`]: less than half of `max_slot_wal_keep_size` left (degraded).
//! 8. [`parked_waiting`]: parked messages wait for an operator (degraded).
//! 9. [`replay_failing`]: a replay failed in the last day (degraded).

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::lag::SlotProgress;
use crate::lag::slot_wal::WalStatus;

/// A commit waiting this long (seconds) fails the verdict, as `RaOutboxCommitUnpublished`
/// fires.
pub const COMMIT_FAILING: f64 = 300.0;
/// A commit waiting this long (seconds) degrades it, as `RaRelayUnconfirmedCommitTooOld`
/// fires.
pub const COMMIT_DEGRADED: f64 = 120.0;

/// What the verdict is taken from, read at one moment.
#[derive(Debug, Clone)]
pub struct Facts {
    /// The relay's slot name; empty in the facts anyone may read ([`Facts::for_anyone`]).
    pub slot_name: String,
    /// The slot; `None` when it does not exist.
    pub slot: Option<SlotProgress>,
    /// Whether `relay_slots` lists the slot (a relay streamed from it once).
    pub slot_registered: bool,
    /// Why the slot's relay refused to go on, when it did and has not streamed since; empty
    /// in the facts anyone may read.
    pub relay_refused: Option<String>,
    /// Parked messages not republished yet.
    pub parked_waiting: i64,
    /// Replays that failed in the last day.
    pub replays_failed: i64,
    /// The newest failed replay's id (not its error: the verdict is served without a
    /// token).
    pub newest_failed_replay: Option<String>,
    /// When the facts were read.
    pub now: DateTime<Utc>,
}

impl Facts {
    /// These facts without what only operators may read: the slot's name and the relay's
    /// refusal in its own words (a registry URL, a system id, a database or a host). What
    /// `GET /status` answers without an operator token; the verdict of these says the same
    /// state and runbook in words that name nothing inside.
    pub fn for_anyone(&self) -> Self {
        Self {
            slot_name: String::new(),
            relay_refused: self.relay_refused.as_ref().map(|_| String::new()),
            ..self.clone()
        }
    }

    /// The slot as a reason names it: `slot <name>`, or `the relay's slot` for anyone.
    fn slot(&self) -> String {
        if self.slot_name.is_empty() {
            "the relay's slot".to_owned()
        } else {
            format!("slot {}", self.slot_name)
        }
    }
}

/// The states, worst last (their order is their severity).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Events reach Kafka in time, nothing waits for an operator.
    Healthy,
    /// Events still flow, but something needs an operator soon.
    Degraded,
    /// Events do not reach Kafka, or will not for long.
    Failing,
}

impl State {
    /// The word a person and a status page read.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Degraded => "degraded",
            Self::Failing => "failing",
        }
    }
}

/// What one rule found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// How bad.
    pub state: State,
    /// Why, in a sentence an on-call engineer acts on.
    pub reason: String,
    /// The runbook section: `docs/operators.md#…`, as the alert rules' `runbook_url`.
    pub runbook: &'static str,
}

/// The verdict: the worst state found, the reason that decides it, and the rest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// The state.
    pub state: State,
    /// The deciding reason (healthy: what was checked).
    pub reason: String,
    /// Its runbook section; `None` when healthy.
    pub runbook: Option<&'static str>,
    /// The other findings, worst first.
    pub also: Vec<Finding>,
}

/// A rule: facts in, maybe a finding.
pub type Rule = fn(&Facts) -> Option<Finding>;

/// Every rule, in the order that picks the deciding reason among findings of one state.
pub const RULES: &[Rule] = &[
    relay_refused,
    slot_lost,
    slot_missing,
    relay_not_streaming,
    wal_unreserved,
    commit_waiting,
    headroom_low,
    parked_waiting,
    replay_failing,
];

/// The verdict of `facts` under [`RULES`].
pub fn verdict(facts: &Facts) -> Verdict {
    let mut found: Vec<Finding> = RULES.iter().filter_map(|rule| rule(facts)).collect();
    // Stable: among findings of one state, the rules' order stays.
    found.sort_by_key(|finding| std::cmp::Reverse(finding.state));
    if found.is_empty() {
        return Verdict {
            state: State::Healthy,
            reason: healthy_reason(facts),
            runbook: None,
            also: Vec::new(),
        };
    }
    let first = found.remove(0);
    Verdict {
        state: first.state,
        reason: first.reason,
        runbook: Some(first.runbook),
        also: found,
    }
}

fn healthy_reason(facts: &Facts) -> String {
    let waited = facts
        .slot
        .as_ref()
        .map_or(0.0, |slot| slot.lag().seconds(facts.now));
    format!(
        "the relay streams from {}; the oldest unpublished commit waited {waited:.1} s; no parked message, no failed replay, the slot's WAL is safe",
        facts.slot()
    )
}

fn finding(state: State, reason: String, runbook: &'static str) -> Option<Finding> {
    Some(Finding {
        state,
        reason,
        runbook,
    })
}

/// Rule 1.
pub fn relay_refused(facts: &Facts) -> Option<Finding> {
    let refused = facts.relay_refused.as_deref()?;
    if facts.slot.as_ref().is_some_and(|slot| slot.streaming) {
        // A relay streams again: the refusal is history.
        return None;
    }
    let reason = if refused.is_empty() {
        "the relay refused to go on and stopped; why is for operators: GET /status with an operator token, the console's operations page, the relay's log".to_owned()
    } else {
        format!("the relay refused to go on and stopped: {refused}")
    };
    finding(State::Failing, reason, "docs/operators.md#rarelaydown")
}

/// Rule 2.
pub fn slot_lost(facts: &Facts) -> Option<Finding> {
    let slot = facts.slot.as_ref()?;
    (slot.wal.status == Some(WalStatus::Lost)).then_some(())?;
    finding(
        State::Failing,
        format!(
            "{} lost WAL it needed (wal_status lost): the relay refuses to start until `ledger relay recover`",
            facts.slot()
        ),
        "docs/operators.md#raslotwallost",
    )
}

/// Rule 3.
pub fn slot_missing(facts: &Facts) -> Option<Finding> {
    if facts.slot.is_some() {
        return None;
    }
    let reason = if facts.slot_registered {
        format!(
            "{} is missing though a relay streamed from it: the relay refuses to start until `ledger relay recover`",
            facts.slot()
        )
    } else {
        format!(
            "no replication slot {}: the relay has not started yet",
            if facts.slot_name.is_empty() {
                "for the relay"
            } else {
                &facts.slot_name
            }
        )
    };
    finding(State::Failing, reason, "docs/operators.md#raslotmissing")
}

/// Rule 4.
pub fn relay_not_streaming(facts: &Facts) -> Option<Finding> {
    let slot = facts.slot.as_ref()?;
    if slot.streaming {
        return None;
    }
    let waited = slot.lag().seconds(facts.now);
    finding(
        State::Failing,
        format!(
            "no relay streams from {}: nothing reaches Kafka (the oldest unpublished commit waited at most {waited:.0} s)",
            facts.slot()
        ),
        "docs/operators.md#rarelaydown",
    )
}

/// Rule 5.
pub fn wal_unreserved(facts: &Facts) -> Option<Finding> {
    let slot = facts.slot.as_ref()?;
    (slot.wal.status == Some(WalStatus::Unreserved)).then_some(())?;
    finding(
        State::Failing,
        format!(
            "{} is past max_slot_wal_keep_size (wal_status unreserved): the next checkpoint removes WAL it needs",
            facts.slot()
        ),
        "docs/operators.md#raslotwalunreserved",
    )
}

/// Rule 6.
pub fn commit_waiting(facts: &Facts) -> Option<Finding> {
    let slot = facts.slot.as_ref()?;
    let lag = slot.lag();
    let waited = lag.seconds(facts.now);
    let how = if lag.is_bound() { "at most " } else { "" };
    if waited > COMMIT_FAILING {
        finding(
            State::Failing,
            format!("the oldest unpublished commit has waited {how}{waited:.0} s for Kafka"),
            "docs/operators.md#raoutboxcommitunpublished",
        )
    } else if waited > COMMIT_DEGRADED {
        finding(
            State::Degraded,
            format!("the oldest unpublished commit has waited {how}{waited:.0} s for Kafka"),
            "docs/operators.md#rarelayunconfirmedcommittooold",
        )
    } else {
        None
    }
}

/// Rule 7.
pub fn headroom_low(facts: &Facts) -> Option<Finding> {
    let slot = facts.slot.as_ref()?;
    let (safe, limit) = (slot.wal.safe_bytes?, slot.wal.limit_bytes?);
    (safe < limit / 2).then_some(())?;
    finding(
        State::Degraded,
        format!(
            "{} has {} MB of WAL left of its {} MB limit: the relay must confirm before it is used up",
            facts.slot(),
            safe / (1 << 20),
            limit / (1 << 20)
        ),
        "docs/operators.md#raslotwalheadroomlow",
    )
}

/// Rule 8.
pub fn parked_waiting(facts: &Facts) -> Option<Finding> {
    (facts.parked_waiting > 0).then_some(())?;
    finding(
        State::Degraded,
        format!(
            "{} parked message(s) wait for an operator: Kafka refused them for good",
            facts.parked_waiting
        ),
        "docs/operators.md#raparkedmessageswaiting",
    )
}

/// Rule 9.
pub fn replay_failing(facts: &Facts) -> Option<Finding> {
    (facts.replays_failed > 0).then_some(())?;
    finding(
        State::Degraded,
        format!(
            "{} replay(s) failed in the last day (the newest: {}); the operations page lists why",
            facts.replays_failed,
            facts.newest_failed_replay.as_deref().unwrap_or("unknown")
        ),
        "docs/operators.md#replays",
    )
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::lag::exact::RelayReport;
    use crate::lag::slot_wal::SlotWal;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
    }

    fn streaming() -> SlotProgress {
        SlotProgress {
            streaming: true,
            lag_bytes: Some(4_096),
            retained_bytes: Some(8_192),
            wal: SlotWal {
                status: Some(WalStatus::Reserved),
                safe_bytes: Some(1 << 30),
                limit_bytes: Some(1 << 30),
            },
            published_before: None,
            first_uncovered_row: None,
            relay: Some(RelayReport {
                oldest_unconfirmed: None,
                age: chrono::Duration::milliseconds(100),
            }),
        }
    }

    fn facts(slot: Option<SlotProgress>) -> Facts {
        Facts {
            slot_name: "ra_ledger_relay".into(),
            slot,
            slot_registered: true,
            relay_refused: None,
            parked_waiting: 0,
            replays_failed: 0,
            newest_failed_replay: None,
            now: now(),
        }
    }

    #[test]
    fn a_streaming_relay_with_nothing_waiting_is_healthy() {
        let verdict = verdict(&facts(Some(streaming())));
        assert_eq!(verdict.state, State::Healthy);
        assert!(
            verdict.reason.contains("waited 0.0 s"),
            "{}",
            verdict.reason
        );
        assert_eq!(verdict.runbook, None);
    }

    /// The relay stops: failing, and the reason names it and its runbook.
    #[test]
    fn a_stopped_relay_fails_the_verdict() {
        let stopped = SlotProgress {
            streaming: false,
            ..streaming()
        };
        let verdict = verdict(&facts(Some(stopped)));
        assert_eq!(verdict.state, State::Failing);
        assert!(
            verdict
                .reason
                .starts_with("no relay streams from slot ra_ledger_relay")
        );
        assert_eq!(verdict.runbook, Some("docs/operators.md#rarelaydown"));
    }

    /// Failing outranks degraded whatever the rules' order; within a state the first rule
    /// decides, and the rest come as `also`.
    #[test]
    fn the_worst_state_decides_and_the_rest_follow() {
        let mut many = facts(Some(SlotProgress {
            wal: SlotWal {
                status: Some(WalStatus::Extended),
                safe_bytes: Some(100 << 20),
                limit_bytes: Some(1 << 30),
            },
            ..streaming()
        }));
        many.parked_waiting = 3;
        many.replays_failed = 1;
        many.newest_failed_replay = Some("r-1".into());
        let degraded = verdict(&many);
        assert_eq!(degraded.state, State::Degraded);
        assert!(
            degraded
                .reason
                .contains("100 MB of WAL left of its 1024 MB"),
            "{}",
            degraded.reason
        );
        assert_eq!(
            degraded.also.iter().map(|f| f.runbook).collect::<Vec<_>>(),
            [
                "docs/operators.md#raparkedmessageswaiting",
                "docs/operators.md#replays"
            ]
        );
        // A commit that waited 6 minutes, as the relay reports it: failing, first.
        many.slot = many.slot.map(|slot| SlotProgress {
            relay: Some(RelayReport {
                oldest_unconfirmed: Some(now() - chrono::Duration::minutes(6)),
                age: chrono::Duration::milliseconds(100),
            }),
            ..slot
        });
        let failing = verdict(&many);
        assert_eq!(failing.state, State::Failing);
        assert_eq!(
            failing.reason,
            "the oldest unpublished commit has waited 360 s for Kafka"
        );
        assert_eq!(failing.also.len(), 3);
    }

    #[test]
    fn a_missing_or_lost_slot_says_the_relay_refuses_to_start() {
        let missing = verdict(&facts(None));
        assert_eq!(missing.state, State::Failing);
        assert!(
            missing.reason.contains("refuses to start"),
            "{}",
            missing.reason
        );
        let never = verdict(&Facts {
            slot_registered: false,
            ..facts(None)
        });
        assert!(
            never.reason.contains("has not started yet"),
            "{}",
            never.reason
        );
        let lost = verdict(&facts(Some(SlotProgress {
            streaming: false,
            wal: SlotWal {
                status: Some(WalStatus::Lost),
                safe_bytes: None,
                limit_bytes: Some(1 << 30),
            },
            ..streaming()
        })));
        assert_eq!(
            lost.runbook,
            Some("docs/operators.md#raslotwallost"),
            "lost before not streaming"
        );
        assert_eq!(lost.also[0].runbook, "docs/operators.md#rarelaydown");
    }

    /// A relay that refused to go on says why, ahead of the slot it lost; once a relay
    /// streams again, the refusal is history.
    #[test]
    fn a_refusal_is_said_in_the_relays_words_until_a_relay_streams() {
        let refusal = "the replication slot s is missing; run `ledger relay recover`";
        let refused = Facts {
            relay_refused: Some(refusal.into()),
            ..facts(None)
        };
        let verdict = verdict(&refused);
        assert_eq!(verdict.state, State::Failing);
        assert_eq!(
            verdict.reason,
            format!("the relay refused to go on and stopped: {refusal}")
        );
        assert_eq!(verdict.also[0].runbook, "docs/operators.md#raslotmissing");
        let again = Facts {
            relay_refused: Some(refusal.into()),
            ..facts(Some(streaming()))
        };
        assert_eq!(super::verdict(&again).state, State::Healthy);
    }

    /// Anyone reads the same state and runbooks, in words that name nothing inside: not
    /// the relay's refusal (a registry URL, a system id, a host), not the slot.
    #[test]
    fn the_verdict_for_anyone_names_nothing_inside() {
        let refusal = "the schema registry at https://registry.internal:8443/ccompat answered 401; system 7321";
        let refused = Facts {
            relay_refused: Some(refusal.into()),
            ..facts(None)
        };
        let full = verdict(&refused);
        let open = verdict(&refused.for_anyone());
        assert_eq!(open.state, full.state);
        assert_eq!(open.runbook, full.runbook);
        let runbooks = |verdict: &Verdict| {
            verdict
                .also
                .iter()
                .map(|finding| finding.runbook)
                .collect::<Vec<_>>()
        };
        assert_eq!(runbooks(&open), runbooks(&full));
        let text = serde_json::to_string(&open).unwrap();
        for inside in ["registry.internal", "7321", "ra_ledger_relay", "401"] {
            assert!(!text.contains(inside), "{inside} in {text}");
        }
        assert!(
            open.reason
                .starts_with("the relay refused to go on and stopped; why is for operators"),
            "{}",
            open.reason
        );
        let healthy = verdict(&facts(Some(streaming())).for_anyone());
        assert!(
            healthy
                .reason
                .starts_with("the relay streams from the relay's slot;"),
            "{}",
            healthy.reason
        );
    }

    /// A commit waiting over 2 minutes degrades; with the bound, the sentence says "at most".
    #[test]
    fn a_waiting_commit_degrades_then_fails() {
        let waiting = |seconds: i64| SlotProgress {
            relay: Some(RelayReport {
                oldest_unconfirmed: Some(now() - chrono::Duration::seconds(seconds)),
                age: chrono::Duration::milliseconds(100),
            }),
            ..streaming()
        };
        assert_eq!(verdict(&facts(Some(waiting(60)))).state, State::Healthy);
        let slow = verdict(&facts(Some(waiting(150))));
        assert_eq!(slow.state, State::Degraded);
        assert_eq!(
            slow.runbook,
            Some("docs/operators.md#rarelayunconfirmedcommittooold")
        );
    }
}
