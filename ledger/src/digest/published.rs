//! `ledger verify --digests`: the ledger checked against the digests it published on Kafka,
//! which a superuser of the database cannot take back.
//!
//! For every published digest: its signature, the chain to the one before it, and that the
//! current tables reproduce its root. The leaves of digest N are rebuilt from
//! `digest_leaf_changes` (which stream was at which version when N was sealed) with the
//! hash the `events` table holds *now* at that version; the root is compared with the
//! published one. A stream rewritten with recomputed hashes, deleted, or cut short changes
//! a leaf, so the root disagrees, and comparing the hashes with the ones recorded at
//! sealing names the streams. The published root is what counts: if `digest_leaf_changes`
//! was rewritten as well, the root still disagrees, only the streams cannot be named.

use std::collections::BTreeMap;
use std::time::Duration;

use ra_ledger_cdc::infra::entry::Entry;
use serde::Deserialize;
use serde_json::Value;
use tokio_postgres::Client;

use super::Head;
use super::document::{DigestFormat, SignedFields};
use super::merkle::{self, Hash};

pub use super::chain::Published;

/// What `ledger verify --digests` reads of a digest document besides its signed fields:
/// its format and its number. The time in words, the digest's hash and the key are not read.
#[derive(Deserialize)]
struct Numbered {
    #[allow(dead_code, reason = "read to refuse a document of another format")]
    format: DigestFormat,
    seq: i64,
}

/// A message on the digest topic that is not a digest document.
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    /// Not JSON at all.
    #[error("{location}: not JSON: {source}")]
    NotJson {
        /// Where it was read.
        location: String,
        /// What the parser said.
        source: serde_json::Error,
    },
    /// A field that does not read as its type.
    #[error("{location}: {field}: {problem}")]
    Field {
        /// Where it was read.
        location: String,
        /// The field, e.g. `signature`.
        field: String,
        /// What is wrong with it, naming the value.
        problem: String,
    },
}

/// Reads the digest document ([`super::DigestDocument`]) of a message read at `location`.
pub fn parse(payload: &[u8], location: &str) -> Result<Published, Unreadable> {
    let document: Value =
        serde_json::from_slice(payload).map_err(|source| Unreadable::NotJson {
            location: location.to_owned(),
            source,
        })?;
    // The format first: a message of another kind is named as such.
    let numbered: Numbered = read_field(&document, location)?;
    let signed: SignedFields = read_field(&document, location)?;
    Ok(Published {
        seq: numbered.seq,
        digest: signed.into(),
        location: location.to_owned(),
    })
}

/// Reads part of a digest document as `T`; the error names the field and the value.
fn read_field<T: serde::de::DeserializeOwned>(
    document: &Value,
    location: &str,
) -> Result<T, Unreadable> {
    serde_path_to_error::deserialize(document).map_err(|error| Unreadable::Field {
        location: location.to_owned(),
        field: error.path().to_string(),
        problem: error.inner().to_string(),
    })
}

/// One stream whose head, as the tables hold it now, is not the one a digest sealed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Differing {
    /// The stream.
    pub stream: String,
    /// The version the digest sealed.
    pub version: i64,
    /// What the tables hold there now.
    pub now: &'static str,
}

/// The first digest the tables do not reproduce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    /// The digest.
    pub seq: i64,
    /// Its time.
    pub time_micros: i64,
    /// The streams whose heads differ (empty when the record of sealed leaves was rewritten
    /// too).
    pub streams: Vec<Differing>,
    /// Later digests that disagree too.
    pub later: usize,
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let time = chrono::DateTime::from_timestamp_micros(self.time_micros)
            .map(|time| time.to_rfc3339())
            .unwrap_or_default();
        write!(
            f,
            "digest {} (sealed {time}): the current tables do not reproduce its root",
            self.seq
        )?;
        if self.streams.is_empty() {
            write!(
                f,
                "; no stream's event differs from the sealed leaves the database recorded, so that record was rewritten too"
            )?;
        } else {
            write!(f, "; streams whose heads differ:")?;
            for differing in self.streams.iter().take(20) {
                write!(
                    f,
                    " {} (sealed at version {}: {});",
                    differing.stream, differing.version, differing.now
                )?;
            }
            if self.streams.len() > 20 {
                write!(f, " and {} more;", self.streams.len() - 20)?;
            }
        }
        if self.later > 0 {
            write!(f, " {} later digest(s) disagree too", self.later)?;
        }
        Ok(())
    }
}

/// What `ledger verify --digests` found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DigestReport {
    /// Published digests checked.
    pub checked: usize,
    /// Signatures, chain links, duplicates, gaps: in order.
    pub problems: Vec<String>,
    /// The first digest the tables do not reproduce.
    pub disagreement: Option<Disagreement>,
    /// Digests in the table but not published yet (the relay may be behind).
    pub unpublished: Vec<i64>,
    /// Extra copies of a digest read from the topic: at-least-once delivery repeats a
    /// message after a relay restart, byte for byte. Each counts once in `checked`.
    pub copies: usize,
    /// Copies of a version-1 digest labelled with another number than its chain gives it
    /// (its number is not signed, so anyone may relabel one): counted once, at its place.
    pub relabelled: usize,
}

