//! The checkpoints as the ledger keeps them (issue 58, item 3: a room of their own, where
//! the builder, the rounds and the proofs each reached into the tables themselves): the one
//! a digest sealed, stored in its building transaction ([`insert`]); what a cosigning round
//! reads of it and of each witness ([`round_state`]) and writes back with the checkpoint's
//! publication on the digest topic ([`record_round`]), one statement each; and a checkpoint
//! read back with every cosignature stored for it ([`cosigned`], for proofs and
//! `GET /v1/checkpoints/latest`). The rounds that decide what to send are
//! [`super::cosign`]'s; the statements are in `sql/checkpoints/`.

use std::collections::BTreeSet;

use crate::tlog::note::{Checkpoint, NoteError, SignatureLine, SignedNote};

/// Why a round could not run.
#[derive(Debug, thiserror::Error)]
pub enum CosignError {
    /// No connection.
    #[error("cosigning: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// A statement failed.
    #[error("cosigning: {}", crate::db::describe(.0))]
    Database(#[from] tokio_postgres::Error),
    /// The log could not be read.
    #[error("cosigning: {0}")]
    Log(#[from] super::log::LogError),
    /// A stored checkpoint does not read.
    #[error("cosigning: checkpoint of digest {0} does not read: {1}")]
    Checkpoint(i64, NoteError),
}

/// The `format` of a cosigned checkpoint's document on the digest topic.
pub const COSIGNED_FORMAT: &str = "ra-ledger cosigned checkpoint v1";

/// The outbox's event type of a cosigned checkpoint (the relay's `event_type` header).
pub const COSIGNED_EVENT_TYPE: &str = "CheckpointCosigned";

/// A cosigned checkpoint as the digest topic carries it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CosignedDocument {
    /// The signed note: the log's signature and the witnesses' cosignatures.
    pub checkpoint: String,
    /// The policy's witnesses whose cosignature it carries.
    pub cosigners: Vec<String>,
    /// The digest that sealed it.
    pub digest_seq: i64,
    /// [`COSIGNED_FORMAT`].
    pub format: String,
    /// Whether the cosigners meet the policy's quorum (a checkpoint short of it is
    /// published as such, once, and again once the quorum is met).
    pub quorum: bool,
    /// The checkpoint's size.
    pub size: u64,
}

/// Whether a message of the digest topic is a cosigned checkpoint (not a digest).
pub fn is_cosigned_checkpoint(payload: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(payload)
        .ok()
        .is_some_and(|document| document["format"] == COSIGNED_FORMAT)
}

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

/// What is stored of one witness of the policy when a round starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredWitness {
    /// Its name in the policy.
    pub name: String,
    /// Its cosignature of the newest checkpoint, if stored.
    pub line: Option<SignatureLine>,
    /// The size it holds as far as the ledger knows (0: never sent a checkpoint).
    pub held: u64,
    /// The digest whose checkpoint it answered last, if any.
    pub answered: Option<i64>,
    /// Its last answer, if any, with its reason.
    pub outcome: Option<(Outcome, Option<String>)>,
}

/// The newest checkpoint and what is stored of each witness, read at a round's start.
#[derive(Debug, Clone)]
pub struct RoundState {
    /// The digest that sealed it.
    pub seq: i64,
    /// Its size.
    pub size: u64,
    /// The checkpoint as the log signed it.
    pub note: SignedNote,
    /// The policy's witnesses, in its order.
    pub witnesses: Vec<StoredWitness>,
}

/// Stores the checkpoint digest `seq` sealed (`sql/checkpoints/insert.sql`), in the
/// building transaction, as the builder signed it: `checkpoint`, signed as `note`.
pub(super) async fn insert(
    tx: &deadpool_postgres::Transaction<'_>,
    seq: i64,
    checkpoint: &Checkpoint,
    note: &SignedNote,
) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        include_str!("../sql/checkpoints/insert.sql"),
        &[
            &seq,
            &(checkpoint.size as i64),
            &checkpoint.root.to_vec(),
            &note.text(),
        ],
    )
    .await?;
    Ok(())
}

