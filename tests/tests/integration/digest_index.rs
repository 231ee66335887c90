//! Issue 56, item 2: what the index the witnesses cosign makes provable. Both verifiers
//! (`ledger proof verify`'s checks in Rust and `tests/verify_digest.py`) refuse
//! - the omission forgery: a digest re-signed with the key over an older head, paired with
//!   the real cosigned checkpoint and real log paths;
//! - a backdated append: events a superuser recorded with a time before a checkpoint the
//!   auditor kept, sealed after it;
//!
//! and "no RA" is proven, by the index, for a business never served there (in
//! `digest_forgeries`, beside the forged answers).

use ra_ledger::digest::document::DigestDocument;
use ra_ledger::digest::log::{read_indexed, read_log};
use ra_ledger::digest::prove::for_answer_with;
use ra_ledger::digest::{Head, Statement, merkle};
use ra_ledger::domain::Jurisdiction;
use ra_ledger::hex::{hex, unhex};
use serde_json::{Value, json};

use crate::digest_forgeries::{Audited, python_verdicts};

/// Both verifiers' verdicts on `document`, with the policy and the `saved` checkpoints:
/// Rust's and Python's, each `Ok(what it said)` or `Err(why not)`.
fn verdicts(
    audited: &Audited,
    name: &str,
    document: &Value,
    saved: &[String],
) -> anyhow::Result<(Result<String, String>, Result<String, String>)> {
    use ra_ledger::digest::verify::{ClaimedProof, verify, verify_log};
    let key = audited.key.public();
    let rust = ClaimedProof::from_json(document)
        .and_then(|proof| {
            let verified = verify(&proof, &key)?;
            verify_log(&proof, &key, Some(&audited.policy), saved)?;
            Ok(verified.answer.unwrap_or_default())
        })
        .map_err(|refused| refused.to_string());
    let file = audited.file(name, document)?;
    let mut flags: Vec<String> = vec![
        "--public-key".into(),
        audited.dir.join("public.pem").display().to_string(),
        "--policy".into(),
        audited.dir.join("policy.txt").display().to_string(),
    ];
    for (i, text) in saved.iter().enumerate() {
        let path = audited.dir.join(format!("{name}-saved-{i}.txt"));
        std::fs::write(&path, text)?;
        flags.extend(["--saved-checkpoint".into(), path.display().to_string()]);
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (holds, said) = python_verdicts(std::slice::from_ref(&file), &flags)?.remove(0);
    Ok((rust, if holds { Ok(said) } else { Err(said) }))
}

/// Asserts both verifiers refuse, each naming `words`.
fn both_refuse(verdicts: (Result<String, String>, Result<String, String>), words: &str) {
    let (rust, python) = verdicts;
    let rust = rust.expect_err("Rust accepted the forgery");
    assert!(rust.contains(words), "Rust: {rust}");
    let python = python.expect_err("Python accepted the forgery");
    assert!(python.contains(words), "Python: {python}");
}

/// The checkpoint `proof` carries, as an auditor keeps it, and its size.
pub(crate) fn kept(proof: &Value) -> anyhow::Result<(String, u64)> {
    let kept = proof["log"]["checkpoint"]
        .as_str()
        .expect("a checkpoint")
        .to_owned();
    let size = kept.lines().nth(1).expect("a size").parse()?;
    Ok((kept, size))
}

/// Ends the assignment in force in `proof`'s answer, through the API.
async fn end_in_force(audited: &Audited, proof: &Value) -> anyhow::Result<()> {
    let assignment = proof["answer"]["assignment"]["assignment_id"]
        .as_str()
        .expect("an assignment in force");
    let ended = audited
        .api
        .post(&format!("/v1/assignments/{assignment}/end"), json!({}))
        .await;
    anyhow::ensure!(ended.status.is_success(), "{:?}", ended.body);
    Ok(())
}

#[tokio::test]
async fn a_digest_resigned_over_an_older_head_is_refused_by_both_verifiers() -> anyhow::Result<()> {
    let audited = Audited::new().await?;
    let b = audited.business;
    audited.seal_and_cosign().await?;
    let first = audited.proof(b, "TX", chrono::Utc::now(), &[]).await?;
    // B's TX assignment ends: the truth is now "no RA".
    end_in_force(&audited, &first).await?;
    audited.seal_and_cosign().await?;
    let at = chrono::Utc::now();
    let truth = audited.proof(b, "TX", at, &[]).await?;
    assert_eq!(truth["answer"], Value::Null, "{truth}");
    verdicts(&audited, "truth.json", &truth, &[])?
        .0
        .map_err(anyhow::Error::msg)?;

    // The key holder signs digest 2 again over the older head of B's stream (the first
    // proof's), keeping everything else: number, time, the other leaves.
    let pool = audited.api.ledger.pool();
    let client = pool.get().await?;
    let seq = truth["digest"]["seq"].as_i64().expect("seq");
    let stream = first["streams"][0]["stream"].as_str().expect("a stream");
    let old_head = first["streams"][0]["events"]
        .as_array()
        .and_then(|events| events.last())
        .expect("a head")
        .clone();
    let mut leaves = Vec::new();
    for row in client
        .query(
            "SELECT stream, version, hash FROM digest_leaves ORDER BY stream COLLATE \"C\"",
            &[],
        )
        .await?
    {
        let name: String = row.get(0);
        let mut head = Head {
            version: row.get::<_, i64>(1) as u64,
            hash: row.get::<_, Vec<u8>>(2).try_into().expect("32 bytes"),
            stream: name,
        };
        if head.stream == stream {
            head.version = old_head["stream_version"].as_u64().expect("a version");
            head.hash = unhex(old_head["hash"].as_str().expect("hex"))
                .expect("hex")
                .try_into()
                .expect("32 bytes");
        }
        leaves.push(head);
    }
    let hashes: Vec<merkle::Hash> = leaves.iter().map(Head::leaf_hash).collect();
    let digest = &truth["digest"];
    let versions: u64 = leaves.iter().map(|leaf| leaf.version).sum();
    let signed = audited.key.sign(Statement {
        seq: Some(seq),
        root: merkle::root(&hashes),
        time_micros: digest["time_micros"].as_i64().expect("a time"),
        stream_count: leaves.len() as u64,
        event_count: versions,
        previous: unhex(digest["previous"].as_str().expect("hex"))
            .expect("hex")
            .try_into()
            .expect("32 bytes"),
    });
    let mut forged = first.clone();
    forged["digest"] =
        serde_json::to_value(DigestDocument::new(seq, &signed, audited.key.public_pem()))?;
    forged["question"]["known_at_micros"] = digest["time_micros"].clone();
    let (log, index) = read_indexed(&client, seq).await?;
    assert_eq!(read_log(&client, seq).await?.root(), log.root());
    let size = log.size();
    let count = forged["streams"].as_array().map_or(0, Vec::len);
    for i in 0..count {
        let name = forged["streams"][i]["stream"]
            .as_str()
            .expect("a name")
            .to_owned();
        let at = leaves
            .iter()
            .position(|leaf| leaf.stream == name)
            .expect("a leaf");
        let path = merkle::inclusion_path(&hashes, at).expect("a path");
        forged["streams"][i]["index"] = json!(at);
        forged["streams"][i]["path"] = json!(path.iter().map(|hash| hex(hash)).collect::<Vec<_>>());
        let head = first["log"]["heads"][i]["index"]
            .as_u64()
            .expect("an index");
        let path = log.inclusion_proof(head, size).expect("a path");
        forged["log"]["heads"][i]["path"] =
            json!(path.iter().map(|hash| hex(hash)).collect::<Vec<_>>());
        forged["log"]["index"]["streams"][i] = serde_json::to_value(index.prove(&name))?;
    }
    forged["log"]["checkpoint"] = truth["log"]["checkpoint"].clone();
    forged["log"]["index"]["leaf"] = truth["log"]["index"]["leaf"].clone();
    forged["log"]["index"]["path"] = truth["log"]["index"]["path"].clone();
    // Without the index, the old check (the checkpoint's size against the event count)
    // could not catch it; now the index names the newer head.
    both_refuse(
        verdicts(&audited, "omitted.json", &forged, &[])?,
        "not of the stream's newest head",
    );
    // Cutting the index part out is refused as such.
    let mut cut = forged.clone();
    cut["log"].as_object_mut().expect("log").remove("index");
    both_refuse(
        verdicts(&audited, "cut.json", &cut, &[])?,
        "carries no index of its checkpoint",
    );
    Ok(())
}

#[tokio::test]
async fn events_backdated_before_a_kept_checkpoint_are_refused_by_both_verifiers()
-> anyhow::Result<()> {
    let audited = Audited::new().await?;
    let b = audited.business;
    audited.seal_and_cosign().await?;
    let first = audited.proof(b, "TX", chrono::Utc::now(), &[]).await?;
    let (kept, kept_size) = kept(&first)?;
    let sealed_at = first["digest"]["time_micros"].as_i64().expect("a time");
    let last_recorded = first["streams"][0]["events"]
        .as_array()
        .and_then(|events| events.last())
        .and_then(|event| event["recorded_at_micros"].as_i64())
        .expect("a recorded_at");
    assert!(last_recorded < sealed_at);
    let backdated = chrono::DateTime::from_timestamp_micros((last_recorded + sealed_at) / 2)
        .expect("an instant");

    // A superuser makes the database's clock read `backdated` while the service ends B's
    // assignment, then puts the clock back.
    let client = audited.api.ledger.pool().get().await?;
    let honest: String = client
        .query_one("SELECT pg_get_functiondef('recording_clock'::regproc)", &[])
        .await?
        .get(0);
    client
        .batch_execute(&format!(
            "CREATE OR REPLACE FUNCTION recording_clock() RETURNS timestamptz LANGUAGE sql \
             AS $$ SELECT '{}'::timestamptz $$",
            backdated.to_rfc3339()
        ))
        .await?;
    let ended = end_in_force(&audited, &first).await;
    client.batch_execute(&honest).await?;
    ended?;
    audited.seal_and_cosign().await?;

    // The honest ledger's proof of "RA of B at the kept digest's time, as known then": the
    // backdated end folds in, and the answer turns to "no RA".
    let instant = chrono::DateTime::from_timestamp_micros(sealed_at).expect("an instant");
    let (_, proof) = for_answer_with(
        audited.api.ledger.pool(),
        &audited.cache,
        b,
        Jurisdiction::parse("jurisdiction", "TX").map_err(anyhow::Error::msg)?,
        instant,
        Some(instant),
        &[kept_size],
    )
    .await?;
    let proof = serde_json::to_value(&proof)?;
    assert_eq!(proof["answer"], Value::Null, "{proof}");
    // Without the auditor's own checkpoint nothing shows it (docs/auditors.md says so)...
    let (rust, python) = verdicts(&audited, "unkept.json", &proof, &[])?;
    rust.map_err(anyhow::Error::msg)?;
    python.map_err(anyhow::Error::msg)?;
    // ...with it, the events sealed after it and recorded before its time are named.
    both_refuse(
        verdicts(&audited, "kept.json", &proof, std::slice::from_ref(&kept))?,
        "it was BACKDATED",
    );
    Ok(())
}

/// `ledger-bench digest` at a small size: its figures are printed, the index's share and a
/// complete proven answer among them, which both verifiers accept (the bench fails
/// otherwise). The figures at a million streams are in docs/benchmarks.md.
#[tokio::test]
async fn ledger_bench_digest_prints_the_index_share_and_a_complete_proof_both_verifiers_accept()
-> anyhow::Result<()> {
    let verifier = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("verify_digest.py");
    let verifier = verifier.display().to_string();
    // (Not `cli::bench`: this command takes no --brokers.)
    let output = tokio::process::Command::new(ra_ledger_tests::cli::bench_binary()?)
        .args(["--database-url", &ra_ledger_tests::stack::stack().admin_url])
        .args([
            "digest",
            "--streams",
            "3000",
            "--changed",
            "300",
            "--rounds",
            "2",
        ])
        .args(["--python-verifier", &verifier])
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    println!("{stdout}");
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in [
        "the index per digest (300 of 3000 entries moved",
        "a complete proven answer at 3000+ streams (2 streams proven",
        "offline check in Python (",
    ] {
        assert!(stdout.contains(line), "{line:?} is not in:\n{stdout}");
    }
    Ok(())
}
