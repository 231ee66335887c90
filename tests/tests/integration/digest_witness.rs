//! The transparency log against two real witnesses (litewitness, each with its own key):
//! every checkpoint a digest seals is cosigned by both when the log only grew, and the
//! rewrites of issue 47 item 3 by the holder of the signing key are refused by both and
//! caught offline against a checkpoint an auditor saved:
//!
//! 1. a past event rewritten, its chain recomputed, a new digest sealed;
//! 2. two different checkpoints of one size (a split view);
//! 3. the newest digests deleted and sealed again from an older one.
//!
//! And a witness down leaves the checkpoint short of its quorum without stopping anything.

use std::collections::BTreeSet;

use ra_ledger::digest::DigestKey;
use ra_ledger::digest::build::{Built, build_cached};
use ra_ledger::digest::cosign::{self, Outcome, Round};
use ra_ledger::digest::log::TreeCache;
use ra_ledger::digest::log::read_log;
use ra_ledger::tlog::note::{Checkpoint, NoteKey, SignedNote, sign_checkpoint};
use ra_ledger::tlog::policy::Policy;
use ra_ledger::tlog::tree::{ProofError, verify_consistency};
use ra_ledger::tlog::witness::{Answer, request_body};
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::TestApi;
use ra_ledger_tests::witness::witnesses;
use uuid::Uuid;

use crate::digest_published::rewrite_contact;

/// A ledger with its log registered at both witnesses, and a policy of both.
struct Logged {
    database: TestDatabase,
    api: TestApi,
    key: DigestKey,
    origin: String,
    policy: Policy,
    policy_text: String,
    http: reqwest::Client,
}

impl Logged {
    async fn new() -> anyhow::Result<Self> {
        let database = TestDatabase::new().await?;
        let api = TestApi::new(&database)?;
        let key = DigestKey::from_seed(&[47; 32]);
        let origin = format!("ra-ledger.test/{}", ra_ledger_tests::random_suffix());
        let log = NoteKey::log(&origin, key.public());
        let [a, b] = witnesses();
        a.add_log(&origin, &log.vkey())?;
        b.add_log(&origin, &log.vkey())?;
        let policy_text = format!(
            "log {}\n{}\n{}\ngroup both all a b\nquorum both\n",
            log.vkey(),
            a.policy_line("a"),
            b.policy_line("b")
        );
        let policy = Policy::parse(&policy_text)?;
        api.contact("TX", "Office").await;
        Ok(Self {
            database,
            api,
            key,
            origin,
            policy,
            policy_text,
            http: cosign::client(std::time::Duration::from_secs(5)),
        })
    }

    /// `count` assignments; their streams.
    async fn assign(&self, count: usize) -> Vec<String> {
        let mut streams = Vec::new();
        for _ in 0..count {
            let business = Uuid::now_v7();
            self.api.assign(business).await;
            streams.push(format!("assignment-{business}-TX"));
        }
        streams
    }

    /// Seals a digest with `cache` and runs a cosigning round.
    async fn seal_and_cosign(&self, cache: &TreeCache) -> anyhow::Result<Round> {
        let built = build_cached(self.api.ledger.pool(), &self.key, cache).await?;
        anyhow::ensure!(matches!(built, Built::Sealed { .. }), "{built:?}");
        self.round(cache).await
    }

    async fn round(&self, cache: &TreeCache) -> anyhow::Result<Round> {
        Ok(
            cosign::round(self.api.ledger.pool(), &self.policy, cache, &self.http)
                .await?
                .expect("a checkpoint"),
        )
    }

    fn log_key(&self) -> NoteKey {
        NoteKey::log(&self.origin, self.key.public())
    }
}

fn outcomes(round: &Round) -> Vec<(Outcome, String)> {
    round
        .witnesses
        .iter()
        .map(|w| (w.outcome, w.reason.clone().unwrap_or_default()))
        .collect()
}