impl DigestReport {
    /// Whether everything held.
    pub fn holds(&self) -> bool {
        self.problems.is_empty() && self.disagreement.is_none()
    }
}

/// Reads every digest published on `topic` and checks them against the tables (see
/// [`check`]); messages that are not digests are reported as problems.
#[inline(never)]
pub fn verify_topic<'a>(
    client: &'a Client,
    config: rdkafka::ClientConfig,
    topic: &'a str,
    key: &'a ed25519_dalek::VerifyingKey,
    timeout: Duration,
) -> Entry<'a, Result<DigestReport, VerifyError>> {
    Box::pin(verify_topic_inner(client, config, topic, key, timeout))
}

async fn verify_topic_inner(
    client: &Client,
    config: rdkafka::ClientConfig,
    topic: &str,
    key: &ed25519_dalek::VerifyingKey,
    timeout: Duration,
) -> Result<DigestReport, VerifyError> {
    let read_topic = topic.to_owned();
    let messages = tokio::task::spawn_blocking(move || {
        super::topic::read_blocking(config, &read_topic, timeout)
    })
    .await??;
    let mut digests = Vec::with_capacity(messages.len());
    let mut unreadable = Vec::new();
    for (location, payload) in &messages {
        // Cosigned checkpoints share the topic (issue 47); they are not digests.
        if super::cosign::is_cosigned_checkpoint(payload) {
            continue;
        }
        match parse(payload, location) {
            Ok(digest) => digests.push(digest),
            Err(problem) => unreadable.push(problem.to_string()),
        }
    }
    let mut report = check(client, digests, key).await?;
    report.problems.splice(0..0, unreadable);
    Ok(report)
}

