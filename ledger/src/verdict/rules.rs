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
//! 1. [`events_missing`]: the end-to-end watcher found committed events older than its
//!    lag bound that Kafka's event topics do not hold, whatever the relay says (failing).
//! 2. [`relay_refused`]: the relay refused to go on and stopped, in its own words (a lost
//!    slot, a publication that stopped carrying the outbox, a position from another
//!    history), while no relay streams (failing).
//! 3. [`slot_lost`]: PostgreSQL removed WAL the slot needed; the relay refuses to start
//!    until `ledger relay recover` (failing).
//! 4. [`slot_missing`]: no slot; a registered one was lost, and the relay refuses to start
//!    (failing).
//! 5. [`relay_not_streaming`]: no relay streams from the slot: nothing reaches Kafka
//!    (failing).
//! 6. [`wal_unreserved`]: the next checkpoint removes WAL the slot needs (failing).
//! 7. [`commit_waiting`]: the oldest unpublished commit waited more than
//!    [`COMMIT_FAILING`] (failing), or more than [`COMMIT_DEGRADED`] (degraded).
//! 8. [`headroom_low`]: less than half of `max_slot_wal_keep_size` left (degraded).
//! 9. [`parked_waiting`]: parked messages wait for an operator (degraded).
//! 10. [`replay_failing`]: a replay failed in the last day (degraded).
//!
//! With a witness policy (issue 56, item 5; [`WitnessFacts`]):
//!
//! 11. [`witness_refused`]: a witness's last answer refused a checkpoint: the log may not
//!     be the one it cosigned before (failing: the runbook says stop writes).
//! 12. [`witness_lost_state`]: a witness holds less than it cosigned before; it no longer
//!     tells a fork from this log (degraded).
//! 13. [`quorum_short`]: the log has been ahead of the newest checkpoint that met the
//!     quorum for longer than [`WitnessFacts::short_after`], a few digest intervals
//!     (degraded; a checkpoint waits a round or two for its cosignatures in good times).

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::digest::cosign::Outcome;
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
    /// Committed events the end-to-end watcher found missing from Kafka
    /// (`watcher_missing`; 0 when the watcher is off).
    pub events_missing: i64,
    /// The lowest position among them.
    pub first_missing: Option<i64>,
    /// When the facts were read.
    pub now: DateTime<Utc>,
    /// The witnesses, with a witness policy.
    pub witnesses: Option<WitnessFacts>,
}

/// What the verdict knows of the witnesses and the newest checkpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct WitnessFacts {
    /// The policy's quorum, in words.
    pub quorum: String,
    /// Each witness of the policy, in its order.
    pub witnesses: Vec<WitnessFact>,
    /// The newest checkpoint's digest; `None` before the first.
    pub newest: Option<i64>,
    /// Whether the newest checkpoint met the quorum.
    pub newest_met: bool,
    /// When the oldest checkpoint after the newest one that met the quorum was sealed:
    /// since when the quorum has been short. `None` while the newest met it.
    pub short_since: Option<DateTime<Utc>>,
    /// How long the quorum may be short before the verdict is degraded.
    pub short_after: chrono::Duration,
}

/// One witness's last answer, as `witness_state` keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct WitnessFact {
    /// Its name in the policy.
    pub name: String,
    /// Its last answer's outcome; `None`: never sent a checkpoint.
    pub outcome: Option<Outcome>,
    /// Its reason, for anything but a cosignature.
    pub reason: Option<String>,
    /// The digest whose checkpoint it answered.
    pub digest_seq: Option<i64>,
    /// The size the ledger believes it holds.
    pub size: u64,
    /// When it answered.
    pub answered_at: Option<DateTime<Utc>>,
}