/// What an auditor checks of a cosigned checkpoint: the log's signature and both witnesses'
/// cosignatures, with keys from the policy.
fn audited(logged: &Logged, note: &SignedNote) -> Checkpoint {
    logged
        .log_key()
        .verify_signature(note)
        .expect("the log's signature");
    for witness in &logged.policy.witnesses {
        witness.key.verify_cosignature(note).expect("a cosignature");
    }
    Checkpoint::parse(&note.body).expect("a checkpoint")
}

#[tokio::test]
async fn both_witnesses_cosign_a_growing_log_and_refuse_a_rewritten_event() -> anyhow::Result<()> {
    let logged = Logged::new().await?;
    let cache = TreeCache::with_origin(&logged.origin);
    let streams = logged.assign(6).await;
    let first = logged.seal_and_cosign(&cache).await?;
    assert!(first.quorum, "{:?}", outcomes(&first));
    assert_eq!(first.cosigners, BTreeSet::from(["a".into(), "b".into()]));
    // Every event is one leaf, the contact's and the six assignments', then the digest's
    // index leaf.
    assert_eq!(first.size, 8);
    let saved = audited(&logged, &first.cosigned);
    logged.assign(3).await;
    let second = logged.seal_and_cosign(&cache).await?;
    assert!(second.quorum, "{:?}", outcomes(&second));
    assert_eq!(second.size, 12);
    let kept = audited(&logged, &second.cosigned);
    // A round again: the cosignatures are kept, nothing is sent twice.
    let again = logged.round(&cache).await?;
    assert_eq!(again.cosigned, second.cosigned);
    // The service serves the cosigned checkpoint as the auditor saves it.
    let served = logged.api.get("/v1/checkpoints/latest").await;
    assert_eq!(served.status, axum::http::StatusCode::OK);
    assert_eq!(SignedNote::parse(&served.text)?, second.cosigned);
    audited(&logged, &SignedNote::parse(&served.text)?);

    // The key holder rewrites an event sealed under both checkpoints, recomputes its
    // chain, and seals again from the tables (a fresh builder: nothing in memory).
    let client = logged.database.connect().await?;
    let other = logged.api.contact("NY", "Elsewhere").await;
    rewrite_contact(&client, &streams[2], other.parse()?).await?;
    logged.assign(1).await;
    let forged = logged
        .seal_and_cosign(&TreeCache::with_origin(&logged.origin))
        .await?;
    assert!(!forged.quorum);
    assert!(forged.cosigners.is_empty());
    for (outcome, reason) in outcomes(&forged) {
        assert_eq!(outcome, Outcome::Refused);
        assert_eq!(reason, "HTTP 422: bad consistency proof");
    }
    // Published on the digest topic through the outbox: each cosigned checkpoint once with
    // its quorum, the forged one once as short of it.
    let published: Vec<(i64, bool, Vec<String>)> = client
        .query(
            "SELECT convert_from(payload, 'UTF8')::jsonb FROM outbox \
             WHERE event_type = 'CheckpointCosigned' ORDER BY id",
            &[],
        )
        .await?
        .iter()
        .map(|row| {
            let document: serde_json::Value = row.get(0);
            let cosigned: cosign::CosignedDocument =
                serde_json::from_value(document).expect("a cosigned checkpoint");
            assert!(cosign::is_cosigned_checkpoint(
                &serde_json::to_vec(&cosigned).unwrap()
            ));
            (cosigned.digest_seq, cosigned.quorum, cosigned.cosigners)
        })
        .collect();
    let both = vec!["a".to_string(), "b".to_string()];
    assert_eq!(
        published,
        [(1, true, both.clone()), (2, true, both), (3, false, vec![])]
    );
    // Not sent again: a refusal is an alarm, not a retry.
    let after = logged.round(&cache).await?;
    assert_eq!(outcomes(&after), outcomes(&forged));

    // Offline: the auditor's saved checkpoints against the new one, with the proof the
    // ledger gives (from its rewritten log).
    let log = read_log(&logged.api.ledger.pool().get().await?, forged.digest_seq).await?;
    let new = Checkpoint::parse(&forged.cosigned.body)?;
    logged.log_key().verify_signature(&forged.cosigned)?;
    for saved in [&saved, &kept] {
        let proof = log
            .consistency_proof(saved.size, new.size)
            .expect("a proof");
        // One of the two roots does not come out of the proof (the old one, or the new one
        // when the old size is a power of two and the proof starts from its root).
        let checked = verify_consistency(saved.size, new.size, &saved.root, &new.root, &proof);
        assert!(
            checked == Err(ProofError::Root(saved.root))
                || checked == Err(ProofError::Root(new.root)),
            "from size {}: {checked:?}",
            saved.size
        );
    }
    Ok(())
}

