//! The digest's byte layouts, checked by a second implementation: `tests/verify_digest.py`
//! (Python's standard library only) verifies what the Rust side signs, and names what a
//! tampered document breaks.

use std::path::Path;
use std::process::Command;

use ra_ledger::digest::build::{Built, build};
use ra_ledger::digest::{DigestKey, Head, Statement, hex, merkle};
use ra_ledger_tests::TestDatabase;
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

/// Every stream's head read from `events` from scratch: what a digest must seal.
async fn full_heads(client: &tokio_postgres::Client) -> anyhow::Result<Vec<Head>> {
    Ok(client
        .query(
            "SELECT DISTINCT ON (stream) stream, stream_version, hash FROM events \
             ORDER BY stream, stream_version DESC",
            &[],
        )
        .await?
        .iter()
        .map(|row| Head {
            stream: row.get(0),
            version: row.get::<_, i64>(1) as u64,
            hash: row.get::<_, Vec<u8>>(2).try_into().expect("32 bytes"),
        })
        .collect())
}

async fn assign(api: &ra_ledger_tests::api::TestApi, count: usize) {
    for _ in 0..count {
        let reply = api
            .post(
                "/v1/assignments",
                json!({"business_id": uuid::Uuid::now_v7(), "jurisdiction": "TX"}),
            )
            .await;
        assert_eq!(
            reply.status,
            axum::http::StatusCode::CREATED,
            "{:?}",
            reply.body
        );
    }
}

/// A fresh database and its API, with a primary contact in Texas to assign.
async fn with_a_contact() -> anyhow::Result<(TestDatabase, ra_ledger_tests::api::TestApi)> {
    let database = TestDatabase::new().await?;
    let api = ra_ledger_tests::api::TestApi::new(&database)?;
    let created = api
        .post(
            "/v1/contacts",
            ra_ledger_tests::api::contact_body("TX", "Office"),
        )
        .await;
    assert_eq!(created.status, axum::http::StatusCode::CREATED);
    Ok((database, api))
}

