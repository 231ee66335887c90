//! Sending each new checkpoint to the policy's witnesses (`add-checkpoint`, C2SP
//! `tlog-witness`), keeping what they answer, and saying whether the quorum holds: one
//! gateway to the witnesses, as transparency-dev/tessera's witness gateway is (issue 58,
//! item 4).
//!
//! A round, in four steps:
//! 1. **One read** ([`super::checkpoint::round_state`]): the newest checkpoint and what is
//!    stored of each witness (its cosignature of it, its last answer, the size it holds).
//! 2. **A pure decision per witness** ([`decide`]): counted from its stored cosignature, left
//!    alone for an alarm about this checkpoint (or, without the lock, as the sender last
//!    left it), or sent.
//! 3. **The witnesses asked concurrently**, with one consistency proof per old size shared
//!    between them ([`Proofs`]); each answer read by [`settle`], a pure step that follows one
//!    409 at most.
//! 4. **One write** ([`super::checkpoint::record_round`]): the answers and the checkpoint's
//!    publication, in one statement; the cosigners counted by [`Policy::cosigners`], from
//!    what verifies.
//!
//! The safety argument, in layers:
//! - **The ledger never waits for a witness.** Rounds run in a task of their own, after
//!   the digest committed, each request bounded by a timeout; a witness down or slow leaves
//!   the newest checkpoint short of its quorum (a gauge, an alert) and the next round sends
//!   it again. Nothing the ledger or the relay does waits on this task.
//! - **A refusal is never retried blindly.** What an answer means is
//!   [`crate::tlog::witness::classify`]'s pure decision: a 4xx, a 409 that does not resolve, a
//!   200 whose lines do not verify with the witness's key from the policy, are each an
//!   alarm with the witness's reason, kept in `witness_state` and logged at error; that
//!   checkpoint is not sent to that witness again.
//! - **What counts is what verifies.** A cosignature is stored only after the witness's
//!   key from the policy verified it over this checkpoint's text.
//! - **The `old` size is the witness's own.** The ledger remembers the size each witness
//!   last cosigned (or named in a 409) and proves consistency from there; the witness
//!   checks that proof against its own stored root, so a log that changed under it cannot
//!   be cosigned whatever the ledger remembers. A witness that names a size smaller than
//!   the one remembered lost its state ([`Outcome::LostState`]): an alarm too, kept and
//!   logged, and not sent again from the smaller size.
//! - **One cosigner at a time.** Several `ledger serve` replicas run rounds; the one that
//!   holds the advisory lock [`COSIGN_LOCK_KEY`] for its round sends, the others read what
//!   it stored (for their gauges and the verdict) and send nothing. Two senders could each
//!   read a size, one send a newer checkpoint and the other an older one after it: the
//!   witness then holds more than the older checkpoint's size, and the second sender logs a
//!   false `WITNESS REFUSED`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::Pool;

pub use super::checkpoint::{
    COSIGNED_EVENT_TYPE, COSIGNED_FORMAT, CosignError, CosignedDocument, Outcome, WitnessStatus,
    cosigned, is_cosigned_checkpoint,
};
use super::checkpoint::{Recorded, RoundState, StoredWitness, record_round, round_state};
use super::log::{SealedLog, TreeCache};
use crate::tlog::note::{SignatureLine, SignedNote};
use crate::tlog::policy::{Policy, Witness};
use crate::tlog::tree::{Hash, Tree};
use crate::tlog::witness::{AfterConflict, Answer, after_conflict, classify, request_body};

/// The newest checkpoint and its cosignatures after a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Round {
    /// The digest that sealed it.
    pub digest_seq: i64,
    /// Its size.
    pub size: u64,
    /// The checkpoint with every verified cosignature added.
    pub cosigned: SignedNote,
    /// The witnesses (by policy name) whose cosignature it carries.
    pub cosigners: BTreeSet<String>,
    /// Whether they meet the policy's quorum.
    pub quorum: bool,
    /// Each witness's state.
    pub witnesses: Vec<WitnessStatus>,
    /// Whether this process held the cosigning lock and sent; `false`: another replica
    /// holds it, and this round only read what that one stored.
    pub cosigner: bool,
}