#[tokio::test]
async fn two_checkpoints_of_one_size_are_refused_and_caught() -> anyhow::Result<()> {
    let logged = Logged::new().await?;
    let cache = TreeCache::with_origin(&logged.origin);
    logged.assign(4).await;
    let round = logged.seal_and_cosign(&cache).await?;
    assert!(round.quorum, "{:?}", outcomes(&round));
    let saved = audited(&logged, &round.cosigned);
    // The key holder signs another checkpoint of the same size, for another auditor.
    let other = Checkpoint {
        root: [0x5a; 32],
        ..saved.clone()
    };
    let split = sign_checkpoint(logged.key.public(), |m| logged.key.sign_bytes(m), &other);
    logged.log_key().verify_signature(&split)?;
    for witness in &logged.policy.witnesses {
        let url = witness.url.as_deref().expect("a URL");
        let answer = cosign::post(&logged.http, url, &request_body(saved.size, &[], &split)).await;
        assert_eq!(
            answer,
            Answer::Refused("HTTP 422: bad consistency proof".into())
        );
    }
    // Offline: the auditor holding the first sees the second's root differ at its size.
    assert_eq!(
        verify_consistency(saved.size, other.size, &saved.root, &other.root, &[]),
        Err(ProofError::SameSizeOtherRoot {
            size: saved.size,
            first: saved.root,
            second: other.root
        })
    );
    Ok(())
}

#[tokio::test]
async fn the_newest_digests_deleted_and_sealed_again_are_refused_and_caught() -> anyhow::Result<()>
{
    let logged = Logged::new().await?;
    let cache = TreeCache::with_origin(&logged.origin);
    logged.assign(3).await;
    let first = logged.seal_and_cosign(&cache).await?;
    let older = audited(&logged, &first.cosigned);
    logged.assign(3).await;
    let second = logged.seal_and_cosign(&cache).await?;
    let saved = audited(&logged, &second.cosigned);
    assert!(first.quorum && second.quorum);

    // The key holder deletes digest 2 and the events it sealed, puts the leaves back as
    // digest 1 left them, forgets what the witnesses hold, and seals again.
    let client = logged.database.connect().await?;
    client
        .batch_execute(
            "BEGIN;
             ALTER TABLE events DISABLE TRIGGER USER;
             ALTER TABLE digests DISABLE TRIGGER USER;
             ALTER TABLE digest_leaf_changes DISABLE TRIGGER USER;
             ALTER TABLE checkpoints DISABLE TRIGGER USER;
             ALTER TABLE cosignatures DISABLE TRIGGER USER;
             DELETE FROM events WHERE (stream, stream_version) IN
                 (SELECT stream, version FROM digest_leaf_changes WHERE digest_seq = 2);
             DELETE FROM cosignatures WHERE digest_seq = 2;
             DELETE FROM checkpoint_publications WHERE digest_seq = 2;
             DELETE FROM checkpoints WHERE digest_seq = 2;
             DELETE FROM digest_leaf_changes WHERE digest_seq = 2;
             DELETE FROM digests WHERE seq = 2;
             DELETE FROM digest_leaves WHERE digest_seq = 2;
             INSERT INTO digest_dirty (stream) VALUES ('*');
             DELETE FROM witness_state;
             ALTER TABLE events ENABLE TRIGGER USER;
             ALTER TABLE digests ENABLE TRIGGER USER;
             ALTER TABLE digest_leaf_changes ENABLE TRIGGER USER;
             ALTER TABLE checkpoints ENABLE TRIGGER USER;
             ALTER TABLE cosignatures ENABLE TRIGGER USER;
             COMMIT;",
        )
        .await?;
    logged.assign(4).await;
    let resealed = logged
        .seal_and_cosign(&TreeCache::with_origin(&logged.origin))
        .await?;
    assert_eq!(resealed.digest_seq, 2);
    assert!(!resealed.quorum);
    for (outcome, reason) in outcomes(&resealed) {
        assert_eq!(outcome, Outcome::Refused, "{reason}");
        // The ledger forgot the witnesses' size: a 409 names it, the proof from there fails.
        assert_eq!(reason, "HTTP 422: bad consistency proof");
    }
    // Offline: consistent with the older saved checkpoint, not with the newer one.
    let new = Checkpoint::parse(&resealed.cosigned.body)?;
    let log = read_log(&logged.api.ledger.pool().get().await?, resealed.digest_seq).await?;
    let from_older = log
        .consistency_proof(older.size, new.size)
        .expect("a proof");
    verify_consistency(older.size, new.size, &older.root, &new.root, &from_older)?;
    let from_saved = log
        .consistency_proof(saved.size, new.size)
        .expect("a proof");
    assert_eq!(
        verify_consistency(saved.size, new.size, &saved.root, &new.root, &from_saved),
        Err(ProofError::Root(saved.root))
    );
    Ok(())
}

