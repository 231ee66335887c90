//! `ledger-bench witness`: what the transparency log costs at a million events, against the
//! real witnesses of a policy (the stack's two litewitness): the cosigning round trip per
//! cosignature, the size of a proof's log part, and the time to check it offline.
//!
//! The log here is a synthetic one of `--events` leaves under an origin of its own, signed
//! with a key made for the run, registered with each witness through `witnessctl` (the
//! witnesses' databases are given): the ledger's database is not touched. A digest adds the
//! same work per checkpoint whatever the events are: one signature, one consistency proof
//! of at most 2·log2(n) hashes, one round trip per witness.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ra_ledger::digest::DigestKey;
use ra_ledger::digest::cosign::{client, post};
use ra_ledger::digest::document::{ConsistencyProof, Hex, LogInclusion, LogProof};
use ra_ledger::tlog::note::{Checkpoint, NoteKey, SignedNote, sign_checkpoint};
use ra_ledger::tlog::policy::Policy;
use ra_ledger::tlog::tree::{Tree, verify_consistency, verify_inclusion};
use ra_ledger::tlog::witness::{Answer, request_body};

/// What the bench is given.
#[derive(Debug)]
pub struct WitnessBench {
    /// The witness policy (`witness <name> <vkey> <url>` lines).
    pub policy: PathBuf,
    /// Each witness's litewitness database, in the policy's order, to register the log.
    pub witness_dbs: Vec<PathBuf>,
    /// `witnessctl`.
    pub witnessctl: PathBuf,
    /// Leaves in the log.
    pub events: u64,
    /// Checkpoints sent one leaf apart, each timed.
    pub appends: u64,
}

pub async fn run(bench: WitnessBench) -> anyhow::Result<()> {
    let policy = Policy::parse(&std::fs::read_to_string(&bench.policy)?)
        .map_err(|error| anyhow::anyhow!("--policy {}: {error}", bench.policy.display()))?;
    anyhow::ensure!(
        policy.witnesses.len() == bench.witness_dbs.len(),
        "--witness-db: {} given for the policy's {} witnesses, in its order",
        bench.witness_dbs.len(),
        policy.witnesses.len()
    );
    let key = DigestKey::from_seed(&rand::random());
    let origin = format!("ra-ledger.bench/{}", uuid::Uuid::new_v4().simple());
    let vkey = NoteKey::log(&origin, key.public()).vkey();
    for db in &bench.witness_dbs {
        let db = db.to_string_lossy();
        for args in [
            vec!["add-log", "-db", &db, "-origin", &origin],
            vec!["add-key", "-db", &db, "-origin", &origin, "-key", &vkey],
        ] {
            let status = std::process::Command::new(&bench.witnessctl)
                .args(&args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()?;
            anyhow::ensure!(status.success(), "witnessctl {args:?} failed");
        }
    }
    let started = Instant::now();
    let mut log = Tree::new();
    for i in 0..bench.events {
        log.push(&i.to_be_bytes());
    }
    outln!(
        "log of {} leaves built in memory in {:.2} s",
        log.size(),
        started.elapsed().as_secs_f64()
    );
    let http = client(Duration::from_secs(10));
    let sign = |log: &Tree| {
        sign_checkpoint(
            key.public(),
            |m| key.sign_bytes(m),
            &Checkpoint {
                origin: origin.clone(),
                size: log.size(),
                root: log.root(),
            },
        )
    };
    // The first checkpoint (old 0), then one leaf at a time, as a busy ledger's digests.
    let mut held = 0u64;
    let mut note = sign(&log);
    let mut timings = Vec::new();
    for round in 0..=bench.appends {
        if round > 0 {
            log.push(&(bench.events + round).to_be_bytes());
            note = sign(&log);
        }
        let proof = log.consistency_proof(held, log.size()).expect("a proof");
        let body = request_body(held, &proof, &note);
        let mut cosigned = note.clone();
        for witness in &policy.witnesses {
            let url = witness.url.as_deref().expect("policy URLs");
            let sent = Instant::now();
            let answer = post(&http, url, &body).await;
            let took = sent.elapsed();
            match answer {
                Answer::Cosigned(lines) => {
                    cosigned.add(lines);
                    if round > 0 {
                        timings.push(took);
                    }
                }
                other => anyhow::bail!("witness {} answered {other:?}", witness.name),
            }
        }
        held = log.size();
        note = cosigned;
    }
    timings.sort();
    let total: Duration = timings.iter().sum();
    outln!(
        "cosigning round trip, one checkpoint one leaf apart at {} leaves, per cosignature over {} ({} witnesses): mean {:.2} ms, median {:.2} ms, p99 {:.2} ms",
        bench.events,
        timings.len(),
        policy.witnesses.len(),
        total.as_secs_f64() * 1e3 / timings.len().max(1) as f64,
        timings[timings.len() / 2].as_secs_f64() * 1e3,
        timings[timings.len() * 99 / 100].as_secs_f64() * 1e3
    );
    // A proof's log part: the cosigned checkpoint, a head's inclusion, a consistency proof
    // from a checkpoint saved a million leaves ago.
    let size = log.size();
    let index = size / 3;
    let saved_size = size / 2;
    let part = LogProof {
        checkpoint: note.text(),
        consistency: vec![ConsistencyProof {
            old_size: saved_size,
            proof: log
                .consistency_proof(saved_size, size)
                .expect("a proof")
                .into_iter()
                .map(Hex)
                .collect(),
            index_leaf: None,
            index_path: None,
        }],
        heads: vec![LogInclusion {
            index,
            path: log
                .inclusion_proof(index, size)
                .expect("a path")
                .into_iter()
                .map(Hex)
                .collect(),
            positions: vec![index],
        }],
        index: None,
    };
    let json = serde_json::to_string(&part)?;
    outln!(
        "a proof's log part at {size} leaves: {} bytes of JSON ({} inclusion hashes, {} consistency hashes, a checkpoint of {} bytes with {} signatures)",
        json.len(),
        part.heads[0].path.len(),
        part.consistency[0].proof.len(),
        part.checkpoint.len(),
        note.signatures.len()
    );
    // Offline: read it, check the log's signature, every cosignature, the inclusion and
    // the consistency with the saved root.
    let saved_root = log.root_at(saved_size).expect("a root");
    let leaf = log.leaf(index).expect("a leaf");
    let check = || -> anyhow::Result<()> {
        let part: LogProof = serde_json::from_str(&json)?;
        let note = SignedNote::parse(&part.checkpoint)?;
        let checkpoint = Checkpoint::parse(&note.body)?;
        NoteKey::log(&origin, key.public()).verify_signature(&note)?;
        let cosigned = policy.cosigners(&note).set();
        anyhow::ensure!(policy.satisfied(&cosigned), "quorum");
        let path: Vec<_> = part.heads[0].path.iter().map(|h| h.0).collect();
        verify_inclusion(&leaf, index, checkpoint.size, &path, &checkpoint.root)?;
        let proof: Vec<_> = part.consistency[0].proof.iter().map(|h| h.0).collect();
        verify_consistency(
            saved_size,
            checkpoint.size,
            &saved_root,
            &checkpoint.root,
            &proof,
        )?;
        Ok(())
    };
    let runs = 1_000;
    let started = Instant::now();
    for _ in 0..runs {
        check()?;
    }
    outln!(
        "offline check of that log part (JSON read, log signature, {} cosignatures, inclusion, consistency): {:.3} ms each over {runs}",
        policy.witnesses.len(),
        started.elapsed().as_secs_f64() * 1e3 / runs as f64
    );
    Ok(())
}