/// How the rounds are run.
#[derive(Debug, Clone)]
pub struct Cosigning {
    /// The policy: the witnesses, their keys and URLs, the quorum.
    pub policy: Arc<Policy>,
    /// Time between rounds.
    pub interval: Duration,
    /// How long one request may take.
    pub timeout: Duration,
}

/// Runs a round every `cosigning.interval` until `shutdown`; every round's end, a failed
/// one too, feeds `observe` (the gauges: a failed round must not leave the last good one's
/// quorum standing unnoticed). A failed round is logged and the next one tries again.
pub async fn run(
    pool: Pool,
    cosigning: Cosigning,
    cache: TreeCache,
    observe: impl Fn(&Result<Option<Round>, CosignError>) + Send,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let http = client(cosigning.timeout);
    let mut every = ra_ledger_cdc::infra::runtime::Every::new(cosigning.interval, shutdown);
    while every.tick().await {
        let ended = round(&pool, &cosigning.policy, &cache, &http).await;
        if let Err(error) = &ended {
            tracing::warn!(%error, "cosigning round failed; trying again next time");
        }
        observe(&ended);
    }
}

/// The advisory lock held by the one replica that sends checkpoints ("RALCOSIG" in
/// ASCII), for one round at a time.
pub const COSIGN_LOCK_KEY: i64 = 0x5241_4c43_4f53_4947;

/// The HTTP client of the rounds: `timeout` per request, no proxy from the environment.
pub fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .no_proxy()
        .build()
        .expect("an HTTP client with rustls")
}

/// One round: the newest checkpoint sent to every witness that has not answered it for
/// good yet, when this process takes the cosigning lock; without it, what the replica
/// holding it stored. `None` when no checkpoint exists.
pub async fn round(
    pool: &Pool,
    policy: &Policy,
    cache: &TreeCache,
    http: &reqwest::Client,
) -> Result<Option<Round>, CosignError> {
    let client = pool.get().await?;
    let locked: bool = client
        .query_one(
            include_str!("../sql/digest/try_lock.sql"),
            &[&COSIGN_LOCK_KEY],
        )
        .await?
        .get(0);
    let round = round_on(&client, policy, cache, locked.then_some(http)).await;
    if !locked {
        return round;
    }
    let unlocked = client
        .execute(
            include_str!("../sql/digest/unlock.sql"),
            &[&COSIGN_LOCK_KEY],
        )
        .await;
    let round = round?;
    unlocked?;
    Ok(round)
}

/// [`round`] on one connection; `http` when this process holds the lock and sends.
async fn round_on(
    client: &deadpool_postgres::Client,
    policy: &Policy,
    cache: &TreeCache,
    http: Option<&reqwest::Client>,
) -> Result<Option<Round>, CosignError> {
    let names: Vec<String> = policy.witnesses.iter().map(|w| w.name.clone()).collect();
    let Some(state) = round_state(client, &names).await? else {
        return Ok(None);
    };
    let decisions: Vec<Decision> = (state.witnesses.iter())
        .map(|witness| decide(witness, state.seq, http.is_some()))
        .collect();
    let answers = match http {
        Some(http) if decisions.contains(&Decision::Send) => {
            let log = SealedLog::of(client, cache, state.seq).await?;
            ask(http, policy, &state, &decisions, log.tree()).await
        }
        _ => Vec::new(),
    };
    let mut cosigned = state.note.clone();
    let mut answered = answers.iter();
    let mut witnesses = Vec::with_capacity(decisions.len());
    for (stored, decision) in state.witnesses.iter().zip(decisions) {
        let (status, line) = match decision {
            Decision::Send => answered
                .next()
                .cloned()
                .expect("an answer per witness sent"),
            known => known.status(stored),
        };
        cosigned.add(line);
        witnesses.push(status);
    }
    let cosigners = policy.cosigners(&cosigned).set();
    let quorum = policy.satisfied(&cosigners);
    if http.is_some() {
        let recorded = Recorded {
            state: &state,
            answers: &answers,
            cosigned: &cosigned,
            cosigners: &cosigners,
            quorum,
        };
        record_round(client, recorded).await?;
        for (status, _) in &answers {
            log_answer(status, state.seq, state.size);
        }
    }
    Ok(Some(Round {
        digest_seq: state.seq,
        size: state.size,
        cosigned,
        cosigners,
        quorum,
        witnesses,
        cosigner: http.is_some(),
    }))
}

