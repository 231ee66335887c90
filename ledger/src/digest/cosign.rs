//! Sending each new checkpoint to the policy's witnesses (`add-checkpoint`, C2SP
//! `tlog-witness`), keeping what they answer, and saying whether the quorum holds.
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

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;

use super::checkpoint::publish;
pub use super::checkpoint::{
    COSIGNED_EVENT_TYPE, COSIGNED_FORMAT, CosignError, CosignedDocument, cosigned,
    is_cosigned_checkpoint, latest_cosigned,
};
use super::log::{SealedLog, TreeCache};
use crate::tlog::note::{SignatureLine, SignedNote};
use crate::tlog::policy::{Policy, Witness};
use crate::tlog::tree::Tree;
use crate::tlog::witness::{AfterConflict, Answer, after_conflict, classify, request_body};

/// What a witness's last answer was, as `witness_state.outcome` keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It cosigned the checkpoint.
    Cosigned = 0,
    /// No answer worth keeping; sent again next round.
    Unavailable = 1,
    /// A definite no: an alarm.
    Refused = 2,
    /// It holds a smaller size than it held before: its state was lost or restored. An
    /// alarm.
    LostState = 3,
}

impl Outcome {
    /// Every outcome.
    pub const ALL: [Self; 4] = [
        Self::Cosigned,
        Self::Unavailable,
        Self::Refused,
        Self::LostState,
    ];

    /// The outcome of its stored number.
    pub fn from_stored(value: i16) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|outcome| *outcome as i16 == value)
    }

    /// In words.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cosigned => "cosigned",
            Self::Unavailable => "unavailable",
            Self::Refused => "refused",
            Self::LostState => "lost state",
        }
    }

    /// An alarm: the checkpoint is not sent to that witness again.
    pub fn is_alarm(self) -> bool {
        matches!(self, Self::Refused | Self::LostState)
    }
}

/// One witness after a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessStatus {
    /// Its name in the policy.
    pub witness: String,
    /// What it answered last.
    pub outcome: Outcome,
    /// Its reason, for a refusal or an unavailability.
    pub reason: Option<String>,
    /// The size the ledger believes it holds.
    pub size: u64,
}

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
        .query_one("SELECT pg_try_advisory_lock($1)", &[&COSIGN_LOCK_KEY])
        .await?
        .get(0);
    let round = round_on(&client, policy, cache, locked.then_some(http)).await;
    if !locked {
        return round;
    }
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&COSIGN_LOCK_KEY])
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
    let Some(row) = client
        .query_opt(
            "SELECT digest_seq, size, note FROM checkpoints ORDER BY digest_seq DESC LIMIT 1",
            &[],
        )
        .await?
    else {
        return Ok(None);
    };
    let seq: i64 = row.get(0);
    let size = row.get::<_, i64>(1) as u64;
    let mut cosigned =
        SignedNote::parse(row.get(2)).map_err(|e| CosignError::Checkpoint(seq, e))?;
    let checkpoint = Sent {
        seq,
        size,
        note: cosigned.clone(),
    };
    // Read only when a witness is to be sent the checkpoint.
    let mut log: Option<SealedLog> = None;
    let mut witnesses = Vec::with_capacity(policy.witnesses.len());
    let mut cosigners = BTreeSet::new();
    for witness in &policy.witnesses {
        let (status, line) =
            one_witness(client, cache, http, &mut log, witness, &checkpoint).await?;
        if let Some(line) = line {
            cosigned.add([line]);
            cosigners.insert(witness.name.clone());
        }
        witnesses.push(status);
    }
    let quorum = policy.satisfied(&cosigners);
    if http.is_some() {
        publish(client, seq, size, quorum, &cosigners, &cosigned).await?;
    }
    Ok(Some(Round {
        digest_seq: seq,
        size,
        cosigned,
        cosigners,
        quorum,
        witnesses,
        cosigner: http.is_some(),
    }))
}

/// The checkpoint a round is about.
struct Sent {
    seq: i64,
    size: u64,
    note: SignedNote,
}

