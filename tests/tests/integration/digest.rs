//! The digest's byte layouts, checked by a second implementation: `tests/verify_digest.py`
//! (Python's standard library only) verifies what the Rust side signs, and names what a
//! tampered document breaks.

use std::path::Path;
use std::process::Command;

use ra_ledger::digest::build::{Built, build};
use ra_ledger::digest::{DigestDocument, DigestKey, Head, Statement, merkle};
use ra_ledger::hex::hex;
use ra_ledger_tests::TestDatabase;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// `tests/verify_digest.py`'s verdict on each document, in one run: (holds, what it said).
/// With `public_key_pem`, the verifier trusts that key rather than the document's own.
fn python_verdicts(
    documents: &[Value],
    public_key_pem: Option<&str>,
) -> anyhow::Result<Vec<(bool, String)>> {
    let dir = std::env::temp_dir().join(format!(
        "ra-ledger-digest-{}",
        ra_ledger_tests::random_suffix()
    ));
    std::fs::create_dir_all(&dir)?;
    let mut command = Command::new("python3");
    command.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("verify_digest.py"));
    let mut paths = Vec::with_capacity(documents.len());
    for (i, document) in documents.iter().enumerate() {
        let path = dir.join(format!("{i}.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(document)?)?;
        command.arg(&path);
        paths.push(path);
    }
    if let Some(pem) = public_key_pem {
        let key = dir.join("public.pem");
        std::fs::write(&key, pem)?;
        command.arg("--public-key").arg(&key);
    }
    let output = command.output()?;
    std::fs::remove_dir_all(&dir)?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let verdicts: Vec<(bool, String)> = if documents.len() == 1 {
        let said = stdout.lines().next().unwrap_or_default().to_owned();
        vec![(output.status.success(), said)]
    } else {
        paths
            .iter()
            .map(|path| {
                let prefix = format!("{}: ", path.display());
                let said = stdout
                    .lines()
                    .find_map(|line| line.strip_prefix(&prefix))
                    .unwrap_or("(no verdict)")
                    .to_owned();
                (said.starts_with("ok:"), said)
            })
            .collect()
    };
    anyhow::ensure!(
        verdicts
            .iter()
            .all(|(_, said)| said != "(no verdict)" && !said.is_empty()),
        "the Python verifier gave no verdict for every file: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(verdicts)
}

/// `ledger proof verify` on a proof as JSON: read, then checked with `key`; a refusal in
/// words.
fn verify_proof(
    document: &Value,
    key: &ra_ledger::digest::PublicKey,
) -> Result<ra_ledger::digest::verify::VerifiedProof, String> {
    use ra_ledger::digest::verify::{ClaimedProof, verify};
    ClaimedProof::from_json(document)
        .and_then(|proof| verify(&proof, key))
        .map_err(|refused| refused.to_string())
}

fn python_verdict(document: &Value) -> anyhow::Result<(bool, String)> {
    Ok(python_verdicts(std::slice::from_ref(document), None)?.remove(0))
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
    let statement = Statement::over(heads.clone(), 12, 1_764_460_800_123_456, [9; 32]);
    // Both versions: digests signed now, with their number, and those of before, without.
    for statement in [statement.clone(), statement.unnumbered()] {
        python_checks_and_names_tamperings(&key, &heads, key.sign(statement))?;
    }
    Ok(())
}

/// A change to a document.
type Change = dyn Fn(&mut Value);

/// The Python verifier on a document of `signed` over `heads` and on tampered copies.
fn python_checks_and_names_tamperings(
    key: &DigestKey,
    heads: &[Head],
    signed: ra_ledger::digest::SignedDigest,
) -> anyhow::Result<()> {
    let mut sorted = heads.to_vec();
    sorted.sort_by(|a, b| a.stream.as_bytes().cmp(b.stream.as_bytes()));
    let leaves: Vec<merkle::Hash> = sorted.iter().map(Head::leaf_hash).collect();
    let index = 617;
    let path = merkle::inclusion_path(&leaves, index).expect("in range");
    let statement = &signed.statement;
    let mut digest = json!({
        "root": hex(&statement.root),
        "time_micros": statement.time_micros,
        "stream_count": statement.stream_count,
        "event_count": statement.event_count,
        "previous": hex(&statement.previous),
        "signature": hex(&signed.signature),
    });
    let version = statement.version();
    if let Some(seq) = statement.seq {
        digest["format"] = json!("ra-ledger digest v2");
        digest["seq"] = json!(seq);
    }
    let document = json!({
        "public_key_pem": key.public_pem(),
        "digest": digest,
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
    assert!(ok, "version {version}: {said}");

    let tampered = |change: &dyn Fn(&mut Value)| {
        let mut copy = document.clone();
        change(&mut copy);
        python_verdict(&copy)
    };
    let mut cases: Vec<(Box<Change>, &str)> = vec![
        (
            Box::new(|d: &mut Value| d["digest"]["event_count"] = json!(1)),
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
        (
            Box::new(|d: &mut Value| d["digest"]["format"] = json!("ra-ledger digest v3")),
            "is not 'ra-ledger digest v2'",
        ),
    ];
    if version == 2 {
        // The number is signed: another one, or the message read as version 1, fails.
        cases.push((
            Box::new(|d: &mut Value| d["digest"]["seq"] = json!(13)),
            "signature does not verify",
        ));
        cases.push((
            Box::new(|d: &mut Value| d["digest"]["format"] = json!("ra-ledger digest v1")),
            "signature does not verify",
        ));
        cases.push((
            Box::new(|d: &mut Value| {
                d["digest"]
                    .as_object_mut()
                    .expect("an object")
                    .remove("seq");
            }),
            "digest.seq is missing",
        ));
    } else {
        // Version 1 does not sign it: a label changes nothing, a claim of version 2 fails.
        cases.push((
            Box::new(|d: &mut Value| {
                d["digest"]["format"] = json!("ra-ledger digest v2");
                d["digest"]["seq"] = json!(12);
            }),
            "signature does not verify",
        ));
    }
    for (change, expected) in cases {
        let (ok, said) = tampered(&*change)?;
        assert!(
            !ok && said.contains(expected),
            "version {version}: expected {expected:?}, got: {said}"
        );
    }
    if version == 1 {
        let (ok, said) = tampered(&|d: &mut Value| d["digest"]["seq"] = json!(13))?;
        assert!(ok, "a version-1 digest's number is a label: {said}");
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
    let signed = key.sign(Statement::over(Vec::new(), 1, 0, [0; 32]));
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
        api.assign(uuid::Uuid::now_v7()).await;
    }
}

/// A fresh database and its API, with a primary contact in Texas to assign.
async fn with_a_contact() -> anyhow::Result<(TestDatabase, ra_ledger_tests::api::TestApi)> {
    let database = TestDatabase::new().await?;
    let api = ra_ledger_tests::api::TestApi::new(&database)?;
    api.contact("TX", "Office").await;
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

    let (seq, changed, first) = sealed(build(pool, &key).await?);
    let heads = full_heads(&client).await?;
    assert_eq!((seq, changed), (1, heads.len()));
    assert_eq!(
        first.statement,
        Statement::over(heads.clone(), 1, first.statement.time_micros, [0; 32])
    );
    assert!(first.verify(&key.public()));
    // Nothing changed: no digest.
    assert_eq!(build(pool, &key).await?, Built::Unchanged);

    assign(&api, 3).await;
    let (seq, changed, second) = sealed(build(pool, &key).await?);
    let heads = full_heads(&client).await?;
    assert_eq!(seq, 2);
    assert!(
        changed < heads.len(),
        "re-read {changed} of {} streams",
        heads.len()
    );
    assert_eq!(
        second.statement,
        Statement::over(heads.clone(), 2, second.statement.time_micros, first.hash())
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
    let served = ra_ledger::digest::sealed::latest(&pool.get().await?).await?;
    // Byte for byte: the outbox row and the document served are written by the same type.
    assert_eq!(
        served
            .map(|served| serde_json::to_vec(&served))
            .transpose()?,
        Some(published[1].get::<_, Vec<u8>>(0))
    );
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

// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builders_cached_tree_seals_the_roots_a_full_read_gives() -> anyhow::Result<()> {
    let (database, api) = with_a_contact().await?;
    let client = database.connect().await?;
    let key = DigestKey::from_seed(&[6; 32]);
    let pool = api.ledger.pool();
    let cache = ra_ledger::digest::log::TreeCache::default();
    // Random business ids: new streams land anywhere in the tree's order, not at its end.
    let assign_anywhere = async |count: usize| -> Vec<String> {
        let mut ids = Vec::new();
        for _ in 0..count {
            ids.push(api.assign(uuid::Uuid::new_v4()).await);
        }
        ids
    };
    let mut previous = [0; 32];
    let mut ids = assign_anywhere(30).await;
    for round in 0..6i64 {
        let built = if round == 3 {
            // Another replica seals one: this builder's cache no longer describes the
            // newest digest and must not be used.
            build(pool, &key).await?
        } else {
            ra_ledger::digest::build::build_cached(pool, &key, &cache).await?
        };
        let (seq, _, digest) = sealed(built);
        if round != 3 {
            assert_eq!(
                cache.seq(),
                Some(seq),
                "round {round}: the cache describes it"
            );
            assert!(cache.tree_of(seq, &digest.statement.root).is_some());
        }
        let heads = full_heads(&client).await?;
        assert_eq!(
            digest.statement,
            Statement::over(heads, seq, digest.statement.time_micros, previous),
            "round {round}"
        );
        previous = digest.hash();
        // Proofs take their paths from the builder's tree when it is the newest digest's
        // (after round 3 it is not, and they read the leaves): the same documents either way.
        let some: Vec<uuid::Uuid> = client
            .query("SELECT event_id FROM events ORDER BY random() LIMIT 5", &[])
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        for id in some {
            let cached = ra_ledger::digest::prove::for_event(pool, id, &cache).await?;
            let read = ra_ledger::digest::prove::for_event(pool, id, &Default::default()).await?;
            assert_eq!(cached, read, "round {round}");
            verify_proof(&serde_json::to_value(&cached)?, &key.public())
                .map_err(|failure| anyhow::anyhow!("round {round}: {failure}"))?;
        }
        // New streams among the old ones, and old ones moving on.
        ids.extend(assign_anywhere(7).await);
        for id in ids.drain(..5) {
            let ended = api
                .post(&format!("/v1/assignments/{id}/end"), json!({}))
                .await;
            assert!(ended.status.is_success(), "{:?}", ended.body);
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digests_built_while_writers_append_miss_nothing_and_chain() -> anyhow::Result<()> {
    let (database, api) = with_a_contact().await?;
    let key = DigestKey::from_seed(&[6; 32]);
    // The writers pause between appends, so that their appends span several builds however
    // fast the machine writes: unpaced, under the whole suite's load, both once finished
    // within a single build.
    let writers: Vec<_> = (0..2)
        .map(|_| {
            let api = api.clone();
            tokio::spawn(async move {
                for _ in 0..60 {
                    api.assign(uuid::Uuid::now_v7()).await;
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            })
        })
        .collect();
    let mut built = 0;
    while !writers.iter().all(|writer| writer.is_finished()) {
        if let Built::Sealed { .. } = build(api.ledger.pool(), &key).await? {
            built += 1;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for writer in writers {
        writer.await?;
    }
    // The last append may have been sealed already by the last build in the loop.
    let last_build = build(api.ledger.pool(), &key).await?;
    assert!(
        matches!(last_build, Built::Sealed { .. } | Built::Unchanged),
        "{last_build:?}"
    );
    let client = database.connect().await?;
    let last = ra_ledger::digest::sealed::latest(&api.ledger.pool().get().await?)
        .await?
        .expect("a digest");
    let heads = full_heads(&client).await?;
    assert_eq!(heads.len(), 121);
    assert_eq!(last.root.0, Statement::over(heads, 1, 0, [0; 32]).root);
    println!("{built} digests while writing, then digest {}", last.seq);
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
    // Each digest sealed every event recorded by its time, at least at that event's version.
    let unsealed: i64 = client
        .query_one(
            "SELECT count(*) FROM digests d \
             JOIN events e ON (extract(epoch FROM e.recorded_at) * 1000000)::bigint <= d.time_micros \
             WHERE NOT EXISTS (SELECT 1 FROM digest_leaf_changes c \
                               WHERE c.stream = e.stream AND c.digest_seq <= d.seq \
                                 AND c.version >= e.stream_version)",
            &[],
        )
        .await?
        .get(0);
    assert_eq!(
        unsealed, 0,
        "events recorded by a digest's time but not in it"
    );
    Ok(())
}

/// `hex` with its byte `at` flipped (one bit of it).
fn flip(hex_text: &Value, at: usize) -> Value {
    let text = hex_text.as_str().expect("a hex string");
    let mut bytes: Vec<u8> = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect();
    let at = at % bytes.len();
    bytes[at] ^= 0x01;
    json!(hex(&bytes))
}

type Tampering = (&'static str, Box<dyn Fn(&mut Value)>, &'static str);

/// Each way of tampering with a proof, with what the verifiers must name.
fn tamperings() -> Vec<Tampering> {
    vec![
        (
            "one byte of the event",
            Box::new(|d: &mut Value| {
                let payload = &mut d["streams"][0]["events"][0]["payload"];
                *payload = flip(payload, 3);
            }),
            "does not hash to its recorded hash",
        ),
        (
            "one field of the event",
            Box::new(|d: &mut Value| d["streams"][0]["events"][0]["actor"] = json!("someone else")),
            "does not hash to its recorded hash",
        ),
        (
            "one node of the Merkle path",
            Box::new(|d: &mut Value| {
                let node = &mut d["streams"][0]["path"][0];
                *node = flip(node, 17);
            }),
            "inclusion path of stream",
        ),
        (
            "the leaf's index",
            Box::new(|d: &mut Value| {
                let index = d["streams"][0]["index"].as_u64().expect("an index");
                d["streams"][0]["index"] = json!(index ^ 1);
            }),
            "inclusion path of stream",
        ),
        (
            "the sealed head left out",
            Box::new(|d: &mut Value| {
                let events = d["streams"][0]["events"].as_array_mut().expect("events");
                if events.len() > 1 {
                    events.pop();
                } else {
                    // A one-event proof: claim another event's place instead.
                    events[0]["stream_version"] = json!(99);
                }
            }),
            "",
        ),
        (
            "the signature",
            Box::new(|d: &mut Value| {
                let signature = &mut d["digest"]["signature"];
                *signature = flip(signature, 40);
            }),
            "signature does not verify",
        ),
        (
            "the signed root",
            Box::new(|d: &mut Value| d["digest"]["root"] = json!(hex(&[1; 32]))),
            "signature does not verify",
        ),
    ]
}

// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proofs_of_100_random_events_verify_offline_and_every_tampering_is_named()
-> anyhow::Result<()> {
    let (database, api) = with_a_contact().await?;
    let client = database.connect().await?;
    // 100 businesses, 20 of them with three events in their stream (assign, end, assign).
    let mut businesses = Vec::new();
    for _ in 0..100 {
        let business = uuid::Uuid::now_v7();
        businesses.push((business, api.assign(business).await));
    }
    let first: uuid::Uuid = client
        .query_one(
            "SELECT event_id FROM events WHERE stream = $1",
            &[&format!("assignment-{}-TX", businesses[0].0)],
        )
        .await?
        .get(0);
    // Not sealed before the first digest.
    let early = api.get(&format!("/v1/events/{first}/proof")).await;
    early.expect_error(axum::http::StatusCode::CONFLICT, "not_sealed");
    for (business, assignment_id) in &businesses[..20] {
        let ended = api
            .post(&format!("/v1/assignments/{assignment_id}/end"), json!({}))
            .await;
        assert!(ended.status.is_success(), "{:?}", ended.body);
        api.assign(*business).await;
    }
    let key = DigestKey::from_seed(&[8; 32]);
    sealed(build(api.ledger.pool(), &key).await?);

    let picked: Vec<uuid::Uuid> = client
        .query(
            "SELECT event_id FROM events ORDER BY random() LIMIT 100",
            &[],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(picked.len(), 100);
    let mut proofs = Vec::with_capacity(picked.len());
    for id in &picked {
        let proof = api.get(&format!("/v1/events/{id}/proof")).await;
        assert_eq!(proof.status, axum::http::StatusCode::OK, "{:?}", proof.body);
        // The Rust verifier (`ledger proof verify`) accepts it with the ledger's key only.
        let verified = verify_proof(&proof.body, &key.public()).map_err(anyhow::Error::msg)?;
        let stream: String = client
            .query_one("SELECT stream FROM events WHERE event_id = $1", &[id])
            .await?
            .get(0);
        assert_eq!(verified.streams.len(), 1);
        assert_eq!(verified.streams[0].stream, stream);
        proofs.push(proof.body);
    }
    let multi = proofs
        .iter()
        .filter(|proof| proof["streams"][0]["events"].as_array().map(Vec::len) > Some(1))
        .count();
    assert!(multi > 0, "some proofs chain several events");
    let public_pem = key.public_pem();
    for (ok, said) in python_verdicts(&proofs, Some(&public_pem))? {
        assert!(ok && said.contains("streams"), "{said}");
    }

    // Every tampering of every proof is refused in Rust; of ten of them in Python too.
    let other = DigestKey::from_seed(&[9; 32]);
    let mut tampered = Vec::new();
    let mut expected = Vec::new();
    for (i, proof) in proofs.iter().enumerate() {
        let wrong_key = verify_proof(proof, &other.public()).expect_err("another key");
        assert!(
            wrong_key.contains("signature does not verify"),
            "{wrong_key}"
        );
        for (what, change, names) in tamperings() {
            let mut copy = proof.clone();
            change(&mut copy);
            let rust = verify_proof(&copy, &key.public()).expect_err("a tampered proof");
            assert!(
                rust.contains(names),
                "{what}: expected {names:?}, got: {rust}"
            );
            if i < 10 {
                tampered.push(copy);
                expected.push((what, names));
            }
        }
    }
    for ((ok, said), (what, names)) in python_verdicts(&tampered, Some(&public_pem))?
        .into_iter()
        .zip(expected)
    {
        assert!(
            !ok && said.contains(names),
            "{what}: expected {names:?}, got: {said}"
        );
    }
    for (ok, said) in python_verdicts(&proofs[..10], Some(&other.public_pem()))? {
        assert!(
            !ok && said.contains("signature does not verify"),
            "wrong key: {said}"
        );
    }
    // Not hex at all (a multi-byte character where a hex pair should be): named, no panic.
    let mut garbled = proofs[0].clone();
    garbled["digest"]["signature"] = json!(format!("a{}a", "é".repeat(63)));
    let failure = verify_proof(&garbled, &key.public()).expect_err("a garbled signature");
    assert!(failure.contains("digest.signature: not hex"), "{failure}");
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
    sealed(build(api.ledger.pool(), &key).await?);
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
    let (_, changed, digest) = sealed(build(api.ledger.pool(), &key).await?);
    let heads = full_heads(&client).await?;
    assert_eq!(changed, heads.len());
    assert_eq!(
        digest.statement.root,
        Statement::over(heads, 1, 0, [0; 32]).root
    );
    assert!(marks(&client).await?.is_empty());
    Ok(())
}

// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proven_audit_answer_verifies_and_its_events_fold_to_it() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = ra_ledger_tests::api::TestApi::new(&database)?;
    let address = ra_ledger_tests::api::contact_body("TX", "x")["address"].clone();
    let first = api
        .post("/v1/contacts", json!({"jurisdiction": "TX", "name": "First Office", "address": address, "effective_at": "2024-01-01T00:00:00Z"}))
        .await;
    let business = uuid::Uuid::now_v7();
    let assigned = api
        .post("/v1/assignments", json!({"business_id": business, "jurisdiction": "TX", "effective_at": "2024-02-01T00:00:00Z"}))
        .await;
    assert_eq!(
        assigned.status,
        axum::http::StatusCode::CREATED,
        "{:?}",
        assigned.body
    );
    let superseded = api
        .post(
            &format!("/v1/contacts/{}/supersede", first.str("contact_id")),
            json!({"name": "Second Office", "address": address, "effective_at": "2025-01-01T00:00:00Z"}),
        )
        .await;
    assert!(superseded.status.is_success(), "{:?}", superseded.body);
    let replaced = api
        .post(
            &format!("/v1/assignments/{}/replace", assigned.str("assignment_id")),
            json!({"effective_at": "2025-03-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(
        replaced.status,
        axum::http::StatusCode::CREATED,
        "{:?}",
        replaced.body
    );
    let base = format!("/v1/businesses/{business}/jurisdictions/TX/registered-agent");
    let early = api.get(&format!("{base}?proof=true")).await;
    early.expect_error(axum::http::StatusCode::CONFLICT, "not_sealed");

    let key = DigestKey::from_seed(&[11; 32]);
    let (_, _, digest) = sealed(build(api.ledger.pool(), &key).await?);
    let sealed_at = digest.statement.time_micros;
    let client = database.connect().await?;
    // Just before the supersede was recorded: the first contact, still primary.
    let before_supersede: chrono::DateTime<chrono::Utc> = client
        .query_one(
            "SELECT recorded_at - interval '1 microsecond' FROM events \
             WHERE event_type = 'ContactSuperseded'",
            &[],
        )
        .await?
        .get(0);
    let before_supersede = before_supersede
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        .replace('+', "%2B");
    let mut proofs = Vec::new();
    for (question, contact, status) in [
        ("at=2024-06-01T00:00:00Z", "First Office", "primary"),
        ("at=2025-02-01T00:00:00Z", "First Office", "on_file"),
        ("at=2026-01-01T00:00:00Z", "Second Office", "primary"),
        (
            &format!("at=2025-02-01T00:00:00Z&known_at={before_supersede}") as &str,
            "First Office",
            "primary",
        ),
    ] {
        let plain = api.get(&format!("{base}?{question}")).await;
        assert_eq!(
            plain.status,
            axum::http::StatusCode::OK,
            "{question}: {:?}",
            plain.body
        );
        assert_eq!(plain.body["contact"]["name"], json!(contact), "{question}");
        assert_eq!(plain.body["contact_status"], json!(status), "{question}");
        let proven = api.get(&format!("{base}?{question}&proof=true")).await;
        assert_eq!(
            proven.status,
            axum::http::StatusCode::OK,
            "{question}: {:?}",
            proven.body
        );
        let mut answer = proven.body.clone();
        let proof = answer
            .as_object_mut()
            .and_then(|fields| fields.remove("proof"))
            .expect("a proof");
        // The same answer with or without its proof, and the proof holds that answer.
        assert_eq!(answer, plain.body, "{question}");
        assert_eq!(proof["answer"], answer, "{question}");
        // Checked offline: the chains, the paths, the signature, and the fold of the
        // proven events (recorded by known_at) is the answer.
        let verified = verify_proof(&proof, &key.public())
            .map_err(|failure| anyhow::anyhow!("{question}: {failure}"))?;
        assert_eq!(verified.streams.len(), 2, "{question}");
        assert!(verified.streams.iter().all(|s| s.first_version == 1));
        assert!(verified.answer.is_some());
        proofs.push(proof);
    }
    for (ok, said) in python_verdicts(&proofs, Some(&key.public_pem()))? {
        assert!(ok, "{said}");
    }
    // The fold catches an answer the events do not give, and a proof missing a stream.
    let proof = &proofs[0];
    for (what, change, names) in [
        (
            "another contact name",
            Box::new(|d: &mut Value| d["answer"]["contact"]["name"] = json!("Elsewhere"))
                as Box<dyn Fn(&mut Value)>,
            "fold to another answer",
        ),
        (
            "another business",
            Box::new(|d: &mut Value| d["question"]["business_id"] = json!(uuid::Uuid::now_v7())),
            "does not prove stream",
        ),
        (
            "the contact's stream left out",
            Box::new(|d: &mut Value| {
                // With its head in the log and its index entry: all of it.
                for part in ["/streams", "/log/heads", "/log/index/streams"] {
                    if let Some(list) = d.pointer_mut(part).and_then(Value::as_array_mut) {
                        list.pop();
                    }
                }
            }),
            "does not prove stream contact-",
        ),
        (
            "a partial stream",
            Box::new(|d: &mut Value| {
                let events = d["streams"][0]["events"].as_array_mut().expect("events");
                events.remove(0);
                // And its log position, which the index part lists per event.
                if let Some(positions) = d
                    .pointer_mut("/log/heads/0/positions")
                    .and_then(Value::as_array_mut)
                {
                    positions.remove(0);
                }
            }),
            "an answer needs whole streams",
        ),
        (
            "a later instant",
            Box::new(|d: &mut Value| d["question"]["at_micros"] = json!(1_767_225_600_000_000i64)),
            // Then the replacing assignment is in force: its contact's stream is missing.
            "which the question and its answer do not name",
        ),
        (
            "known at a later instant than the digest's",
            Box::new(move |d: &mut Value| d["question"]["known_at_micros"] = json!(sealed_at + 1)),
            "the answer is not proven for known_at",
        ),
    ] {
        let mut copy = proof.clone();
        change(&mut copy);
        let failure = verify_proof(&copy, &key.public()).expect_err("a tampered answer");
        assert!(
            failure.contains(names),
            "{what}: expected {names:?}, got {failure}"
        );
    }

    // The question is bound to the digest's time: a proof whose known_at is later says the
    // answer is not proven then, in Rust and in Python, whatever the events fold to.
    let mut later = proofs[0].clone();
    later["question"]["known_at_micros"] = json!(sealed_at + 1);
    let (ok, said) = python_verdicts(&[later], Some(&key.public_pem()))?.remove(0);
    assert!(!ok && said.contains("not proven for known_at"), "{said}");

    // A change recorded after the digest: the digest cannot prove an answer as known at
    // any instant after its time (409); unasked, known_at is the digest's time, and the
    // answer is the one the ledger knew then, which the digest proves.
    let after_digest = chrono::Utc::now()
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        .replace('+', "%2B");
    let ended = api
        .post(
            &format!("/v1/assignments/{}/end", replaced.str("assignment_id")),
            json!({}),
        )
        .await;
    assert!(ended.status.is_success(), "{:?}", ended.body);
    let later = api
        .get(&format!(
            "{base}?at=2025-06-01T00:00:00Z&known_at={after_digest}&proof=true"
        ))
        .await;
    later.expect_error(axum::http::StatusCode::CONFLICT, "not_sealed");
    let sealed = api
        .get(&format!("{base}?at=2025-06-01T00:00:00Z&proof=true"))
        .await;
    assert_eq!(
        sealed.status,
        axum::http::StatusCode::OK,
        "{:?}",
        sealed.body
    );
    assert_eq!(
        sealed.body["proof"]["question"]["known_at_micros"],
        json!(sealed_at)
    );
    assert!(
        sealed.body["assignment"]["ended_at"].is_null(),
        "{:?}",
        sealed.body
    );
    verify_proof(&sealed.body["proof"], &key.public()).map_err(anyhow::Error::msg)?;
    // No RA: 404 without proof; with it, 200 and the proof alone (answer null), which
    // verifies as saved (issue 56). Bad values: 400.
    let plain = api.get(&format!("{base}?at=2020-01-01T00:00:00Z")).await;
    assert_eq!(
        plain.status,
        axum::http::StatusCode::NOT_FOUND,
        "{:?}",
        plain.body
    );
    let none = api
        .get(&format!("{base}?at=2020-01-01T00:00:00Z&proof=true"))
        .await;
    assert_eq!(none.status, axum::http::StatusCode::OK, "{:?}", none.body);
    assert_eq!(none.body["proof"]["answer"], Value::Null);
    assert_eq!(none.body.as_object().map(|fields| fields.len()), Some(1));
    let said = verify_proof(&none.body, &key.public())
        .map_err(anyhow::Error::msg)?
        .answer
        .unwrap_or_default();
    assert!(said.contains("nobody"), "{said}");
    let (holds, said) = python_verdict(&none.body)?;
    assert!(holds && said.contains("no registered agent"), "{said}");
    let bad = api.get(&format!("{base}?proof=maybe")).await;
    assert_eq!(
        bad.status,
        axum::http::StatusCode::BAD_REQUEST,
        "{:?}",
        bad.body
    );
    Ok(())
}

/// At-least-once delivery repeats a digest message byte for byte (at a later offset): the
/// copies are one digest. Another document with the same number is a fork.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_delivered_twice_is_no_fork_and_two_documents_with_one_number_are()
-> anyhow::Result<()> {
    use ra_ledger::digest::published;
    let (database, api) = with_a_contact().await?;
    assign(&api, 3).await;
    let key = DigestKey::from_seed(&[31; 32]);
    let (seq, _, digest) = sealed(build(api.ledger.pool(), &key).await?);
    let document = serde_json::to_vec(&DigestDocument::new(seq, &digest, key.public_pem()))?;
    let copy =
        |offset: u32| published::parse(&document, &format!("outbox.event.digest/1@{offset}"));
    let client = database.connect().await?;
    let report = published::check(&client, vec![copy(7)?, copy(8)?], &key.public()).await?;
    assert!(report.holds(), "{report:?}");
    assert_eq!((report.checked, report.copies), (1, 1), "{report:?}");

    // Another statement under the same number.
    let forged = serde_json::to_vec(&DigestDocument::new(
        seq,
        &key.sign(Statement::over(Vec::new(), seq, 2_000, [0; 32])),
        key.public_pem(),
    ))?;
    let forged = published::parse(&forged, "outbox.event.digest/1@9")?;
    let report = published::check(&client, vec![copy(7)?, forged, copy(8)?], &key.public()).await?;
    assert!(!report.holds());
    assert_eq!(report.copies, 1, "{report:?}");
    assert!(
        report.problems[0].starts_with(&format!(
            "two different digests numbered {seq} (outbox.event.digest/1@7 and outbox.event.digest/1@9)"
        )),
        "{report:?}"
    );
    Ok(())
}
