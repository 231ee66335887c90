//! Issue 56, item 4: rotating the digest key as docs/operators.md's steps say, tested. The
//! new log key is registered with both witnesses beside the old one; the service signs with
//! the new key; the witnesses cosign its checkpoint as an extension of the old key's; an
//! auditor's checkpoint kept under the old key still binds the new proofs (`--previous-key`,
//! in both verifiers), and proofs of the old digest still verify with the old key. Once the
//! old key is removed from the witnesses, a checkpoint signed with it (a thief's) gets no
//! cosignature.

use ra_ledger::digest::DigestKey;
use ra_ledger::digest::build::{Built, build_cached};
use ra_ledger::digest::cosign;
use ra_ledger::digest::verify::{ClaimedProof, verify, verify_log, verify_log_across};
use ra_ledger::tlog::note::NoteKey;
use ra_ledger::tlog::policy::Policy;
use ra_ledger_tests::witness::witnesses;
use uuid::Uuid;

use crate::digest_forgeries::{Audited, python_verdicts};

/// A digest signed with `key`, and a cosigning round under `policy`.
async fn seal_with(
    audited: &Audited,
    key: &DigestKey,
    policy: &Policy,
) -> anyhow::Result<cosign::Round> {
    let built = build_cached(audited.api.ledger.pool(), key, &audited.cache).await?;
    anyhow::ensure!(matches!(built, Built::Sealed { .. }), "{built:?}");
    let http = cosign::client(std::time::Duration::from_secs(30));
    cosign::round(audited.api.ledger.pool(), policy, &audited.cache, &http)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no checkpoint to cosign"))
}

#[tokio::test]
async fn the_digest_key_rotates_and_the_witnesses_cosign_across_the_rotation() -> anyhow::Result<()>
{
    let audited = Audited::new().await?;
    let b = audited.business;
    audited.seal_and_cosign().await?;
    let before = audited.proof(b, "TX", chrono::Utc::now(), &[]).await?;
    let (kept, kept_size) = crate::digest_index::kept(&before)?;

    // Steps 1 and 2: a new key, its log key registered with every witness.
    let old_key = &audited.key;
    let new_key = DigestKey::from_seed(&[57; 32]);
    let old_vkey = NoteKey::log(&audited.origin, old_key.public()).vkey();
    let new_vkey = NoteKey::log(&audited.origin, new_key.public()).vkey();
    for witness in witnesses() {
        witness.add_key(&audited.origin, &new_vkey)?;
    }
    // Step 3: the service signs with the new key; the witnesses cosign its checkpoint as an
    // extension of the old key's.
    let policy_text = audited.policy_text.replace(&old_vkey, &new_vkey);
    let policy = Policy::parse(&policy_text)?;
    audited.api.assign(Uuid::now_v7()).await;
    let round = seal_with(&audited, &new_key, &policy).await?;
    assert!(
        round.quorum,
        "both witnesses cosign the new key's checkpoint: {round:?}"
    );

    // Step 4: the auditor, given the new key and policy, checks a new proof against the
    // checkpoint they kept under the old key.
    let after = audited
        .proof(b, "TX", chrono::Utc::now(), &[kept_size])
        .await?;
    let claimed = ClaimedProof::from_json(&after).map_err(|e| anyhow::anyhow!("{e}"))?;
    verify(&claimed, &new_key.public()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let saved = std::slice::from_ref(&kept);
    let across = verify_log_across(
        &claimed,
        &new_key.public(),
        &[old_key.public()],
        Some(&policy),
        saved,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(across.consistent_with, [kept_size]);
    let unannounced = verify_log(&claimed, &new_key.public(), Some(&policy), saved)
        .expect_err("a checkpoint of another key, not announced")
        .to_string();
    assert!(unannounced.contains("saved checkpoint 1"), "{unannounced}");
    // The same in Python and with `ledger proof verify`.
    let dir = &audited.dir;
    std::fs::write(dir.join("new.pem"), new_key.public_pem())?;
    std::fs::write(dir.join("new-policy.txt"), &policy_text)?;
    std::fs::write(dir.join("kept.txt"), &kept)?;
    let file = audited.file("after.json", &after)?;
    let path = |name: &str| dir.join(name).display().to_string();
    let flags = [
        "--public-key".to_owned(),
        path("new.pem"),
        "--policy".to_owned(),
        path("new-policy.txt"),
        "--saved-checkpoint".to_owned(),
        path("kept.txt"),
    ];
    let previous = ["--previous-key".to_owned(), path("public.pem")];
    let with: Vec<&str> = flags.iter().chain(&previous).map(String::as_str).collect();
    let without: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (holds, said) = python_verdicts(std::slice::from_ref(&file), &with)?.remove(0);
    assert!(holds, "{said}");
    let (holds, said) = python_verdicts(std::slice::from_ref(&file), &without)?.remove(0);
    assert!(!holds && said.contains("saved checkpoint 1"), "{said}");
    let mut arguments = vec!["proof", "verify"];
    let file = file.display().to_string();
    arguments.push(&file);
    arguments.extend(&with);
    let (code, stderr) = ra_ledger_tests::cli::ledger(&arguments, &[]).await?;
    assert_eq!(code, Some(0), "{stderr}");

    // Proofs of the old digest still verify with the old key and the old policy.
    let claimed = ClaimedProof::from_json(&before).map_err(|e| anyhow::anyhow!("{e}"))?;
    verify(&claimed, &old_key.public()).map_err(|e| anyhow::anyhow!("{e}"))?;
    verify_log(&claimed, &old_key.public(), Some(&audited.policy), &[])
        .map_err(|e| anyhow::anyhow!("{e}"))?;

    // Step 5: the old key removed from the witnesses; whoever still holds it signs a
    // digest: no witness cosigns it.
    for witness in witnesses() {
        witness.del_key(&audited.origin, &old_vkey)?;
    }
    audited.api.assign(Uuid::now_v7()).await;
    let stolen = seal_with(&audited, old_key, &audited.policy).await?;
    assert!(!stolen.quorum, "{stolen:?}");
    assert!(stolen.cosigners.is_empty(), "{stolen:?}");
    Ok(())
}