#[tokio::test]
async fn a_witness_down_leaves_the_checkpoint_short_and_it_is_sent_again() -> anyhow::Result<()> {
    let mut logged = Logged::new().await?;
    let [a, _] = witnesses();
    // Witness c's port answers nothing.
    let port = ra_ledger_tests::process::free_port()?;
    let down = NoteKey {
        name: "witness-c.test/down".into(),
        algorithm: ra_ledger::tlog::note::ALG_COSIGNATURE_V1,
        public: DigestKey::from_seed(&[3; 32]).public(),
    };
    logged.policy = Policy::parse(&format!(
        "{}\nwitness c {} http://127.0.0.1:{port}\ngroup both all a c\nquorum both\n",
        a.policy_line("a"),
        down.vkey()
    ))?;
    let cache = TreeCache::with_origin(&logged.origin);
    logged.assign(2).await;
    let round = logged.seal_and_cosign(&cache).await?;
    assert!(!round.quorum);
    assert_eq!(round.cosigners, BTreeSet::from(["a".into()]));
    let c = &round.witnesses[1];
    assert_eq!(c.outcome, Outcome::Unavailable);
    assert!(
        c.reason.as_deref().unwrap_or("").starts_with("no answer"),
        "{c:?}"
    );
    // The ledger goes on: another digest seals while the witness is down.
    logged.assign(1).await;
    let next = logged.seal_and_cosign(&cache).await?;
    assert_eq!(next.witnesses[1].outcome, Outcome::Unavailable);
    assert_eq!(next.witnesses[0].outcome, Outcome::Cosigned);
    Ok(())
}