impl Facts {
    /// These facts without what only operators may read: the slot's name and the relay's
    /// refusal in its own words (a registry URL, a system id, a database or a host). What
    /// `GET /status` answers without an operator token; the verdict of these says the same
    /// state and runbook in words that name nothing inside.
    pub fn for_anyone(&self) -> Self {
        // A witness's answer is its own text (a URL, a host may be in it): for operators.
        let witnesses = self.witnesses.as_ref().map(|witnessed| WitnessFacts {
            witnesses: witnessed
                .witnesses
                .iter()
                .map(|witness| WitnessFact {
                    reason: witness
                        .reason
                        .as_ref()
                        .map(|_| "its answer is for operators".to_owned()),
                    ..witness.clone()
                })
                .collect(),
            ..witnessed.clone()
        });
        Self {
            slot_name: String::new(),
            relay_refused: self.relay_refused.as_ref().map(|_| String::new()),
            witnesses,
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
    events_missing,
    relay_refused,
    slot_lost,
    slot_missing,
    relay_not_streaming,
    wal_unreserved,
    commit_waiting,
    headroom_low,
    parked_waiting,
    replay_failing,
    witness_refused,
    witness_lost_state,
    quorum_short,
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
    let witnesses = match &facts.witnesses {
        Some(witnesses) if witnesses.newest_met => "; the newest checkpoint has its witness quorum",
        _ => "",
    };
    format!(
        "the relay streams from {}; the oldest unpublished commit waited {waited:.1} s; no parked message, no failed replay, the slot's WAL is safe{witnesses}",
        facts.slot()
    )
}

/// The witnesses whose last answer was `outcome`, and the first one's.
fn answered(facts: &Facts, outcome: Outcome) -> Option<(Vec<&str>, &WitnessFact)> {
    let witnesses = facts.witnesses.as_ref()?;
    let found: Vec<&WitnessFact> = witnesses
        .witnesses
        .iter()
        .filter(|w| w.outcome == Some(outcome))
        .collect();
    let first = *found.first()?;
    Some((found.iter().map(|w| w.name.as_str()).collect(), first))
}

fn checkpoint_of(witness: &WitnessFact) -> String {
    witness.digest_seq.map_or("a checkpoint".into(), |seq| {
        format!("the checkpoint of digest {seq}")
    })
}

fn finding(state: State, reason: String, runbook: &'static str) -> Option<Finding> {
    Some(Finding {
        state,
        reason,
        runbook,
    })
}

/// Rule 1.
pub fn events_missing(facts: &Facts) -> Option<Finding> {
    (facts.events_missing > 0).then_some(())?;
    let first = facts.first_missing.map_or_else(String::new, |position| {
        format!(" (the first at position {position})")
    });
    finding(
        State::Failing,
        format!(
            "{} committed event(s) older than the watcher's lag bound are not on Kafka{first}: lost unless republished, whatever the relay says",
            facts.events_missing
        ),
        "docs/operators.md#raeventsmissing",
    )
}

/// Rule 2.
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

/// Rule 3.
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

/// Rule 4.
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

/// Rule 5.
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

/// Rule 6.
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

/// Rule 7.
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

/// Rule 8.
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

/// Rule 9.
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

/// Rule 10.
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

/// Rule 10.
pub fn witness_refused(facts: &Facts) -> Option<Finding> {
    let (names, first) = answered(facts, Outcome::Refused)?;
    finding(
        State::Failing,
        format!(
            "witness {} refused {} ({}): the log may not be what it cosigned before; it is not sent that checkpoint again",
            names.join(", "),
            checkpoint_of(first),
            first.reason.as_deref().unwrap_or("no reason given")
        ),
        "docs/operators.md#rawitnessrefused",
    )
}

/// Rule 11.
pub fn witness_lost_state(facts: &Facts) -> Option<Finding> {
    let (names, first) = answered(facts, Outcome::LostState)?;
    finding(
        State::Degraded,
        format!(
            "witness {} lost its state answering {} ({}); its cosignatures no longer protect against a fork",
            names.join(", "),
            checkpoint_of(first),
            first.reason.as_deref().unwrap_or("no reason given")
        ),
        "docs/operators.md#rawitnessloststate",
    )
}

/// Rule 12.
pub fn quorum_short(facts: &Facts) -> Option<Finding> {
    let witnesses = facts.witnesses.as_ref()?;
    let since = witnesses.short_since?;
    let short = facts.now - since;
    (short > witnesses.short_after).then_some(())?;
    let cosigned_by: Vec<&str> = witnesses
        .witnesses
        .iter()
        .filter(|w| w.outcome == Some(Outcome::Cosigned) && w.digest_seq == witnesses.newest)
        .map(|w| w.name.as_str())
        .collect();
    finding(
        State::Degraded,
        format!(
            "the transparency log has been short of its witness quorum ({}) for {} s (newest checkpoint: digest {}, cosigned by {})",
            witnesses.quorum,
            short.num_seconds(),
            witnesses
                .newest
                .map_or("none".into(), |seq| seq.to_string()),
            if cosigned_by.is_empty() {
                "no witness".into()
            } else {
                cosigned_by.join(", ")
            }
        ),
        "docs/operators.md#racheckpointshortofquorum",
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
            events_missing: 0,
            first_missing: None,
            now: now(),
            witnesses: None,
        }
    }

    fn witness(name: &str, outcome: Outcome, reason: &str) -> WitnessFact {
        WitnessFact {
            name: name.into(),
            outcome: Some(outcome),
            reason: (!reason.is_empty()).then(|| reason.into()),
            digest_seq: Some(7),
            size: 40,
            answered_at: Some(now()),
        }
    }

    fn witnessed(witnesses: Vec<WitnessFact>, short_for: Option<i64>) -> Facts {
        Facts {
            witnesses: Some(WitnessFacts {
                quorum: "all of a, b".into(),
                witnesses,
                newest: Some(7),
                newest_met: short_for.is_none(),
                short_since: short_for.map(|s| now() - chrono::Duration::seconds(s)),
                short_after: chrono::Duration::seconds(180),
            }),
            ..facts(Some(streaming()))
        }
    }

    /// A refusal fails the verdict at once, naming the witness, the checkpoint and its
    /// reason; a witness that lost its state degrades it.
    #[test]
    fn a_refusing_witness_fails_the_verdict_and_one_that_lost_its_state_degrades_it() {
        let refused = verdict(&witnessed(
            vec![
                witness("a", Outcome::Cosigned, ""),
                witness("b", Outcome::Refused, "HTTP 422: bad consistency proof"),
            ],
            Some(10),
        ));
        assert_eq!(refused.state, State::Failing);
        assert_eq!(
            refused.reason,
            "witness b refused the checkpoint of digest 7 (HTTP 422: bad consistency proof): the log may not be what it cosigned before; it is not sent that checkpoint again"
        );
        assert_eq!(refused.runbook, Some("docs/operators.md#rawitnessrefused"));
        let lost = verdict(&witnessed(
            vec![
                witness("a", Outcome::LostState, "the witness holds size 4"),
                witness("b", Outcome::Cosigned, ""),
            ],
            Some(10),
        ));
        assert_eq!(lost.state, State::Degraded);
        assert!(
            lost.reason.starts_with("witness a lost its state"),
            "{}",
            lost.reason
        );
        assert_eq!(lost.runbook, Some("docs/operators.md#rawitnessloststate"));
    }

    /// Short of the quorum: healthy for a few digest intervals (a checkpoint waits a round
    /// for its cosignatures), degraded past them; met, the healthy sentence says so.
    #[test]
    fn a_quorum_short_past_a_few_intervals_degrades_the_verdict() {
        let down = || {
            vec![
                witness("a", Outcome::Cosigned, ""),
                witness("b", Outcome::Unavailable, "no answer"),
            ]
        };
        assert_eq!(verdict(&witnessed(down(), Some(100))).state, State::Healthy);
        let short = verdict(&witnessed(down(), Some(600)));
        assert_eq!(short.state, State::Degraded);
        assert_eq!(
            short.reason,
            "the transparency log has been short of its witness quorum (all of a, b) for 600 s (newest checkpoint: digest 7, cosigned by a)"
        );
        assert_eq!(
            short.runbook,
            Some("docs/operators.md#racheckpointshortofquorum")
        );
        let met = verdict(&witnessed(
            vec![
                witness("a", Outcome::Cosigned, ""),
                witness("b", Outcome::Cosigned, ""),
            ],
            None,
        ));
        assert_eq!(met.state, State::Healthy);
        assert!(
            met.reason.ends_with("has its witness quorum"),
            "{}",
            met.reason
        );
    }

    /// Events the watcher found missing fail the verdict first, even with a relay that
    /// streams and says it is caught up.
    #[test]
    fn events_missing_fail_the_verdict_before_anything_else() {
        let mut lost = facts(Some(streaming()));
        lost.events_missing = 4;
        lost.first_missing = Some(17);
        lost.parked_waiting = 1;
        let verdict = verdict(&lost);
        assert_eq!(verdict.state, State::Failing);
        assert!(
            verdict
                .reason
                .starts_with("4 committed event(s) older than the watcher's lag bound are not on Kafka (the first at position 17)"),
            "{}",
            verdict.reason
        );
        assert_eq!(verdict.runbook, Some("docs/operators.md#raeventsmissing"));
        assert_eq!(verdict.also.len(), 1);
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