/// What a round does with one witness, as [`decide`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Its cosignature of this checkpoint is stored: counted, not sent again.
    Counted(SignatureLine),
    /// Not sent: what is known of it stands (an alarm about this checkpoint, or, for a
    /// replica without the lock, the sender's last word), with its reason.
    Known(Outcome, Option<String>),
    /// Sent this checkpoint, with a proof from the size it holds.
    Send,
}

impl Decision {
    /// Its state and line for a round that did not send to it.
    fn status(self, stored: &StoredWitness) -> (WitnessStatus, Option<SignatureLine>) {
        let status = |outcome, reason| WitnessStatus {
            witness: stored.name.clone(),
            outcome,
            reason,
            size: stored.held,
        };
        match self {
            Self::Counted(line) => (status(Outcome::Cosigned, None), Some(line)),
            Self::Known(outcome, reason) => (status(outcome, reason), None),
            Self::Send => unreachable!("a witness sent has its answer"),
        }
    }
}

/// The pure decision per witness, from what is stored of it when the round of the
/// checkpoint of digest `seq` starts; `sender` when this process holds the cosigning lock.
/// In order: a stored cosignature of this checkpoint counts; an alarm about this very
/// checkpoint is never sent again; a replica without the lock sends nothing and reports the
/// sender's last word (its outcome, unless that was a cosignature of an older checkpoint:
/// then "not cosigned yet"); anything else is sent.
pub fn decide(witness: &StoredWitness, seq: i64, sender: bool) -> Decision {
    if let Some(line) = &witness.line {
        return Decision::Counted(line.clone());
    }
    match &witness.outcome {
        Some((outcome, reason)) if outcome.is_alarm() && witness.answered == Some(seq) => {
            Decision::Known(*outcome, reason.clone())
        }
        _ if sender => Decision::Send,
        Some((outcome, reason)) if *outcome != Outcome::Cosigned => {
            Decision::Known(*outcome, reason.clone())
        }
        _ => Decision::Known(
            Outcome::Unavailable,
            Some("not cosigned yet (another replica holds the cosigning lock)".into()),
        ),
    }
}

/// Sends the round's checkpoint to every witness [`decide`] said to send it to, all at
/// once; their answers in the policy's order.
async fn ask(
    http: &reqwest::Client,
    policy: &Policy,
    state: &RoundState,
    decisions: &[Decision],
    log: &Tree,
) -> Vec<(WitnessStatus, Option<SignatureLine>)> {
    let proofs = Proofs::new(log, state.size);
    let sends = (policy.witnesses.iter().zip(&state.witnesses))
        .zip(decisions)
        .filter(|(_, decision)| **decision == Decision::Send)
        .map(|((witness, stored), _)| send(http, witness, &state.note, &proofs, stored.held));
    futures::future::join_all(sends).await
}

/// The consistency proofs of a round, one per old size, computed once and shared by the
/// witnesses that hold that size (most often all of them hold the same one).
#[derive(Debug)]
pub struct Proofs<'a> {
    log: &'a Tree,
    size: u64,
    by_old: Mutex<BTreeMap<u64, Option<Arc<[Hash]>>>>,
}

