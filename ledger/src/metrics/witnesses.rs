//! `ledger serve`'s gauges of the witnesses, with a witness policy: what the last round
//! that ran to its end found (the quorum, the witnesses refusing, unavailable or having lost
//! their state), and apart from it when the last round ended and whether it failed.
//!
//! Why apart (issue 56, item 5): a round that fails (the database, the log unreadable)
//! finds nothing, so the findings stay the last good round's, "quorum met" included. The
//! round's time and outcome say how old they are: `RaWitnessRoundsStopped` fires when no
//! round ends for several intervals (the task hangs or died), `RaWitnessRoundsFailing`
//! when they end in errors.

use std::time::Duration;

use ra_ledger_cdc::infra::prometheus::Metric;

use crate::digest::cosign::{Outcome, Round};

/// Whether the newest checkpoint meets the quorum.
pub const CHECKPOINT_QUORUM: Metric = Metric::gauge(
    "ra_checkpoint_quorum_met",
    "1 when the newest checkpoint of the transparency log carries the cosignatures the witness policy's quorum asks for, 0 while it is short (as of the last round that ran to its end).",
);
/// The size of the newest checkpoint sent.
pub const CHECKPOINT_SIZE: Metric = Metric::gauge(
    "ra_checkpoint_size",
    "Leaves (events) in the newest checkpoint of the transparency log sent to the witnesses.",
);
/// The digest whose checkpoint is the newest sent (issue 57, item 8: a size of 0 reads as
/// "empty" only with the digest it belongs to, the first after a start).
pub const CHECKPOINT_DIGEST: Metric = Metric::gauge(
    "ra_checkpoint_digest_seq",
    "The sequence number of the digest that sealed the newest checkpoint sent to the witnesses.",
);
/// Witnesses that cosigned the newest checkpoint.
pub const CHECKPOINT_COSIGNATURES: Metric = Metric::gauge(
    "ra_checkpoint_cosignatures",
    "Witnesses of the policy whose verified cosignature the newest checkpoint carries.",
);
/// Witnesses whose last answer was a refusal.
pub const WITNESSES_REFUSING: Metric = Metric::gauge(
    "ra_witnesses_refusing",
    "Witnesses whose last answer to a checkpoint was a refusal (a 4xx, a 409 that does not resolve, a cosignature by an unknown key): an alarm, never retried blindly.",
);
/// Witnesses that did not answer the last round.
pub const WITNESSES_UNAVAILABLE: Metric = Metric::gauge(
    "ra_witnesses_unavailable",
    "Witnesses that did not answer the last round (down, slow, a 5xx); the checkpoint is sent to them again.",
);
/// Witnesses holding less than they held before.
pub const WITNESSES_LOST_STATE: Metric = Metric::gauge(
    "ra_witnesses_lost_state",
    "Witnesses that answered holding a smaller size than they cosigned before (their state lost or restored): an alarm; checkpoints are not sent to them from the smaller size.",
);
/// When the last round ended.
pub const WITNESS_ROUND_TIME: Metric = Metric::gauge(
    "ra_witness_round_timestamp_seconds",
    "Unix time at which the last cosigning round ended, whether it failed or not.",
);
/// Whether the last round failed.
pub const WITNESS_ROUND_FAILED: Metric = Metric::gauge(
    "ra_witness_round_failed",
    "1 when the last cosigning round failed (the database or the log unreadable; the service's log has the error): the other witness gauges are then the last good round's.",
);
/// The time between rounds.
pub const WITNESS_ROUND_INTERVAL: Metric = Metric::gauge(
    "ra_witness_round_interval_seconds",
    "Time between cosigning rounds (witness_interval_ms).",
);
/// Whether this process sends the checkpoints.
pub const WITNESS_COSIGNER: Metric = Metric::gauge(
    "ra_witness_cosigner",
    "1 when this process held the cosigning lock in its last round and sent the checkpoint; 0 when another replica holds it (this one reads what it stored).",
);

/// What the last round that ran to its end found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Findings {
    /// Whether the quorum holds.
    pub quorum: bool,
    /// The checkpoint's size.
    pub size: u64,
    /// The digest that sealed it.
    pub digest_seq: i64,
    /// Cosignatures it carries.
    pub cosignatures: usize,
    /// Witnesses refusing.
    pub refusing: usize,
    /// Witnesses unavailable.
    pub unavailable: usize,
    /// Witnesses that lost their state.
    pub lost_state: usize,
    /// Whether this process sent.
    pub cosigner: bool,
}

impl Findings {
    /// The findings of `round`.
    pub fn of(round: &Round) -> Self {
        let count = |outcome| {
            round
                .witnesses
                .iter()
                .filter(|w| w.outcome == outcome)
                .count()
        };
        Self {
            quorum: round.quorum,
            size: round.size,
            digest_seq: round.digest_seq,
            cosignatures: round.cosigners.len(),
            refusing: count(Outcome::Refused),
            unavailable: count(Outcome::Unavailable),
            lost_state: count(Outcome::LostState),
            cosigner: round.cosigner,
        }
    }
}

/// The rounds as the gauges show them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Witnessed {
    /// The last findings; `None` before a round found a checkpoint.
    findings: Option<Findings>,
    /// When the last round ended (Unix seconds), whether it failed, the interval; `None`
    /// before the first.
    ended: Option<(i64, bool, f64)>,
}