/// The streams marked for the next digest.
async fn marks(client: &tokio_postgres::Client) -> anyhow::Result<Vec<String>> {
    Ok(client
        .query("SELECT stream FROM digest_dirty ORDER BY stream", &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect())
}

fn sealed(built: Built) -> (i64, usize, ra_ledger::digest::SignedDigest) {
    match built {
        Built::Sealed {
            seq,
            changed,
            digest,
        } => (seq, changed, digest),
        other => panic!("expected a new digest, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digests_reread_only_changed_streams_and_match_a_full_recomputation() -> anyhow::Result<()>
{
    let (database, api) = with_a_contact().await?;
    assign(&api, 20).await;
    let client = database.connect().await?;
    let key = DigestKey::from_seed(&[5; 32]);
    let pool = api.ledger.pool();

    let (seq, changed, first) = sealed(build(pool, &key, 1_000).await?);
    let heads = full_heads(&client).await?;
    assert_eq!((seq, changed), (1, heads.len()));
    assert_eq!(
        first.statement,
        Statement::over(heads.clone(), 1_000, [0; 32])
    );
    assert!(first.verify(&key.public()));
    // Nothing changed: no digest.
    assert_eq!(build(pool, &key, 2_000).await?, Built::Unchanged);

    assign(&api, 3).await;
    let (seq, changed, second) = sealed(build(pool, &key, 3_000).await?);
    let heads = full_heads(&client).await?;
    assert_eq!(seq, 2);
    assert!(
        changed < heads.len(),
        "re-read {changed} of {} streams",
        heads.len()
    );
    assert_eq!(
        second.statement,
        Statement::over(heads.clone(), 3_000, first.hash())
    );

    // Published through the outbox, in the digest's transaction; a document the Python
    // verifier accepts with the leaves read from scratch.
    let published = client
        .query(
            "SELECT payload FROM outbox WHERE aggregate_type = 'digest' ORDER BY id",
            &[],
        )
        .await?;
    assert_eq!(published.len(), 2);
    let document: Value = serde_json::from_slice(&published[1].get::<_, Vec<u8>>(0))?;
    assert_eq!(document["seq"], json!(2));
    // What `GET /v1/digests/latest` serves is what was published.
    let served = ra_ledger::digest::build::latest(&pool.get().await?).await?;
    assert_eq!(served.as_ref(), Some(&document));
    let (ok, said) = python_verdict(&json!({
        "public_key_pem": document["public_key_pem"],
        "digest": document,
        "leaves": heads.iter().map(|h| json!({
            "stream": h.stream, "version": h.version, "hash": hex(&h.hash),
        })).collect::<Vec<_>>(),
    }))?;
    assert!(ok, "{said}");

    // Append-only, like the events.
    for statement in ["UPDATE digests SET changed = 0", "DELETE FROM digests"] {
        let error = client.batch_execute(statement).await.expect_err(statement);
        assert_eq!(error.code().map(|c| c.code()), Some("RAL01"), "{statement}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digests_built_while_writers_append_miss_nothing_and_chain() -> anyhow::Result<()> {
    let (database, api) = with_a_contact().await?;
    let key = DigestKey::from_seed(&[6; 32]);
    let writers: Vec<_> = (0..2)
        .map(|_| {
            let api = api.clone();
            tokio::spawn(async move { assign(&api, 60).await })
        })
        .collect();
    let mut built = 0;
    while !writers.iter().all(|writer| writer.is_finished()) {
        if let Built::Sealed { .. } = build(api.ledger.pool(), &key, built).await? {
            built += 1;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for writer in writers {
        writer.await?;
    }
    let (last_seq, _, last) = sealed(build(api.ledger.pool(), &key, 1_000_000).await?);
    let client = database.connect().await?;
    let heads = full_heads(&client).await?;
    assert_eq!(heads.len(), 121);
    assert_eq!(last.statement.root, Statement::over(heads, 0, [0; 32]).root);
    println!("{built} digests while writing, then digest {last_seq}");
    assert!(built >= 2, "only {built} digests were built while writing");
    // Each digest chains to the one before.
    let broken: i64 = client
        .query_one(
            "SELECT count(*) FROM digests d JOIN digests p ON p.seq = d.seq - 1 \
             WHERE d.previous <> p.hash",
            &[],
        )
        .await?
        .get(0);
    assert_eq!(broken, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_proof_verifies_offline_and_names_what_a_tampering_breaks() -> anyhow::Result<()> {
    let (database, api) = with_a_contact().await?;
    let business = uuid::Uuid::now_v7();
    let assigned = api
        .post(
            "/v1/assignments",
            json!({"business_id": business, "jurisdiction": "TX"}),
        )
        .await;
    assert_eq!(
        assigned.status,
        axum::http::StatusCode::CREATED,
        "{:?}",
        assigned.body
    );
    assign(&api, 10).await;
    let client = database.connect().await?;
    let stream = format!("assignment-{business}-TX");
    let first: uuid::Uuid = client
        .query_one(
            "SELECT event_id FROM events WHERE stream = $1 ORDER BY stream_version LIMIT 1",
            &[&stream],
        )
        .await?
        .get(0);
    // Not sealed before the first digest.
    let early = api.get(&format!("/v1/events/{first}/proof")).await;
    assert_eq!(
        early.status,
        axum::http::StatusCode::CONFLICT,
        "{:?}",
        early.body
    );
    assert_eq!(early.error_code(), "not_sealed");
    // The stream gets a later event; then a digest seals it.
    let assignment_id = assigned.str("assignment_id");
    let ended = api
        .post(&format!("/v1/assignments/{assignment_id}/end"), json!({}))
        .await;
    assert!(ended.status.is_success(), "{:?}", ended.body);
    let key = DigestKey::from_seed(&[8; 32]);
    sealed(build(api.ledger.pool(), &key, 5_000).await?);

    let proof = api.get(&format!("/v1/events/{first}/proof")).await;
    assert_eq!(proof.status, axum::http::StatusCode::OK, "{:?}", proof.body);
    let document = proof.body;
    assert_eq!(document["events"].as_array().map(Vec::len), Some(2));
    let (ok, said) = python_verdict(&document)?;
    assert!(ok && said.contains("events"), "{said}");
    // The Rust verifier (`ledger proof verify`) agrees, and refuses another key.
    let verified =
        ra_ledger::digest::proof::verify(&document, &key.public()).map_err(anyhow::Error::msg)?;
    assert_eq!((verified.events, verified.sealed_version), (2, 2));
    let other = DigestKey::from_seed(&[9; 32]).public();
    assert!(ra_ledger::digest::proof::verify(&document, &other).is_err());

    let tampered = |change: &dyn Fn(&mut Value)| {
        let mut copy = document.clone();
        change(&mut copy);
        python_verdict(&copy)
    };
    for (change, expected) in [
        (
            Box::new(|d: &mut Value| d["events"][0]["actor"] = json!("someone else"))
                as Box<dyn Fn(&mut Value)>,
            "does not hash to its recorded hash",
        ),
        (
            Box::new(|d: &mut Value| {
                let events = d["events"].as_array_mut().expect("events");
                events.pop();
            }),
            "inclusion path of stream",
        ),
        (
            Box::new(|d: &mut Value| {
                let index = d["inclusion"]["index"].as_u64().expect("an index");
                d["inclusion"]["index"] = json!(index ^ 1);
            }),
            "inclusion path of stream",
        ),
        (
            Box::new(|d: &mut Value| d["digest"]["root"] = json!(hex(&[1; 32]))),
            "signature does not verify",
        ),
    ] {
        let (ok, said) = tampered(&*change)?;
        assert!(
            !ok && said.contains(expected),
            "expected {expected:?}, got: {said}"
        );
        // The Rust verifier names the same failure.
        let mut copy = document.clone();
        change(&mut copy);
        let rust =
            ra_ledger::digest::proof::verify(&copy, &key.public()).expect_err("a tampered proof");
        assert!(
            rust.contains(expected),
            "expected {expected:?}, got: {rust}"
        );
    }
    let unknown = api
        .get(&format!("/v1/events/{}/proof", uuid::Uuid::now_v7()))
        .await;
    assert_eq!(unknown.status, axum::http::StatusCode::NOT_FOUND);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_digests_off_marks_are_cleared_and_the_next_digest_rereads_everything()
-> anyhow::Result<()> {
    let (database, api) = with_a_contact().await?;
    let key = DigestKey::from_seed(&[10; 32]);
    sealed(build(api.ledger.pool(), &key, 1).await?);
    // Digests turned off: appends leave marks, which `ledger serve` clears.
    assign(&api, 5).await;
    let client = database.connect().await?;
    assert_eq!(marks(&client).await?.len(), 5);
    let removed = ra_ledger::digest::build::clear_marks(api.ledger.pool()).await?;
    assert_eq!(removed, 5);
    assert_eq!(marks(&client).await?, ["*"]);
    // Cleared again with nothing new: nothing changes.
    assert_eq!(
        ra_ledger::digest::build::clear_marks(api.ledger.pool()).await?,
        0
    );
    // Turned on again: the next digest re-reads every stream and misses none of the five.
    let (_, changed, digest) = sealed(build(api.ledger.pool(), &key, 2).await?);
    let heads = full_heads(&client).await?;
    assert_eq!(changed, heads.len());
    assert_eq!(
        digest.statement.root,
        Statement::over(heads, 0, [0; 32]).root
    );
    assert!(marks(&client).await?.is_empty());
    Ok(())
}