/// Why the published digests could not be checked.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The topic could not be read.
    #[error("{0}")]
    Topic(#[from] super::topic::TopicError),
    /// The reading thread panicked or was cancelled.
    #[error("reading the digest topic: {0}")]
    Reader(#[from] tokio::task::JoinError),
    /// A statement failed.
    #[error("{}", crate::db::describe(.0))]
    Database(#[from] tokio_postgres::Error),
}

/// Checks `published` (in any order, duplicates allowed: the relay delivers at least once)
/// with `key`, against the tables `client` reads. A message whose signature does not verify
/// is reported and left out of everything else: it is no statement of the ledger's. The
/// others are placed by what they sign ([`super::chain`]), then checked in order.
pub async fn check(
    client: &Client,
    published: Vec<Published>,
    key: &ed25519_dalek::VerifyingKey,
) -> Result<DigestReport, tokio_postgres::Error> {
    let mut report = DigestReport::default();
    let (signed, unsigned): (Vec<Published>, Vec<Published>) = published
        .into_iter()
        .partition(|digest| digest.digest.verify(key));
    let mut named = std::collections::HashSet::new();
    for digest in &unsigned {
        // Each document once, however often it was delivered.
        if !named.insert((digest.seq, digest.digest.hash())) {
            continue;
        }
        report.problems.push(format!(
            "digest {} ({}): the signature does not verify with the public key",
            digest.seq, digest.location
        ));
    }
    let placed = super::chain::place(signed);
    report.copies = placed.copies;
    report.relabelled = placed.relabelled;
    report.problems.extend(placed.problems);
    let published = placed.digests;
    report.checked = published.len();
    let mut previous: Option<&Published> = None;
    for digest in &published {
        let expected_previous = match previous {
            Some(before) if before.seq + 1 == digest.seq => Some(before.digest.hash()),
            Some(before) => {
                report.problems.push(format!(
                    "digests {} to {} are missing from the topic",
                    before.seq + 1,
                    digest.seq - 1
                ));
                None
            }
            None if digest.seq == 1 => Some([0; 32]),
            None => {
                report.problems.push(format!(
                    "digests 1 to {} are missing from the topic",
                    digest.seq - 1
                ));
                None
            }
        };
        if expected_previous.is_some_and(|hash| hash != digest.digest.statement.previous) {
            report.problems.push(format!(
                "digest {} does not chain to digest {}: its previous hash is another",
                digest.seq,
                digest.seq - 1
            ));
        }
        previous = Some(digest);
    }
    check_against_table(client, &published, &mut report).await?;
    reproduce_roots(client, &published, &mut report).await?;
    Ok(report)
}

/// The `digests` table must hold each published digest, the same; digests it holds beyond
/// the last published are reported as not published yet.
async fn check_against_table(
    client: &Client,
    published: &[Published],
    report: &mut DigestReport,
) -> Result<(), tokio_postgres::Error> {
    let stored: BTreeMap<i64, Vec<u8>> = client
        .query(include_str!("../sql/digest/digest_hashes.sql"), &[])
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    for digest in published {
        match stored.get(&digest.seq) {
            None => report.problems.push(format!(
                "digest {} was published but is not in the digests table",
                digest.seq
            )),
            Some(hash) if hash[..] != digest.digest.hash()[..] => report.problems.push(format!(
                "digest {} in the digests table is not the one published",
                digest.seq
            )),
            Some(_) => {}
        }
    }
    let last = published.last().map_or(0, |digest| digest.seq);
    report.unpublished = stored.range(last + 1..).map(|(seq, _)| *seq).collect();
    Ok(())
}

/// A stream's leaf as a digest sealed it.
struct SealedLeaf {
    /// The sealed version.
    version: i64,
    /// The head hash recorded at sealing.
    sealed: Vec<u8>,
    /// The hash `events` holds now at that version; `None`: no such event.
    now: Option<Vec<u8>>,
}

/// Rebuilds each digest's leaves from the current `events` and compares its root.
async fn reproduce_roots(
    client: &Client,
    published: &[Published],
    report: &mut DigestReport,
) -> Result<(), tokio_postgres::Error> {
    // Per stream: the sealed version, the hash recorded at sealing, the hash `events`
    // holds now at that version (None: no such event).
    let mut leaves: BTreeMap<String, SealedLeaf> = BTreeMap::new();
    let mut applied = 0i64;
    for digest in published {
        let changes = client
            .query(
                include_str!("../sql/digest/sealed_leaves.sql"),
                &[&applied, &digest.seq],
            )
            .await?;
        applied = digest.seq;
        for row in changes {
            leaves.insert(
                row.get(0),
                SealedLeaf {
                    version: row.get(1),
                    sealed: row.get(2),
                    now: row.get(3),
                },
            );
        }
        let (heads, differing) = rebuild(&leaves);
        let statement = &digest.digest.statement;
        let reproduced = heads.is_some_and(|heads| {
            // BTreeMap order is the tree's order: stream names by their UTF-8 bytes.
            let hashes: Vec<Hash> = heads.iter().map(Head::leaf_hash).collect();
            merkle::root(&hashes) == statement.root && heads.len() as u64 == statement.stream_count
        });
        if reproduced {
            continue;
        }
        match &mut report.disagreement {
            Some(first) => first.later += 1,
            None => {
                report.disagreement = Some(Disagreement {
                    seq: digest.seq,
                    time_micros: statement.time_micros,
                    streams: differing,
                    later: 0,
                })
            }
        }
    }
    Ok(())
}

/// The heads the sealed leaves have in the tables now, and the streams whose head differs
/// from the one sealed. No heads when a leaf cannot be rebuilt (no event at its version, or
/// a hash there that is not 32 bytes): then the tables do not reproduce the root.
fn rebuild(leaves: &BTreeMap<String, SealedLeaf>) -> (Option<Vec<Head>>, Vec<Differing>) {
    let mut heads = Some(Vec::with_capacity(leaves.len()));
    let mut differing = Vec::new();
    for (stream, leaf) in leaves {
        let differs = |now| Differing {
            stream: stream.clone(),
            version: leaf.version,
            now,
        };
        match &leaf.now {
            None => differing.push(differs("no such event in the events table")),
            Some(now) if *now != leaf.sealed => {
                differing.push(differs("the event there has another hash"))
            }
            Some(_) => {}
        }
        let hash: Option<Hash> = leaf.now.as_deref().and_then(|now| now.try_into().ok());
        heads = heads.zip(hash).map(|(mut heads, hash)| {
            heads.push(Head {
                stream: stream.clone(),
                version: leaf.version as u64,
                hash,
            });
            heads
        });
    }
    (heads, differing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_that_is_no_digest_is_named_by_its_place_field_and_value() {
        let sample = include_str!("samples/digest.json");
        let read = parse(sample.as_bytes(), "t/0@1").expect("the sample digest");
        assert_eq!((read.seq, read.location.as_str()), (1, "t/0@1"));
        let refused = |payload: &[u8]| parse(payload, "t/0@2").expect_err("refused").to_string();
        assert!(refused(b"{not json").starts_with("t/0@2: not JSON: "));
        let mut document: Value = serde_json::from_str(sample).expect("JSON");
        document["signature"] = serde_json::json!("00".repeat(63));
        let payload = serde_json::to_vec(&document).expect("JSON");
        assert_eq!(
            refused(&payload),
            format!(
                "t/0@2: signature: not 64 bytes: {:?} is 63 bytes",
                "00".repeat(63)
            )
        );
        document["format"] = serde_json::json!("something else");
        let payload = serde_json::to_vec(&document).expect("JSON");
        assert!(
            refused(&payload)
                .contains("not an ra-ledger digest v2 (or ra-ledger digest v1) document"),
            "{}",
            refused(&payload)
        );
    }
}