/// A round's one read (`sql/checkpoints/round_state.sql`): the newest checkpoint and what is
/// stored of each of `witnesses` (policy names, in order); `None` before the first.
pub(super) async fn round_state(
    client: &impl deadpool_postgres::GenericClient,
    witnesses: &[String],
) -> Result<Option<RoundState>, CosignError> {
    let rows = client
        .query(
            include_str!("../sql/checkpoints/round_state.sql"),
            &[&witnesses],
        )
        .await?;
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let seq: i64 = first.get("digest_seq");
    let unreadable = |error| CosignError::Checkpoint(seq, error);
    let mut state = RoundState {
        seq,
        size: first.get::<_, i64>("size") as u64,
        note: SignedNote::parse(first.get("note")).map_err(unreadable)?,
        witnesses: Vec::with_capacity(rows.len()),
    };
    for row in &rows {
        let Some(name) = row.get::<_, Option<String>>("name") else {
            continue;
        };
        let line = row.get::<_, Option<&str>>("line");
        let outcome = row.get::<_, Option<i16>>("outcome");
        state.witnesses.push(StoredWitness {
            name,
            line: line
                .map(SignatureLine::parse)
                .transpose()
                .map_err(unreadable)?,
            held: row.get::<_, Option<i64>>("held").unwrap_or(0) as u64,
            answered: row.get("state_seq"),
            outcome: outcome
                .and_then(Outcome::from_stored)
                .map(|outcome| (outcome, row.get("reason"))),
        });
    }
    Ok(Some(state))
}

/// What the replica holding the cosigning lock writes at a round's end.
pub(super) struct Recorded<'a> {
    /// The round's checkpoint.
    pub state: &'a RoundState,
    /// The witnesses sent it, with their answers (a verified line when they cosigned).
    pub answers: &'a [(WitnessStatus, Option<SignatureLine>)],
    /// The checkpoint with every verified cosignature.
    pub cosigned: &'a SignedNote,
    /// Their names.
    pub cosigners: &'a BTreeSet<String>,
    /// Whether they meet the quorum.
    pub quorum: bool,
}

/// A round's one write (`sql/checkpoints/record_round.sql`): the answers, and the
/// checkpoint published on the digest topic through the outbox, once short of the quorum
/// (after a round every witness answered or failed) and once with it.
pub(super) async fn record_round(
    client: &impl deadpool_postgres::GenericClient,
    recorded: Recorded<'_>,
) -> Result<(), CosignError> {
    let state = recorded.state;
    let answers = recorded.answers;
    let document = CosignedDocument {
        checkpoint: recorded.cosigned.text(),
        cosigners: recorded.cosigners.iter().cloned().collect(),
        digest_seq: state.seq,
        format: COSIGNED_FORMAT.into(),
        quorum: recorded.quorum,
        size: state.size,
    };
    let names: Vec<&str> = answers.iter().map(|(s, _)| s.witness.as_str()).collect();
    let lines: Vec<Option<String>> = answers
        .iter()
        .map(|(_, l)| l.as_ref().map(|l| l.text()))
        .collect();
    let sizes: Vec<i64> = answers.iter().map(|(s, _)| s.size as i64).collect();
    let outcomes: Vec<i16> = answers.iter().map(|(s, _)| s.outcome as i16).collect();
    let reasons: Vec<Option<&str>> = answers.iter().map(|(s, _)| s.reason.as_deref()).collect();
    client
        .execute(
            include_str!("../sql/checkpoints/record_round.sql"),
            &[
                &state.seq,
                &names,
                &lines,
                &sizes,
                &outcomes,
                &reasons,
                &recorded.quorum,
                &uuid::Uuid::now_v7(),
                &super::AGGREGATE_TYPE,
                &COSIGNED_EVENT_TYPE,
                &serde_json::to_vec(&document).expect("a document always serializes"),
            ],
        )
        .await?;
    Ok(())
}

/// The checkpoint digest `seq` sealed, or the newest (`None`), with every cosignature
/// stored for it, as a signed note, and the digest that sealed it
/// (`sql/checkpoints/cosigned.sql`); `None` when there is no such checkpoint (a digest
/// sealed before issue 47, or none yet).
pub async fn cosigned(
    client: &impl deadpool_postgres::GenericClient,
    seq: Option<i64>,
) -> Result<Option<(i64, SignedNote)>, CosignError> {
    let Some(row) = client
        .query_opt(include_str!("../sql/checkpoints/cosigned.sql"), &[&seq])
        .await?
    else {
        return Ok(None);
    };
    let seq: i64 = row.get(0);
    let unreadable = |error| CosignError::Checkpoint(seq, error);
    let mut note = SignedNote::parse(row.get(1)).map_err(unreadable)?;
    for line in row.get::<_, Vec<String>>(2) {
        note.add([SignatureLine::parse(&line).map_err(unreadable)?]);
    }
    Ok(Some((seq, note)))
}
