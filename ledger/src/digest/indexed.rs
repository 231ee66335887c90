//! Checking a proof's index part offline (issue 56, item 2): what makes a proven head the
//! stream's newest, "no RA" a proven answer, and a backdated event visible.
//!
//! The index leaf ([`super::index`]) must be the checkpoint's last leaf, so the witnesses
//! who cosign the checkpoint cosign it; it must be this digest's (number, time, streams).
//! Each carried stream's entry must show its head (version, hash, log position) and, for a
//! whole stream, the chain of its events' log positions. A stream the answer needs but the
//! proof does not carry must be shown absent. With a checkpoint the auditor kept, an event
//! sealed after it (its log position at or past that size) must have been recorded after
//! the time of the digest that sealed it: else it was backdated. `tests/verify_digest.py`
//! checks the same.

use chrono::{DateTime, Utc};

use super::document::{EventRecord, LogProof, StreamProof};
use super::index::{self, IndexLeaf};
use super::refused::Refused;
use super::{Statement, merkle};
use crate::tlog::note::Checkpoint;
use crate::tlog::tree;

/// What a proof's index part established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Indexed {
    /// The streams the index shows have no entry.
    pub absent: Vec<String>,
}

/// Checks `log`'s index part against `checkpoint` (already read with the log's key) and
/// the digest's `statement`; the error names the first thing that does not hold.
pub fn verify_index(
    streams: &[StreamProof],
    log: &LogProof,
    checkpoint: &Checkpoint,
    statement: &Statement,
) -> Result<Indexed, Refused> {
    let part = log.index.as_ref().ok_or(Refused::NoIndex)?;
    let last = checkpoint
        .size
        .checked_sub(1)
        .ok_or_else(|| Refused::IndexLeaf("the checkpoint is empty: no leaf ends it".into()))?;
    let leaf =
        ending_leaf(&part.leaf.0, &part.path, last, checkpoint).map_err(Refused::IndexLeaf)?;
    let digest_seq = statement.seq.unwrap_or(leaf.seq);
    if leaf.seq != digest_seq
        || leaf.time_micros != statement.time_micros
        || leaf.entries != statement.stream_count
    {
        return Err(Refused::IndexLeaf(format!(
            "it is of digest {} of {} µs with {} streams, not of this digest ({digest_seq}, {} \
             µs, {} streams)",
            leaf.seq, leaf.time_micros, leaf.entries, statement.time_micros, statement.stream_count
        )));
    }
    let mut shown = std::collections::HashMap::new();
    for at in &part.streams {
        if at.size != leaf.entries {
            return Err(Refused::Index(format!(
                "the index proof of stream {} is of {} entries, the index leaf's has {}",
                at.stream, at.size, leaf.entries
            )));
        }
        let entry = index::verify(&leaf.root, at, &at.stream)
            .map_err(|error| Refused::Index(error.to_string()))?;
        shown.insert(at.stream.as_str(), entry);
    }
    one_head_per_stream(streams, log)?;
    for (stream, head) in streams.iter().zip(&log.heads) {
        let name = &stream.stream;
        let Some(Some(entry)) = shown.get(name.as_str()) else {
            return Err(Refused::NotIndexed(name.clone()));
        };
        let last = stream
            .events
            .last()
            .ok_or_else(|| Refused::NoEvents(name.clone()))?;
        if entry.version != last.stream_version as u64
            || entry.head_hash != last.hash
            || entry.head_position != head.index
        {
            return Err(Refused::NotNewestHead {
                stream: name.clone(),
                indexed: entry.version,
                position: entry.head_position,
                proven: last.stream_version,
                proven_position: head.index,
            });
        }
        positions_hold(&stream.events, &head.positions, head.index, checkpoint.size)
            .and_then(|()| {
                let whole = stream.events.first().is_some_and(|e| e.stream_version == 1);
                if whole && index::positions_chain(&head.positions) != entry.positions.0 {
                    return Err("they are not the positions the index entry chains".into());
                }
                Ok(())
            })
            .map_err(|problem| Refused::Positions {
                stream: name.clone(),
                problem,
            })?;
    }
    let absent = shown
        .into_iter()
        .filter(|(_, entry)| entry.is_none())
        .map(|(stream, _)| stream.to_owned())
        .collect();
    Ok(Indexed { absent })
}

