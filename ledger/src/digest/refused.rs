//! Why a proof does not hold, and what the checks of [`super::verify`] and [`super::answer`]
//! read and establish: the types both use, in a file of their own so that neither of the
//! two imports the other.

use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

/// The question of a proven answer, as a verifier reads it: the instants in microseconds
/// (the RFC 3339 copies are for people and are not read).
#[derive(Debug, Clone, Deserialize)]
pub struct AskedQuestion {
    /// The business.
    pub business_id: Uuid,
    /// The jurisdiction's code.
    pub jurisdiction: String,
    /// Business time.
    pub at_micros: i64,
    /// Transaction time.
    pub known_at_micros: i64,
}

/// Why a proof does not hold: the first thing found that does not.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// A field does not read as its type.
    #[error("{field}: {problem}")]
    Malformed {
        /// Where, e.g. `digest.signature`.
        field: String,
        /// What is wrong with it, naming the value.
        problem: String,
    },
    /// Not signed by the key given.
    #[error("the digest's signature does not verify with the public key")]
    Signature,
    /// Nothing proven.
    #[error("the proof has no streams")]
    NoStreams,
    /// A stream without events.
    #[error("the proof of stream {0} has no events")]
    NoEvents(String),
    /// An event's proof whose first event is another.
    #[error("the proof's first event is not the event it proves")]
    NotTheEvent,
    /// An event listed under another stream.
    #[error("event {event_id} is of stream {actual}, not {listed}")]
    OtherStream {
        /// The event.
        event_id: Uuid,
        /// Its stream.
        actual: String,
        /// The stream it is listed under.
        listed: String,
    },
    /// A version missing between two events.
    #[error("event {event_id} does not follow version {version} of {stream}")]
    NotNext {
        /// The event.
        event_id: Uuid,
        /// The version before it.
        version: i64,
        /// The stream.
        stream: String,
    },
    /// An event whose previous hash is not the hash of the event before it.
    #[error("event {0} does not chain to the event before it")]
    Unchained(Uuid),
    /// A first event that names a previous hash.
    #[error("event {event_id} is version 1 of {stream} but chains to an earlier one")]
    ChainsBeforeFirst {
        /// The event.
        event_id: Uuid,
        /// The stream.
        stream: String,
    },
    /// An event whose fields do not hash to its hash.
    #[error("event {event_id} (version {version}) does not hash to its recorded hash")]
    Hash {
        /// The event.
        event_id: Uuid,
        /// Its version.
        version: i64,
    },
    /// A payload that is not an envelope.
    #[error("event {0}: the payload is not an event envelope")]
    Payload(Uuid),
    /// A payload that says otherwise than the event's fields.
    #[error("event {0}: the payload disagrees with the event's fields")]
    PayloadDisagrees(Uuid),
    /// A head whose leaf does not reach the signed root.
    #[error("the inclusion path of stream {0} does not lead to the root")]
    Path(String),
    /// A question about a jurisdiction that does not exist.
    #[error("question.jurisdiction {0:?} is not a jurisdiction")]
    Jurisdiction(String),
    /// A question's instant outside the times the ledger can hold.
    #[error("question.{field} {micros} is not an instant the ledger can hold")]
    Instant {
        /// `at_micros` or `known_at_micros`.
        field: &'static str,
        /// The value.
        micros: i64,
    },
    /// A question as known at an instant after the digest's.
    #[error(
        "the answer is not proven for known_at {known_at}: the digest is of {sealed}, and \
         proves what was recorded by then, not that nothing else was recorded by known_at"
    )]
    KnownAfterDigest {
        /// The question's `known_at`.
        known_at: chrono::DateTime<chrono::Utc>,
        /// The digest's time.
        sealed: String,
    },
    /// An answer without a stream the question or the answer names.
    #[error("the proof does not prove stream {stream}, {why}")]
    MissingStream {
        /// The stream.
        stream: String,
        /// Why the answer needs it.
        why: String,
    },
    /// A stream the question and its answer do not name.
    #[error(
        "the proof carries stream {stream}, which the question and its answer do not name: \
         an answer to this question folds only {expected}"
    )]
    StreamNotAsked {
        /// The stream.
        stream: String,
        /// The streams the answer folds.
        expected: String,
    },
    /// A stream carried twice.
    #[error("the proof carries stream {0} twice")]
    StreamTwice(String),
    /// A question stated on the command line for a proof with none.
    #[error(
        "the proof answers no question (it is an event's proof): drop --business, \
         --jurisdiction, --at and --known-at, or ask for the answer's proof"
    )]
    NoQuestion,
    /// A proof of another question than the one stated.
    #[error(
        "the proof answers another question: you asked {field} {stated}, it answers {field} {proven}"
    )]
    OtherQuestion {
        /// The part that differs, as its flag names it.
        field: &'static str,
        /// What the auditor stated.
        stated: String,
        /// What the proof answers.
        proven: String,
    },
    /// `--max-age` with no verified cosignature to date the checkpoint.
    #[error(
        "--max-age needs a cosignature of the policy's witnesses, and none verified: pass \
         --policy with the witnesses' keys"
    )]
    NoCosignatureTime,
    /// The newest cosignature older than the auditor allows.
    #[error(
        "the newest cosignature is of {newest}, {age} s ago, older than --max-age {max_age} s: \
         ask the ledger for a fresh proof (or the witnesses are not cosigning)"
    )]
    Stale {
        /// The newest cosignature's time.
        newest: String,
        /// Its age in seconds.
        age: u64,
        /// The most allowed.
        max_age: u64,
    },
    /// A checkpoint not signed by the policy's log key, or a policy's log key that is not
    /// the key given.
    #[error("{0}")]
    LogKey(String),
    /// An answer proven from part of a stream.
    #[error(
        "the proof of stream {stream} starts at version {first}: an answer needs whole streams"
    )]
    PartialStream {
        /// The stream.
        stream: String,
        /// Its first proven version.
        first: i64,
    },
    /// Events that do not fold ([`Fold::new`](crate::queries::Fold::new) says why).
    #[error("{0}")]
    Fold(String),
    /// An answer the events do not give.
    #[error(
        "the proven events fold to another answer than the one given: they give {}, the proof's answer is {}",
        describe_answer(.folded),
        describe_answer(.given)
    )]
    OtherAnswer {
        /// What the proven events fold to (`null`: no registered agent).
        folded: Value,
        /// The answer the proof carries.
        given: Value,
    },
    /// A saved API answer whose fields are not the answer its proof proves.
    #[error("the answer's fields beside `proof` are not the proof's `answer`")]
    AnswerBesideProof,
    /// The proof has no transparency-log part, and one was required.
    #[error("the proof has no transparency log part (its digest sealed no checkpoint)")]
    NoLog,
    /// A checkpoint that does not read or whose log signature fails.
    #[error("{what}: {problem}")]
    Checkpoint {
        /// Which checkpoint.
        what: String,
        /// What is wrong.
        problem: String,
    },
    /// A proof with a log part but no index part.
    #[error(
        "the proof carries no index of its checkpoint (its digest was sealed before the \
         index): ask for a new proof"
    )]
    NoIndex,
    /// The index leaf does not read, is not the checkpoint's last leaf, or is another
    /// digest's.
    #[error("the index leaf: {0}")]
    IndexLeaf(String),
    /// An index proof that does not hold.
    #[error("{0}")]
    Index(String),
    /// A proven stream without its entry in the index.
    #[error(
        "the proof carries no index entry of stream {0}: nothing shows that its head is the \
         newest"
    )]
    NotIndexed(String),
    /// A proven head that is not the one the index holds.
    #[error(
        "the index holds stream {stream} at version {indexed} (head at log position \
         {position}), the proof's head is version {proven} at {proven_position}: the proof is \
         not of the stream's newest head"
    )]
    NotNewestHead {
        /// The stream.
        stream: String,
        /// The version the index holds.
        indexed: u64,
        /// Its head's log position.
        position: u64,
        /// The version proven.
        proven: i64,
        /// The proven head's log position.
        proven_position: u64,
    },
    /// The log positions of a stream's events that do not hold.
    #[error("the log positions of stream {stream}: {problem}")]
    Positions {
        /// The stream.
        stream: String,
        /// What does not hold.
        problem: String,
    },
    /// A saved checkpoint whose index leaf the proof does not show.
    #[error(
        "your saved checkpoint of size {0} does not end with an index leaf the proof shows \
         (saved before the index, or the proof was cut): save a newer checkpoint, or ask \
         again with consistent_with={0}"
    )]
    SavedWithoutIndex(u64),
    /// An event sealed after a saved checkpoint, recorded before that checkpoint's time.
    #[error(
        "event {event_id} is recorded at {recorded} (by the time {saved_time} of your saved \
         checkpoint's digest) but sits at log position {position}, after that checkpoint's \
         size {saved_size}: it was BACKDATED"
    )]
    Backdated {
        /// The event.
        event_id: Uuid,
        /// Its recorded_at.
        recorded: String,
        /// Its log position.
        position: u64,
        /// The saved checkpoint's size.
        saved_size: u64,
        /// That checkpoint's digest's time.
        saved_time: String,
    },
    /// Cosignatures short of the policy's quorum.
    #[error("the checkpoint is cosigned by [{cosigned}], short of the policy's quorum {quorum}")]
    Quorum {
        /// The witnesses whose cosignature verified.
        cosigned: String,
        /// The quorum in words.
        quorum: String,
    },
    /// A head event that is not in the log at its stated place.
    #[error("the head of stream {stream} is not in the log at index {index}: {problem}")]
    LogPath {
        /// The stream.
        stream: String,
        /// The index claimed.
        index: u64,
        /// What the check said.
        problem: String,
    },
    /// A saved checkpoint the proof's log does not extend.
    #[error(
        "NOT CONSISTENT with your saved checkpoint of size {saved_size} (root {saved_root}): \
         {problem}; the log's history as of your checkpoint was rewritten, or you were shown a \
         split view"
    )]
    Inconsistent {
        /// The saved checkpoint's size.
        saved_size: u64,
        /// Its root, base64.
        saved_root: String,
        /// What the consistency check said.
        problem: String,
    },
    /// A saved checkpoint with no consistency proof from its size in the proof.
    #[error(
        "the proof carries no consistency proof from your saved checkpoint's size {0}: ask \
         again with consistent_with={0}"
    )]
    NoConsistencyProof(u64),
    /// A saved checkpoint newer than the proof's.
    #[error(
        "your saved checkpoint (size {saved}) is newer than the proof's (size {size}): ask for a newer proof"
    )]
    SavedNewer {
        /// The saved checkpoint's size.
        saved: u64,
        /// The proof's.
        size: u64,
    },
}

/// One stream a proof established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvenStream {
    /// The stream.
    pub stream: String,
    /// Its first proven event's version.
    pub first_version: i64,
    /// The head version the digest sealed.
    pub sealed_version: i64,
}

/// An audit answer in words, for an operator reading why a proof was refused: `null` is no
/// registered agent, else the contact and the assignment. Pure.
fn describe_answer(answer: &Value) -> String {
    if answer.is_null() {
        return "no registered agent".to_owned();
    }
    let field = |value: &Value| {
        value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_owned)
    };
    format!(
        "contact {} ({:?}) through assignment {}",
        field(&answer["contact"]["contact_id"]),
        field(&answer["contact"]["name"]),
        field(&answer["assignment"]["assignment_id"]),
    )
}
