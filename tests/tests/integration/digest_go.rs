//! Issue 56, item 6: the Go ecosystem's own C2SP code checks what the ledger produces, as a
//! third implementation beside ours. `tests/go-verify` (golang.org/x/mod's sumdb/note and
//! sumdb/tlog, filippo.io/torchwood's cosignature/v1 verifier, pinned in its go.mod and
//! fetched through the Go module proxy) opens the proof's checkpoint with the log's key and
//! both witnesses' keys, checks every head event's inclusion and the consistency from a
//! checkpoint kept earlier; it exits 0 on the honest proof and 1 on each tampered copy.

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use chrono::Utc;
use ra_ledger::tlog::note::{Checkpoint, NoteKey, SignedNote};
use ra_ledger_tests::witness::witnesses;
use serde_json::{Value, json};

use crate::digest_forgeries::Audited;

/// Builds `tests/go-verify` (Go's build cache makes a second build a link); its path.
fn go_verify() -> anyhow::Result<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("go-verify");
    let binary = Path::new(env!("CARGO_TARGET_TMPDIR")).join("go-verify");
    let output = Command::new("go")
        .args(["build", "-mod=readonly", "-o"])
        .arg(&binary)
        .arg(".")
        .current_dir(&source)
        .output()
        .map_err(|error| anyhow::anyhow!("go is not on the PATH ({error}): go-verify needs it"))?;
    anyhow::ensure!(
        output.status.success(),
        "go build in {}: {}",
        source.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(binary)
}

/// Flips the first hex digit of a hash.
fn flip(hash: &Value) -> Value {
    let text = hash.as_str().expect("a hex hash");
    let first = if text.starts_with('0') { "1" } else { "0" };
    json!(format!("{first}{}", &text[1..]))
}

#[tokio::test]
async fn the_go_ecosystem_verifies_our_checkpoints_cosignatures_and_proofs() -> anyhow::Result<()> {
    let binary = go_verify()?;
    let audited = Audited::new().await?;
    audited.seal_and_cosign().await?;
    let kept = audited.api.get("/v1/checkpoints/latest").await.text;
    let kept_size = Checkpoint::parse(&SignedNote::parse(&kept)?.body)?.size;
    audited.api.assign(uuid::Uuid::now_v7()).await;
    audited.seal_and_cosign().await?;
    let proof = audited
        .proof(audited.business, "TX", Utc::now(), &[kept_size])
        .await?;
    let kept_file = audited.dir.join("kept.txt");
    std::fs::write(&kept_file, &kept)?;
    let [a, b] = witnesses();
    let log_vkey = NoteKey::log(&audited.origin, audited.key.public()).vkey();
    let run = |document: &Value, witness_keys: &[String]| -> anyhow::Result<(bool, String)> {
        let file = audited.file("go-proof.json", document)?;
        let mut command = Command::new(&binary);
        command.args(["-log-vkey", &log_vkey]);
        for vkey in witness_keys {
            command.args(["-witness", vkey]);
        }
        let output = command.arg("-saved").arg(&kept_file).arg(&file).output()?;
        Ok((
            output.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        ))
    };
    let both = [a.key.vkey(), b.key.vkey()];
    let (holds, said) = run(&proof, &both)?;
    assert!(holds, "{said}");
    assert_eq!(said.matches("ok: cosigned by ").count(), 2, "{said}");
    assert!(
        said.contains(&format!(
            "ok: the log extends the saved checkpoint of size {kept_size}"
        )),
        "{said}"
    );
    assert_eq!(said.matches("ok: the head of ").count(), 2, "{said}");

    let checkpoint = proof["log"]["checkpoint"].as_str().unwrap_or_default();
    let mut note = SignedNote::parse(checkpoint)?;
    let last = note.signatures.len() - 1;
    note.signatures[last].signature[20] ^= 1;
    let bad_cosignature = note.text();
    let root = Checkpoint::parse(&SignedNote::parse(checkpoint)?.body)?;
    let base64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let other_root = checkpoint.replacen(&base64(&root.root), &base64(&[7; 32]), 1);
    let stranger = NoteKey {
        name: "w.example/stranger".into(),
        ..a.key.clone()
    };
    let stranger = NoteKey {
        public: ra_ledger::digest::DigestKey::from_seed(&[3; 32]).public(),
        ..stranger
    };
    let mut tampered: Vec<(&str, Value, Vec<String>, &str)> = Vec::new();
    let mut edit = |what, change: &dyn Fn(&mut Value), keys: &[String], words| {
        let mut copy = proof.clone();
        change(&mut copy);
        tampered.push((what, copy, keys.to_vec(), words));
    };
    edit(
        "a head's inclusion path",
        &|d| d["log"]["heads"][0]["path"][0] = flip(&d["log"]["heads"][0]["path"][0]),
        &both,
        "is not in the log",
    );
    edit(
        "a head event's hash",
        &|d| {
            let events = d["streams"][1]["events"].as_array_mut().expect("events");
            let last = events.len() - 1;
            events[last]["hash"] = flip(&events[last]["hash"]);
        },
        &both,
        "is not in the log",
    );
    edit(
        "a witness's cosignature",
        &|d| d["log"]["checkpoint"] = json!(bad_cosignature),
        &both,
        "log.checkpoint",
    );
    edit(
        "the checkpoint's root",
        &|d| d["log"]["checkpoint"] = json!(other_root),
        &both,
        "log.checkpoint",
    );
    edit(
        "the consistency proof",
        &|d| d["log"]["consistency"][0]["proof"][0] = flip(&d["log"]["consistency"][0]["proof"][0]),
        &both,
        "NOT CONSISTENT",
    );
    edit(
        "a witness that never cosigned",
        &|_| {},
        &[a.key.vkey(), stranger.vkey()],
        "no valid signature by w.example/stranger",
    );
    for (what, document, keys, words) in tampered {
        let (holds, said) = run(&document, &keys)?;
        assert!(!holds, "go-verify accepted {what}: {said}");
        assert!(
            said.contains("FAIL: ") && said.contains(words),
            "{what}: {said}"
        );
    }
    Ok(())
}