impl Witnessed {
    /// A round ended at `now`: with a checkpoint's round, none yet, or an error.
    pub fn record(
        &mut self,
        ended: Result<&Option<Round>, ()>,
        interval: Duration,
        now: chrono::DateTime<chrono::Utc>,
    ) {
        if let Ok(Some(round)) = ended {
            self.findings = Some(Findings::of(round));
        }
        self.ended = Some((now.timestamp(), ended.is_err(), interval.as_secs_f64()));
    }

    /// The Prometheus text format; nothing before the first round.
    pub fn render(&self, out: &mut String) {
        if let Some(found) = self.findings {
            CHECKPOINT_QUORUM.render(out, u8::from(found.quorum));
            CHECKPOINT_SIZE.render(out, found.size);
            CHECKPOINT_DIGEST.render(out, found.digest_seq);
            CHECKPOINT_COSIGNATURES.render(out, found.cosignatures);
            WITNESSES_REFUSING.render(out, found.refusing);
            WITNESSES_UNAVAILABLE.render(out, found.unavailable);
            WITNESSES_LOST_STATE.render(out, found.lost_state);
            WITNESS_COSIGNER.render(out, u8::from(found.cosigner));
        }
        if let Some((at, failed, interval)) = self.ended {
            WITNESS_ROUND_TIME.render(out, at);
            WITNESS_ROUND_FAILED.render(out, u8::from(failed));
            WITNESS_ROUND_INTERVAL.render(out, format!("{interval:.3}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::digest::cosign::WitnessStatus;
    use crate::tlog::note::{SignatureLine, SignedNote};

    fn round() -> Round {
        let status = |witness: &str, outcome| WitnessStatus {
            witness: witness.into(),
            outcome,
            reason: None,
            size: 0,
        };
        Round {
            digest_seq: 3,
            size: 25,
            cosigned: SignedNote {
                body: "o\n25\nAA==\n".into(),
                signatures: vec![SignatureLine {
                    name: "o".into(),
                    key_id: 1,
                    signature: vec![0; 64],
                }],
            },
            cosigners: ["a".to_string()].into(),
            quorum: false,
            witnesses: vec![
                status("a", Outcome::Cosigned),
                status("b", Outcome::Refused),
                status("c", Outcome::Unavailable),
                status("d", Outcome::LostState),
            ],
            cosigner: true,
        }
    }

    fn rendered(witnessed: &Witnessed) -> String {
        let mut out = String::new();
        witnessed.render(&mut out);
        out
    }

    /// With a witness policy: the last round's quorum and the witnesses refusing,
    /// unavailable and having lost their state, each under its help and type, and the
    /// round's time.
    #[test]
    fn a_cosigning_round_shows_its_quorum_its_witnesses_and_its_time() {
        let mut witnessed = Witnessed::default();
        assert_eq!(rendered(&witnessed), "");
        let at = chrono::Utc.timestamp_opt(1_800_000_000, 0).unwrap();
        witnessed.record(Ok(&Some(round())), Duration::from_secs(5), at);
        let text = rendered(&witnessed);
        for metric in [
            CHECKPOINT_QUORUM,
            CHECKPOINT_SIZE,
            CHECKPOINT_DIGEST,
            CHECKPOINT_COSIGNATURES,
            WITNESSES_REFUSING,
            WITNESSES_UNAVAILABLE,
            WITNESSES_LOST_STATE,
            WITNESS_COSIGNER,
            WITNESS_ROUND_TIME,
            WITNESS_ROUND_FAILED,
            WITNESS_ROUND_INTERVAL,
        ] {
            let head = format!("# HELP {} {}\n", metric.name, metric.help);
            assert_eq!(text.matches(&head).count(), 1, "{text}");
        }
        for line in [
            "ra_checkpoint_quorum_met 0\n",
            "ra_checkpoint_size 25\n",
            "ra_checkpoint_digest_seq 3\n",
            "ra_checkpoint_cosignatures 1\n",
            "ra_witnesses_refusing 1\n",
            "ra_witnesses_unavailable 1\n",
            "ra_witnesses_lost_state 1\n",
            "ra_witness_cosigner 1\n",
            "ra_witness_round_timestamp_seconds 1800000000\n",
            "ra_witness_round_failed 0\n",
            "ra_witness_round_interval_seconds 5.000\n",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }

    /// A failed round moves the round's time and says it failed; the findings stay the
    /// last good round's (and say so through the time and the failure).
    #[test]
    fn a_failed_round_is_shown_as_failed_with_its_time() {
        let mut witnessed = Witnessed::default();
        let first = chrono::Utc.timestamp_opt(1_800_000_000, 0).unwrap();
        witnessed.record(Ok(&Some(round())), Duration::from_secs(5), first);
        let later = first + chrono::Duration::seconds(30);
        witnessed.record(Err(()), Duration::from_secs(5), later);
        let text = rendered(&witnessed);
        assert!(
            text.contains("ra_witness_round_timestamp_seconds 1800000030\n"),
            "{text}"
        );
        assert!(text.contains("ra_witness_round_failed 1\n"), "{text}");
        assert!(text.contains("ra_checkpoint_size 25\n"), "{text}");
        // Before any checkpoint: the round's time, no findings.
        let mut none = Witnessed::default();
        none.record(Ok(&None), Duration::from_secs(5), first);
        let text = rendered(&none);
        assert!(text.contains("ra_witness_round_failed 0\n"), "{text}");
        assert!(!text.contains("ra_checkpoint_quorum_met"), "{text}");
    }
}