/// One witness in a round: its stored cosignature of the checkpoint, its stored alarm about
/// it (not sent again), what a replica without the lock knows of it, or its answer now,
/// stored and logged. Returns its state and its cosignature line.
async fn one_witness(
    client: &deadpool_postgres::Client,
    cache: &TreeCache,
    http: Option<&reqwest::Client>,
    log: &mut Option<SealedLog>,
    witness: &Witness,
    checkpoint: &Sent,
) -> Result<(WitnessStatus, Option<SignatureLine>), CosignError> {
    let seq = checkpoint.seq;
    let stored = client
        .query_opt(
            "SELECT line FROM cosignatures WHERE digest_seq = $1 AND witness = $2",
            &[&seq, &witness.name],
        )
        .await?;
    let state = client
        .query_opt(
            "SELECT size, digest_seq, outcome, reason FROM witness_state WHERE witness = $1",
            &[&witness.name],
        )
        .await?;
    let held = state.as_ref().map_or(0, |row| row.get::<_, i64>(0) as u64);
    let status = |outcome, reason| WitnessStatus {
        witness: witness.name.clone(),
        outcome,
        reason,
        size: held,
    };
    if let Some(line) = stored {
        let line = SignatureLine::parse(line.get(0))
            .map_err(|error| CosignError::Checkpoint(seq, error))?;
        return Ok((status(Outcome::Cosigned, None), Some(line)));
    }
    let stored_outcome = state
        .as_ref()
        .and_then(|state| Outcome::from_stored(state.get(2)));
    // An alarm about this very checkpoint: not sent again.
    if let (Some(state), Some(outcome)) = (&state, stored_outcome)
        && state.get::<_, Option<i64>>(1) == Some(seq)
        && outcome.is_alarm()
    {
        return Ok((status(outcome, state.get(3)), None));
    }
    let Some(http) = http else {
        // Another replica cosigns: its last word on this witness, or not yet.
        return Ok(match (stored_outcome, &state) {
            (Some(outcome), Some(state)) if outcome != Outcome::Cosigned => {
                (status(outcome, state.get(3)), None)
            }
            _ => (
                status(
                    Outcome::Unavailable,
                    Some("not cosigned yet (another replica holds the cosigning lock)".into()),
                ),
                None,
            ),
        });
    };
    let log = match log {
        Some(log) => log,
        None => log.insert(SealedLog::of(client, cache, seq).await?),
    };
    let (status, line) = send(
        http,
        witness,
        &checkpoint.note,
        log.tree(),
        checkpoint.size,
        held,
    )
    .await;
    if let Some(line) = &line {
        client
            .execute(
                "INSERT INTO cosignatures (digest_seq, witness, line) VALUES ($1, $2, $3) \
                 ON CONFLICT DO NOTHING",
                &[&seq, &witness.name, &line.text()],
            )
            .await?;
    }
    client
        .execute(
            "INSERT INTO witness_state (witness, size, digest_seq, outcome, reason, updated_at) \
             VALUES ($1, $2, $3, $4, $5, now()) \
             ON CONFLICT (witness) DO UPDATE SET size = EXCLUDED.size, \
               digest_seq = EXCLUDED.digest_seq, outcome = EXCLUDED.outcome, \
               reason = EXCLUDED.reason, updated_at = now()",
            &[
                &witness.name,
                &(status.size as i64),
                &seq,
                &(status.outcome as i16),
                &status.reason,
            ],
        )
        .await?;
    log_answer(&status, seq, checkpoint.size);
    Ok((status, line))
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

/// Sends the checkpoint of `size` to `witness`, which the ledger believes holds `held`;
/// follows one 409 (rule 2 of [`crate::tlog::witness`]). Returns its state and, when it
/// cosigned, its verified line.
async fn send(
    http: &reqwest::Client,
    witness: &Witness,
    checkpoint: &SignedNote,
    log: &Tree,
    size: u64,
    held: u64,
) -> (WitnessStatus, Option<SignatureLine>) {
    let status = |outcome, reason: Option<String>, size| WitnessStatus {
        witness: witness.name.clone(),
        outcome,
        reason,
        size,
    };
    let Some(url) = &witness.url else {
        return (
            status(
                Outcome::Refused,
                Some("the policy gives no URL for this witness".into()),
                held,
            ),
            None,
        );
    };
    let mut old = held;
    for sent in 1..=2u32 {
        let Some(proof) = log.consistency_proof(old.min(size), size) else {
            return (
                status(
                    Outcome::Refused,
                    Some(format!(
                        "the log has no tree of size {size} to prove from {old}"
                    )),
                    old,
                ),
                None,
            );
        };
        if old > size {
            let AfterConflict::Refuse(reason) = after_conflict(old, held, size, sent) else {
                unreachable!("a larger size is always refused")
            };
            return (status(Outcome::Refused, Some(reason), old), None);
        }
        let answer = post(http, url, &request_body(old, &proof, checkpoint)).await;
        match answer {
            Answer::Cosigned(lines) => {
                let verified = lines.into_iter().find(|line| {
                    let mut note = checkpoint.clone();
                    note.signatures = vec![line.clone()];
                    witness.key.verify_cosignature(&note).is_ok()
                });
                return match verified {
                    Some(line) => (status(Outcome::Cosigned, None, size), Some(line)),
                    None => (
                        status(
                            Outcome::Refused,
                            Some(format!(
                                "HTTP 200, but no line verifies with the policy's key {}: an unknown key",
                                witness.key.vkey()
                            )),
                            old,
                        ),
                        None,
                    ),
                };
            }
            Answer::HoldsSize(named) => match after_conflict(named, held, size, sent) {
                AfterConflict::ResendFrom(named) => old = named,
                AfterConflict::Refuse(reason) => {
                    return (status(Outcome::Refused, Some(reason), named), None);
                }
                // The larger size stays remembered: the next checkpoint finds the witness
                // still behind it, until an operator says otherwise (the runbook).
                AfterConflict::LostState(reason) => {
                    return (status(Outcome::LostState, Some(reason), held), None);
                }
            },
            Answer::Refused(reason) => return (status(Outcome::Refused, Some(reason), old), None),
            Answer::Unavailable(reason) => {
                return (status(Outcome::Unavailable, Some(reason), old), None);
            }
        }
    }
    unreachable!("the second 409 is refused by after_conflict")
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