impl<'a> Proofs<'a> {
    /// The proofs to the checkpoint of `size` of `log`.
    pub fn new(log: &'a Tree, size: u64) -> Self {
        Self {
            log,
            size,
            by_old: Mutex::default(),
        }
    }

    /// The proof from `old` to the checkpoint; `None` when the log has no tree to prove it
    /// from (`old` larger, or the checkpoint larger than the log).
    pub fn from(&self, old: u64) -> Option<Arc<[Hash]>> {
        let mut by_old = self.by_old.lock().unwrap_or_else(|p| p.into_inner());
        (by_old.entry(old))
            .or_insert_with(|| self.log.consistency_proof(old, self.size).map(Arc::from))
            .clone()
    }

    /// How many proofs were computed.
    pub fn computed(&self) -> usize {
        self.by_old.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// Sends `checkpoint` to `witness`, which the ledger believes holds `held`; follows one 409
/// (rule 2 of [`crate::tlog::witness`]). Returns its state and, when it cosigned, its
/// verified line.
async fn send(
    http: &reqwest::Client,
    witness: &Witness,
    checkpoint: &SignedNote,
    proofs: &Proofs<'_>,
    held: u64,
) -> (WitnessStatus, Option<SignatureLine>) {
    let size = proofs.size;
    let status = |outcome, reason: String, size| WitnessStatus {
        witness: witness.name.clone(),
        outcome,
        reason: Some(reason),
        size,
    };
    let Some(url) = &witness.url else {
        let reason = "the policy gives no URL for this witness".into();
        return (status(Outcome::Refused, reason, held), None);
    };
    let mut old = held;
    for sent in 1..=2u32 {
        let Some(proof) = proofs.from(old.min(size)) else {
            let reason = format!("the log has no tree of size {size} to prove from {old}");
            return (status(Outcome::Refused, reason, old), None);
        };
        if old > size {
            let AfterConflict::Refuse(reason) = after_conflict(old, held, size, sent) else {
                unreachable!("a larger size is always refused")
            };
            return (status(Outcome::Refused, reason, old), None);
        }
        let answer = post(http, url, &request_body(old, &proof, checkpoint)).await;
        match settle(
            witness,
            checkpoint,
            answer,
            Sent {
                old,
                held,
                size,
                sent,
            },
        ) {
            Step::Resend(named) => old = named,
            Step::Done(status, line) => return (status, line),
        }
    }
    unreachable!("the second 409 is refused by after_conflict")
}

/// A request [`settle`] reads the answer of.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    /// The old size it named.
    pub old: u64,
    /// The size the ledger believed the witness held before the round.
    pub held: u64,
    /// The checkpoint's size.
    pub size: u64,
    /// How many times the checkpoint was sent, this one included.
    pub sent: u32,
}

/// What follows an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send again from the size the witness named in a 409.
    Resend(u64),
    /// The witness's state after this round, and its verified line when it cosigned.
    Done(WitnessStatus, Option<SignatureLine>),
}

/// Reads `witness`'s `answer` to `checkpoint` (pure): a line counts only if the policy's
/// key verifies it; a 409 is resent from once, unless [`after_conflict`] says otherwise.
pub fn settle(witness: &Witness, checkpoint: &SignedNote, answer: Answer, sent: Sent) -> Step {
    let status = |outcome, reason, size| WitnessStatus {
        witness: witness.name.clone(),
        outcome,
        reason,
        size,
    };
    let refused = |reason, size| Step::Done(status(Outcome::Refused, Some(reason), size), None);
    match answer {
        Answer::Cosigned(lines) => {
            let verified = lines.into_iter().find(|line| {
                let mut note = checkpoint.clone();
                note.signatures = vec![line.clone()];
                witness.key.verify_cosignature(&note).is_ok()
            });
            match verified {
                Some(line) => Step::Done(status(Outcome::Cosigned, None, sent.size), Some(line)),
                None => refused(
                    format!(
                        "HTTP 200, but no line verifies with the policy's key {}: an unknown key",
                        witness.key.vkey()
                    ),
                    sent.old,
                ),
            }
        }
        Answer::HoldsSize(named) => match after_conflict(named, sent.held, sent.size, sent.sent) {
            AfterConflict::ResendFrom(named) => Step::Resend(named),
            AfterConflict::Refuse(reason) => refused(reason, named),
            // The larger size stays remembered: the next checkpoint finds the witness
            // still behind it, until an operator says otherwise (the runbook).
            AfterConflict::LostState(reason) => {
                Step::Done(status(Outcome::LostState, Some(reason), sent.held), None)
            }
        },
        Answer::Refused(reason) => refused(reason, sent.old),
        Answer::Unavailable(reason) => {
            Step::Done(status(Outcome::Unavailable, Some(reason), sent.old), None)
        }
    }
}

