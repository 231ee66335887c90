//! The digest's byte layouts, checked by a second implementation: `tests/verify_digest.py`
//! (Python's standard library only) verifies what the Rust side signs, and names what a
//! tampered document breaks.

use std::path::Path;
use std::process::Command;

use ra_ledger::digest::{DigestKey, Head, Statement, hex, merkle};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn python_verdict(document: &Value) -> anyhow::Result<(bool, String)> {
    let path = std::env::temp_dir().join(format!(
        "ra-ledger-digest-{}.json",
        ra_ledger_tests::random_suffix()
    ));
    std::fs::write(&path, serde_json::to_vec_pretty(document)?)?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("verify_digest.py");
    let output = Command::new("python3").arg(&script).arg(&path).output()?;
    std::fs::remove_file(&path)?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok((output.status.success(), said))
}

#[test]
fn the_python_verifier_accepts_what_rust_signs_and_names_each_tampering() -> anyhow::Result<()> {
    let heads: Vec<Head> = (0..1_000u64)
        .map(|i| {
            // Names of several lengths and non-ASCII bytes, so order and length prefixes count.
            let stream = format!(
                "assignment-{:x}-{}",
                i * 7919,
                ["TX", "NY", "PR-é"][i as usize % 3]
            );
            Head {
                hash: Sha256::digest(stream.as_bytes()).into(),
                stream,
                version: 1 + i % 5,
            }
        })
        .collect();
    let key = DigestKey::from_seed(&[42; 32]);
    let signed = key.sign(Statement::over(
        heads.clone(),
        1_764_460_800_123_456,
        [9; 32],
    ));
    let mut sorted = heads.clone();
    sorted.sort_by(|a, b| a.stream.as_bytes().cmp(b.stream.as_bytes()));
    let leaves: Vec<merkle::Hash> = sorted.iter().map(Head::leaf_hash).collect();
    let index = 617;
    let path = merkle::inclusion_path(&leaves, index).expect("in range");
    let statement = &signed.statement;
    let document = json!({
        "public_key_pem": key.public_pem(),
        "digest": {
            "root": hex(&statement.root),
            "time_micros": statement.time_micros,
            "stream_count": statement.stream_count,
            "event_count": statement.event_count,
            "previous": hex(&statement.previous),
            "signature": hex(&signed.signature),
        },
        "leaves": heads.iter().map(|h| json!({
            "stream": h.stream, "version": h.version, "hash": hex(&h.hash),
        })).collect::<Vec<_>>(),
        "inclusion": {
            "stream": sorted[index].stream,
            "version": sorted[index].version,
            "hash": hex(&sorted[index].hash),
            "index": index,
            "path": path.iter().map(|h| hex(h)).collect::<Vec<_>>(),
        },
    });
    let (ok, said) = python_verdict(&document)?;
    assert!(ok, "{said}");

    let tampered = |change: &dyn Fn(&mut Value)| {
        let mut copy = document.clone();
        change(&mut copy);
        python_verdict(&copy)
    };
    for (change, expected) in [
        (
            Box::new(|d: &mut Value| d["digest"]["event_count"] = json!(1))
                as Box<dyn Fn(&mut Value)>,
            "signature does not verify",
        ),
        (
            Box::new(|d: &mut Value| {
                d["public_key_pem"] = json!(DigestKey::from_seed(&[7; 32]).public_pem())
            }),
            "signature does not verify",
        ),
        (
            Box::new(|d: &mut Value| d["leaves"][3]["hash"] = json!(hex(&[0; 32]))),
            "do not reproduce the digest's root",
        ),
        (
            Box::new(|d: &mut Value| {
                let leaves = d["leaves"].as_array_mut().expect("leaves");
                leaves.pop();
            }),
            "999 leaves",
        ),
        (
            Box::new(|d: &mut Value| d["inclusion"]["version"] = json!(99)),
            "inclusion path of stream",
        ),
        (
            Box::new(|d: &mut Value| d["inclusion"]["index"] = json!(618)),
            "inclusion path of stream",
        ),
    ] {
        let (ok, said) = tampered(&*change)?;
        assert!(
            !ok && said.contains(expected),
            "expected {expected:?}, got: {said}"
        );
    }
    Ok(())
}

#[test]
fn a_key_made_by_openssl_signs_and_publishes_the_public_key_openssl_derives() -> anyhow::Result<()>
{
    let dir = std::env::temp_dir().join(format!(
        "ra-ledger-key-{}",
        ra_ledger_tests::random_suffix()
    ));
    std::fs::create_dir_all(&dir)?;
    let key_path = dir.join("digest.pem");
    let made = Command::new("openssl")
        .args(["genpkey", "-algorithm", "ed25519", "-out"])
        .arg(&key_path)
        .status()?;
    assert!(made.success());
    let key = DigestKey::from_pem_file(&key_path)?;
    let public = Command::new("openssl")
        .args(["pkey", "-pubout", "-in"])
        .arg(&key_path)
        .output()?;
    assert_eq!(String::from_utf8(public.stdout)?, key.public_pem());
    let signed = key.sign(Statement::over(Vec::new(), 0, [0; 32]));
    assert_eq!(signed.statement.root, merkle::empty_root());
    assert!(signed.verify(&key.public()));
    // Not a key: the error names the file and nothing of its content.
    std::fs::write(&key_path, "secret-looking-garbage")?;
    let error = DigestKey::from_pem_file(&key_path)
        .expect_err("garbage")
        .to_string();
    assert!(
        error.contains("digest.pem") && !error.contains("garbage"),
        "{error}"
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