/// That the log part has one head per proven stream.
pub(super) fn one_head_per_stream(streams: &[StreamProof], log: &LogProof) -> Result<(), Refused> {
    if log.heads.len() == streams.len() {
        return Ok(());
    }
    Err(Refused::Malformed {
        field: "log.heads".into(),
        problem: format!("{} heads for {} streams", log.heads.len(), streams.len()),
    })
}

/// That `positions` are one per event, increasing, in the log, the last at the head.
fn positions_hold(
    events: &[EventRecord],
    positions: &[u64],
    head: u64,
    size: u64,
) -> Result<(), String> {
    if positions.len() != events.len() {
        return Err(format!(
            "{} positions for {} events",
            positions.len(),
            events.len()
        ));
    }
    if positions.windows(2).any(|pair| pair[0] >= pair[1]) {
        return Err("they do not increase".into());
    }
    match positions.last() {
        Some(&last) if last == head && last < size => Ok(()),
        _ => Err(format!(
            "the last is not the head's position {head} in a log of {size} leaves"
        )),
    }
}

/// The index leaf `bytes` at `index` of `checkpoint`'s tree, by `path`.
fn ending_leaf(
    bytes: &[u8],
    path: &[super::document::HexHash],
    index: u64,
    checkpoint: &Checkpoint,
) -> Result<IndexLeaf, String> {
    let leaf = IndexLeaf::parse(bytes).ok_or_else(|| {
        format!(
            "{} bytes that are not an index leaf ({} bytes, `ra-ledger index v1` first)",
            bytes.len(),
            index::INDEX_LEAF_LEN
        )
    })?;
    let path: Vec<merkle::Hash> = path.iter().map(|hash| hash.0).collect();
    tree::verify_inclusion(
        &leaf.leaf_hash(),
        index,
        checkpoint.size,
        &path,
        &checkpoint.root,
    )
    .map_err(|problem| {
        format!(
            "it is not leaf {index} of the checkpoint of size {}: {problem}",
            checkpoint.size
        )
    })?;
    Ok(leaf)
}

/// That no carried event sealed after the auditor's `saved` checkpoint (its log position at
/// or past `saved.size`) was recorded by the time of the digest that sealed `saved`, whose
/// index leaf ends it.
pub fn not_backdated(
    streams: &[StreamProof],
    log: &LogProof,
    checkpoint: &Checkpoint,
    saved: &Checkpoint,
) -> Result<(), Refused> {
    if saved.size == 0 {
        return Ok(());
    }
    let part = log.index.as_ref().ok_or(Refused::NoIndex)?;
    let (bytes, path) = if saved.size == checkpoint.size {
        (&part.leaf.0, &part.path)
    } else {
        let entry = log
            .consistency
            .iter()
            .find(|proof| proof.old_size == saved.size);
        match entry.and_then(|e| Some((&e.index_leaf.as_ref()?.0, e.index_path.as_ref()?))) {
            Some(found) => found,
            None => return Err(Refused::SavedWithoutIndex(saved.size)),
        }
    };
    let leaf = ending_leaf(bytes, path, saved.size - 1, checkpoint)
        .map_err(|_| Refused::SavedWithoutIndex(saved.size))?;
    let saved_time = words(leaf.time_micros);
    for (stream, head) in streams.iter().zip(&log.heads) {
        for (event, &position) in stream.events.iter().zip(&head.positions) {
            if position >= saved.size && event.recorded_at.timestamp_micros() <= leaf.time_micros {
                return Err(Refused::Backdated {
                    event_id: event.event_id,
                    recorded: words(event.recorded_at.timestamp_micros()),
                    position,
                    saved_size: saved.size,
                    saved_time,
                });
            }
        }
    }
    Ok(())
}

fn words(micros: i64) -> String {
    DateTime::<Utc>::from_timestamp_micros(micros)
        .map_or_else(|| format!("{micros} µs"), |time| time.to_rfc3339())
}