/// `tests/verify_digest.py` on `document` with the ledger's key, the policy and the saved
/// checkpoints: (holds, what it said).
fn python_log_verdict(
    logged: &Logged,
    document: &serde_json::Value,
    policy: bool,
    saved: &[&str],
) -> anyhow::Result<(bool, String)> {
    let dir = std::env::temp_dir().join(format!(
        "ra-ledger-tlog-{}",
        ra_ledger_tests::random_suffix()
    ));
    std::fs::create_dir_all(&dir)?;
    let proof = dir.join("proof.json");
    std::fs::write(&proof, serde_json::to_vec_pretty(document)?)?;
    let key = dir.join("public.pem");
    std::fs::write(&key, logged.key.public_pem())?;
    let mut command = std::process::Command::new("python3");
    command
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("verify_digest.py"))
        .arg(&proof)
        .arg("--public-key")
        .arg(&key);
    if policy {
        let file = dir.join("policy.txt");
        std::fs::write(&file, &logged.policy_text)?;
        command.arg("--policy").arg(file);
    }
    for (i, checkpoint) in saved.iter().enumerate() {
        let file = dir.join(format!("saved-{i}.txt"));
        std::fs::write(&file, checkpoint)?;
        command.arg("--saved-checkpoint").arg(file);
    }
    let output = command.output()?;
    std::fs::remove_dir_all(&dir)?;
    let said = String::from_utf8_lossy(&output.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    anyhow::ensure!(
        !said.is_empty(),
        "no verdict: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok((output.status.success(), said))
}

/// Rust's `ledger proof verify` on a saved document: the digest's checks, then the log's.
fn rust_log_verdict(
    logged: &Logged,
    document: &serde_json::Value,
    policy: bool,
    saved: &[&str],
) -> Result<ra_ledger::digest::verify::VerifiedLog, String> {
    use ra_ledger::digest::verify::{ClaimedProof, verify, verify_log};
    let saved: Vec<String> = saved.iter().map(|text| text.to_string()).collect();
    ClaimedProof::from_json(document)
        .and_then(|proof| {
            verify(&proof, &logged.key.public())?;
            verify_log(
                &proof,
                &logged.key.public(),
                policy.then_some(&logged.policy),
                &saved,
            )
        })
        .map_err(|refused| refused.to_string())
}

#[tokio::test]
async fn proofs_as_saved_verify_against_the_witnesses_and_saved_checkpoints_offline()
-> anyhow::Result<()> {
    let logged = Logged::new().await?;
    let cache = TreeCache::with_origin(&logged.origin);
    let streams = logged.assign(5).await;
    assert!(logged.seal_and_cosign(&cache).await?.quorum);
    // The auditor keeps the cosigned checkpoint as the service serves it.
    let kept = logged.api.get("/v1/checkpoints/latest").await.text;
    let kept_size = Checkpoint::parse(&SignedNote::parse(&kept)?.body)?.size;
    logged.assign(4).await;
    assert!(logged.seal_and_cosign(&cache).await?.quorum);

    // An event's proof with the log's consistency from the kept size.
    let client = logged.database.connect().await?;
    let event: Uuid = client
        .query_one(
            "SELECT event_id FROM events WHERE stream = $1",
            &[&streams[1]],
        )
        .await?
        .get(0);
    let proof = ra_ledger::digest::prove::for_event_with(
        logged.api.ledger.pool(),
        event,
        &cache,
        &[kept_size],
    )
    .await?;
    let proof = serde_json::to_value(&proof)?;
    let verified = rust_log_verdict(&logged, &proof, true, &[&kept]).expect("the proof holds");
    assert_eq!(verified.cosigned, ["a", "b"]);
    assert_eq!(verified.consistent_with, [kept_size]);
    let (holds, said) = python_log_verdict(&logged, &proof, true, &[&kept])?;
    assert!(holds, "{said}");
    assert!(
        said.contains("the witnesses' quorum") && said.contains("consistency with 1 saved"),
        "{said}"
    );

    // The answer of registered-agent?proof=true, as saved, is one shape both read.
    let business = streams[1]
        .trim_start_matches("assignment-")
        .trim_end_matches("-TX");
    let answer = logged
        .api
        .get(&format!(
            "/v1/businesses/{business}/jurisdictions/TX/registered-agent?proof=true"
        ))
        .await;
    assert_eq!(
        answer.status,
        axum::http::StatusCode::OK,
        "{:?}",
        answer.body
    );
    rust_log_verdict(&logged, &answer.body, true, &[]).expect("the answer's proof holds");
    let (holds, said) = python_log_verdict(&logged, &answer.body, true, &[])?;
    assert!(holds, "{said}");
    // With the auditor's saved size, the answer's proof is checked against the kept one.
    let agent = format!("/v1/businesses/{business}/jurisdictions/TX/registered-agent?proof=true");
    let answer = logged
        .api
        .get(&format!("{agent}&consistent_with={kept_size}"))
        .await;
    assert_eq!(
        answer.status,
        axum::http::StatusCode::OK,
        "{:?}",
        answer.body
    );
    rust_log_verdict(&logged, &answer.body, true, &[&kept]).expect("consistent with the kept one");
    let (holds, said) = python_log_verdict(&logged, &answer.body, true, &[&kept])?;
    assert!(holds, "{said}");
    for bad in ["abc", "1,,2", "99999999"] {
        let refused = logged
            .api
            .get(&format!("{agent}&consistent_with={bad}"))
            .await;
        refused.expect_error(axum::http::StatusCode::BAD_REQUEST, "invalid_field");
        assert!(
            refused.body["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("consistent_with"),
            "{:?}",
            refused.body
        );
    }
    let mut edited = answer.body.clone();
    edited["contact"]["name"] = serde_json::json!("Someone else");
    assert_eq!(
        rust_log_verdict(&logged, &edited, false, &[]).unwrap_err(),
        "the answer's fields beside `proof` are not the proof's `answer`"
    );
    let (holds, said) = python_log_verdict(&logged, &edited, false, &[])?;
    assert!(!holds && said.contains("beside `proof`"), "{said}");

    // A forged cosignature set: without the policy's quorum, refused by both.
    let mut short = proof.clone();
    let note = SignedNote::parse(short["log"]["checkpoint"].as_str().unwrap())?;
    let mut unsigned = note.clone();
    unsigned.signatures.truncate(1);
    short["log"]["checkpoint"] = serde_json::json!(unsigned.text());
    assert!(
        rust_log_verdict(&logged, &short, true, &[])
            .unwrap_err()
            .contains("short of the policy's quorum")
    );
    let (holds, said) = python_log_verdict(&logged, &short, true, &[])?;
    assert!(
        !holds && said.contains("short of the policy's quorum"),
        "{said}"
    );

    // The key holder rewrites the event and seals again: the new proof is signed by the
    // log and holds on its own, but the auditor's kept checkpoint names the break.
    let other = logged.api.contact("NY", "Elsewhere").await;
    rewrite_contact(&client, &streams[1], other.parse()?).await?;
    // And has the digest seal the rewritten head, as its own builder would.
    client
        .execute(
            "INSERT INTO digest_dirty (stream) VALUES ($1)",
            &[&streams[1]],
        )
        .await?;
    logged.assign(1).await;
    let forged_cache = TreeCache::with_origin(&logged.origin);
    let round = logged.seal_and_cosign(&forged_cache).await?;
    assert!(!round.quorum);
    let forged = ra_ledger::digest::prove::for_event_with(
        logged.api.ledger.pool(),
        event,
        &forged_cache,
        &[kept_size],
    )
    .await?;
    let forged = serde_json::to_value(&forged)?;
    rust_log_verdict(&logged, &forged, false, &[]).expect("consistent with itself");
    let refused = rust_log_verdict(&logged, &forged, false, &[&kept]).unwrap_err();
    assert!(
        refused.starts_with(&format!(
            "NOT CONSISTENT with your saved checkpoint of size {kept_size}"
        )),
        "{refused}"
    );
    let (holds, said) = python_log_verdict(&logged, &forged, false, &[&kept])?;
    assert!(!holds, "{said}");
    assert!(
        said.starts_with(&format!(
            "FAIL: NOT CONSISTENT with your saved checkpoint of size {kept_size}"
        )),
        "{said}"
    );
    // And with the policy: no witness cosigned it.
    let (holds, said) = python_log_verdict(&logged, &forged, true, &[&kept])?;
    assert!(
        !holds && said.contains("short of the policy's quorum"),
        "{said}"
    );
    Ok(())
}