/// Logs a witness's answer: an alarm at error, with its runbook.
fn log_answer(status: &WitnessStatus, seq: i64, size: u64) {
    let reason = status.reason.as_deref().unwrap_or("");
    let witness = &status.witness;
    match status.outcome {
        Outcome::Refused => tracing::error!(
            %witness,
            digest_seq = seq,
            size,
            reason,
            "WITNESS REFUSED the checkpoint: it is not sent to this witness again; see docs/operators.md#rawitnessrefused"
        ),
        Outcome::LostState => tracing::error!(
            %witness,
            digest_seq = seq,
            size,
            reason,
            "WITNESS LOST ITS STATE: it holds less than it cosigned before; checkpoints are not sent to it from the smaller size; see docs/operators.md#rawitnessloststate"
        ),
        Outcome::Unavailable => tracing::warn!(
            %witness,
            digest_seq = seq,
            reason,
            "witness unavailable; the checkpoint is sent again next round"
        ),
        Outcome::Cosigned => tracing::debug!(%witness, digest_seq = seq, "cosigned"),
    }
}

/// POSTs an `add-checkpoint` body; a transport failure is [`Answer::Unavailable`].
pub async fn post(http: &reqwest::Client, url: &str, body: &str) -> Answer {
    let response = match http
        .post(format!("{}/add-checkpoint", url.trim_end_matches('/')))
        .body(body.to_owned())
        .send()
        .await
    {
        Ok(response) => response,
        Err(error) => return Answer::Unavailable(format!("no answer: {error}")),
    };
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    match response.text().await {
        Ok(text) => classify(status, content_type.as_deref(), &text),
        Err(error) => Answer::Unavailable(format!("HTTP {status}, body unread: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tlog::note::{
        ALG_COSIGNATURE_V1, Checkpoint, NoteKey, cosigned_message, sign_checkpoint,
    };
    use ed25519_dalek::{Signer as _, SigningKey};

    const SEQ: i64 = 7;

    fn stored(outcome: Option<(Outcome, &str)>, answered: Option<i64>) -> StoredWitness {
        StoredWitness {
            name: "a".into(),
            line: None,
            held: 10,
            answered,
            outcome: outcome.map(|(outcome, reason)| (outcome, Some(reason.to_owned()))),
        }
    }

    fn witness(seed: u8) -> (Witness, SigningKey) {
        let signing = SigningKey::from_bytes(&[seed; 32]);
        let key = NoteKey {
            name: "w.example/a".into(),
            algorithm: ALG_COSIGNATURE_V1,
            public: signing.verifying_key(),
        };
        let url = Some("http://127.0.0.1:1".into());
        (
            Witness {
                name: "a".into(),
                key,
                url,
            },
            signing,
        )
    }

    fn checkpoint(size: u64) -> SignedNote {
        let log = SigningKey::from_bytes(&[1; 32]);
        let checkpoint = Checkpoint {
            origin: "o.example/log".into(),
            size,
            root: [2; 32],
        };
        sign_checkpoint(log.verifying_key(), |m| log.sign(m).to_bytes(), &checkpoint)
    }

    /// `witness`'s cosignature line over `note`, by `signing` (its key, or another).
    fn line(witness: &Witness, signing: &SigningKey, note: &SignedNote) -> SignatureLine {
        let mut signature = 1_790_000_000u64.to_be_bytes().to_vec();
        let message = cosigned_message(1_790_000_000, &note.body);
        signature.extend_from_slice(&signing.sign(&message).to_bytes());
        SignatureLine {
            name: witness.key.name.clone(),
            key_id: witness.key.key_id(),
            signature,
        }
    }

    /// The decision per witness, for the sender and for a replica without the lock.
    #[test]
    fn each_witness_is_counted_left_alone_or_sent_from_what_is_stored() {
        let (w, signing) = witness(3);
        let stored_line = line(&w, &signing, &checkpoint(25));
        let cosigned = StoredWitness {
            line: Some(stored_line.clone()),
            ..stored(Some((Outcome::Cosigned, "")), Some(SEQ))
        };
        for sender in [true, false] {
            assert_eq!(
                decide(&cosigned, SEQ, sender),
                Decision::Counted(stored_line.clone())
            );
            // An alarm about this very checkpoint: never sent again.
            for alarm in [Outcome::Refused, Outcome::LostState] {
                assert_eq!(
                    decide(&stored(Some((alarm, "why")), Some(SEQ)), SEQ, sender),
                    Decision::Known(alarm, Some("why".into()))
                );
            }
        }
        // The sender sends to everyone else: nothing stored, an alarm about an older
        // checkpoint, an unavailability of this one.
        for witness in [
            stored(None, None),
            stored(Some((Outcome::Refused, "old")), Some(SEQ - 1)),
            stored(Some((Outcome::Unavailable, "down")), Some(SEQ)),
            stored(Some((Outcome::Cosigned, "")), Some(SEQ - 1)),
        ] {
            assert_eq!(decide(&witness, SEQ, true), Decision::Send);
        }
        // Without the lock: the sender's last word, or "not cosigned yet".
        assert_eq!(
            decide(
                &stored(Some((Outcome::Refused, "old")), Some(SEQ - 1)),
                SEQ,
                false
            ),
            Decision::Known(Outcome::Refused, Some("old".into()))
        );
        for witness in [
            stored(None, None),
            stored(Some((Outcome::Cosigned, "")), Some(SEQ - 1)),
        ] {
            assert!(matches!(
                decide(&witness, SEQ, false),
                Decision::Known(Outcome::Unavailable, Some(reason)) if reason.contains("not cosigned yet")
            ));
        }
    }

    /// Each answer's step: a line counts only if the policy's key verifies it; a 409 is
    /// followed once; a smaller size than held is lost state, keeping the held size.
    #[test]
    fn an_answer_settles_or_resends_once() {
        let (w, signing) = witness(3);
        let note = checkpoint(25);
        let sent = Sent {
            old: 10,
            held: 10,
            size: 25,
            sent: 1,
        };
        let good = line(&w, &signing, &note);
        let Step::Done(status, Some(counted)) =
            settle(&w, &note, Answer::Cosigned(vec![good.clone()]), sent)
        else {
            panic!("a verified line is a cosignature")
        };
        assert_eq!(
            (status.outcome, status.size, counted),
            (Outcome::Cosigned, 25, good)
        );
        let forged = line(&w, &SigningKey::from_bytes(&[4; 32]), &note);
        let step = settle(&w, &note, Answer::Cosigned(vec![forged]), sent);
        assert!(matches!(step, Step::Done(ref s, None)
            if s.outcome == Outcome::Refused && s.size == 10 && s.reason.as_deref().unwrap().contains("unknown key")));
        assert_eq!(
            settle(&w, &note, Answer::HoldsSize(12), sent),
            Step::Resend(12)
        );
        let again = Sent {
            old: 12,
            sent: 2,
            ..sent
        };
        assert!(matches!(settle(&w, &note, Answer::HoldsSize(12), again),
            Step::Done(s, None) if s.outcome == Outcome::Refused && s.size == 12));
        assert!(matches!(settle(&w, &note, Answer::HoldsSize(4), sent),
            Step::Done(s, None) if s.outcome == Outcome::LostState && s.size == 10));
        assert!(
            matches!(settle(&w, &note, Answer::Unavailable("503".into()), again),
            Step::Done(s, None) if s.outcome == Outcome::Unavailable && s.size == 12)
        );
    }

    /// Witnesses holding the same size share one proof.
    #[test]
    fn one_consistency_proof_per_old_size() {
        let mut log = Tree::new();
        for i in 0..25u64 {
            log.push(&i.to_be_bytes());
        }
        let proofs = Proofs::new(&log, 25);
        let first = proofs.from(10).expect("a proof from 10");
        assert!(Arc::ptr_eq(&first, &proofs.from(10).unwrap()));
        assert_eq!(proofs.computed(), 1);
        assert_eq!(&first[..], &log.consistency_proof(10, 25).unwrap()[..]);
        assert!(proofs.from(26).is_none());
        assert_eq!(proofs.computed(), 2);
    }

    /// The witnesses are asked at once: the second witness is asked while the first one's
    /// request is still open (asked one after the other, the second would be asked only
    /// once the first timed out and its connection closed).
    #[tokio::test]
    async fn the_witnesses_are_asked_at_once() {
        let mut listeners = Vec::new();
        for _ in 0..2 {
            listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        let vkey = |name: &str, seed| {
            let public = SigningKey::from_bytes(&[seed; 32]).verifying_key();
            let key = NoteKey {
                name: name.into(),
                algorithm: ALG_COSIGNATURE_V1,
                public,
            };
            key.vkey()
        };
        let url = |i: usize| format!("http://{}", listeners[i].local_addr().unwrap());
        let policy = Policy::parse(&format!(
            "witness a {} {}\nwitness b {} {}\ngroup both all a b\nquorum both\n",
            vkey("w.example/a", 3),
            url(0),
            vkey("w.example/b", 4),
            url(1)
        ))
        .unwrap();
        let mut log = Tree::new();
        for i in 0..25u64 {
            log.push(&i.to_be_bytes());
        }
        let state = RoundState {
            seq: SEQ,
            size: 25,
            note: checkpoint(25),
            witnesses: ["a", "b"]
                .map(|name| StoredWitness {
                    name: name.into(),
                    ..stored(None, None)
                })
                .into(),
        };
        // Long enough that a request is never given up on while this test waits.
        let http = client(Duration::from_secs(60));
        let decisions = [Decision::Send, Decision::Send];
        let watch = tokio::spawn(async move {
            let mut accepted = Vec::new();
            for listener in &listeners {
                let connection = tokio::time::timeout(Duration::from_secs(300), listener.accept());
                accepted.push(connection.await.expect("asked in time").unwrap().0);
            }
            // Both asked; is the first one's request still open, waiting for its answer?
            // A real read, non-blocking: the request's bytes, then nothing (open) or the end.
            let mut first = accepted.remove(0).into_std().unwrap();
            let mut request = [0; 4096];
            loop {
                match std::io::Read::read(&mut first, &mut request) {
                    Ok(0) => break false,
                    Ok(_) => continue,
                    Err(e) => break e.kind() == std::io::ErrorKind::WouldBlock,
                }
            }
        });
        let answers = tokio::time::timeout(
            Duration::from_secs(600),
            ask(&http, &policy, &state, &decisions, &log),
        )
        .await
        .expect("both answered once their connections closed");
        assert!(
            watch.await.unwrap(),
            "the first request was closed before the second was sent"
        );
        assert_eq!(answers.len(), 2);
        assert!(
            answers
                .iter()
                .all(|(status, _)| status.outcome == Outcome::Unavailable)
        );
    }
}
