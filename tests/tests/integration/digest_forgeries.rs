//! Issue 56, items 1, 3 and 4: both verifiers (`ledger proof verify` in Rust and
//! `tests/verify_digest.py`) held to one list of forged answers made from honest proofs of
//! one digest, cosigned by the run's two real witnesses; the question the auditor states
//! and `--max-age`; a policy counting each key once and pinning the log's key. The Go
//! ecosystem's check of the same proofs (item 6) is in `digest_go`.

use std::path::{Path, PathBuf};
use std::process::Command;

use chrono::{DateTime, SecondsFormat, Utc};
use ra_ledger::digest::DigestKey;
use ra_ledger::digest::build::{Built, build_cached};
use ra_ledger::digest::cosign;
use ra_ledger::digest::log::TreeCache;
use ra_ledger::digest::prove::for_answer_with;
use ra_ledger::domain::Jurisdiction;
use ra_ledger::tlog::note::NoteKey;
use ra_ledger::tlog::policy::Policy;
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::TestApi;
use ra_ledger_tests::witness::witnesses;
use serde_json::{Value, json};
use uuid::Uuid;

/// A ledger whose log both witnesses cosign, with business `business` served in TX (its
/// first assignment replaced: three events) and in NY, and `other` in TX.
pub struct Audited {
    /// Kept for the test's life: its drop removes the database.
    _database: TestDatabase,
    pub api: TestApi,
    pub key: DigestKey,
    pub origin: String,
    pub policy: Policy,
    pub policy_text: String,
    pub business: Uuid,
    pub other: Uuid,
    pub cache: TreeCache,
    pub dir: PathBuf,
}

impl Audited {
    pub async fn new() -> anyhow::Result<Self> {
        let database = TestDatabase::new().await?;
        let api = TestApi::new(&database)?;
        let key = DigestKey::from_seed(&[56; 32]);
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
        let dir = std::env::temp_dir().join(format!(
            "ra-ledger-forgeries-{}",
            ra_ledger_tests::random_suffix()
        ));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("public.pem"), key.public_pem())?;
        std::fs::write(dir.join("policy.txt"), &policy_text)?;
        api.contact("TX", "Texas Office").await;
        api.contact("NY", "New York Office").await;
        let (business, other) = (Uuid::now_v7(), Uuid::now_v7());
        let first = api.assign(business).await;
        let replaced = api
            .post(&format!("/v1/assignments/{first}/replace"), json!({}))
            .await;
        assert_eq!(
            replaced.status,
            axum::http::StatusCode::CREATED,
            "{:?}",
            replaced.body
        );
        api.assign(other).await;
        let ny = api
            .post(
                "/v1/assignments",
                json!({"business_id": business, "jurisdiction": "NY"}),
            )
            .await;
        assert_eq!(ny.status, axum::http::StatusCode::CREATED, "{:?}", ny.body);
        Ok(Self {
            _database: database,
            api,
            key,
            policy: Policy::parse(&policy_text)?,
            cache: TreeCache::with_origin(&origin),
            origin,
            policy_text,
            business,
            other,
            dir,
        })
    }

    /// Seals a digest and has both witnesses cosign its checkpoint.
    pub async fn seal_and_cosign(&self) -> anyhow::Result<()> {
        let built = build_cached(self.api.ledger.pool(), &self.key, &self.cache).await?;
        anyhow::ensure!(matches!(built, Built::Sealed { .. }), "{built:?}");
        let http = cosign::client(std::time::Duration::from_secs(30));
        let round = cosign::round(self.api.ledger.pool(), &self.policy, &self.cache, &http)
            .await?
            .expect("a checkpoint");
        anyhow::ensure!(round.quorum, "both witnesses cosign: {round:?}");
        Ok(())
    }

    /// The honest proof of `business`'s RA in `code` at `at`, as known at the digest.
    pub async fn proof(
        &self,
        business: Uuid,
        code: &str,
        at: DateTime<Utc>,
        consistent_with: &[u64],
    ) -> anyhow::Result<Value> {
        let jurisdiction = Jurisdiction::parse("jurisdiction", code).map_err(anyhow::Error::msg)?;
        let (_, document) = for_answer_with(
            self.api.ledger.pool(),
            &self.cache,
            business,
            jurisdiction,
            at,
            None,
            consistent_with,
        )
        .await?;
        Ok(serde_json::to_value(&document)?)
    }

    /// Writes `document` in the test's folder; its path.
    pub fn file(&self, name: &str, document: &Value) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(name);
        std::fs::write(&path, serde_json::to_vec_pretty(document)?)?;
        Ok(path)
    }

    /// `ledger proof verify`'s checks, as the library runs them, with the policy.
    pub fn rust_verdict(&self, document: &Value) -> Result<String, String> {
        use ra_ledger::digest::verify::{ClaimedProof, verify, verify_log};
        ClaimedProof::from_json(document)
            .and_then(|proof| {
                let verified = verify(&proof, &self.key.public())?;
                verify_log(&proof, &self.key.public(), Some(&self.policy), &[])?;
                Ok(verified.answer.unwrap_or_default())
            })
            .map_err(|refused| refused.to_string())
    }
}

impl Drop for Audited {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `tests/verify_digest.py` on each file with `flags`, in one run: (holds, what it said).
pub fn python_verdicts(files: &[PathBuf], flags: &[&str]) -> anyhow::Result<Vec<(bool, String)>> {
    let output = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("verify_digest.py"))
        .args(files)
        .args(flags)
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let verdicts: Vec<(bool, String)> = if files.len() == 1 {
        let said = stdout.lines().next().unwrap_or_default().to_owned();
        vec![(output.status.success(), said)]
    } else {
        files
            .iter()
            .map(|path| {
                let prefix = format!("{}: ", path.display());
                let said = stdout
                    .lines()
                    .find_map(|line| line.strip_prefix(&prefix))
                    .unwrap_or_default()
                    .to_owned();
                (said.starts_with("ok:"), said)
            })
            .collect()
    };
    anyhow::ensure!(
        verdicts.iter().all(|(_, said)| !said.is_empty()),
        "the Python verifier gave no verdict for every file: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(verdicts)
}

fn streams(document: &mut Value) -> &mut Vec<Value> {
    document["streams"].as_array_mut().expect("streams")
}

fn heads(document: &mut Value) -> &mut Vec<Value> {
    document["log"]["heads"].as_array_mut().expect("log.heads")
}

fn indexed(document: &mut Value) -> &mut Vec<Value> {
    document["log"]["index"]["streams"]
        .as_array_mut()
        .expect("log.index.streams")
}

/// Removes stream `i`, its head in the log and its index entry, as a forger must to keep
/// the log part whole.
fn drop_stream(document: &mut Value, i: usize) {
    streams(document).remove(i);
    heads(document).remove(i);
    indexed(document).remove(i);
}

/// Stream `i` of `document` replaced by stream `j` of `from`, with its head and its entry.
fn put_stream(document: &mut Value, i: usize, from: &Value, j: usize) {
    streams(document)[i] = from["streams"][j].clone();
    heads(document)[i] = from["log"]["heads"][j].clone();
    indexed(document)[i] = from["log"]["index"]["streams"][j].clone();
}

/// Stream `j` of `from`, with its head and its entry, added last to `document`.
fn add_stream(document: &mut Value, from: &Value, j: usize) {
    streams(document).push(from["streams"][j].clone());
    heads(document).push(from["log"]["heads"][j].clone());
    indexed(document).push(from["log"]["index"]["streams"][j].clone());
}

type Forgery = (&'static str, Value, String);

/// The forged answers, each made from the honest proofs `tx` (business B in TX, with its
/// contact stream second), `ny` (B in NY) and `other` (business B2 in TX), all of one digest;
/// with the words both verifiers must refuse it with.
fn forgeries(audited: &Audited, tx: &Value, ny: &Value, other: &Value) -> Vec<Forgery> {
    let b = audited.business;
    let tx_contact = tx["streams"][1]["stream"].as_str().unwrap().to_owned();
    let ny_contact = ny["streams"][1]["stream"].as_str().unwrap().to_owned();
    let edit = |change: &dyn Fn(&mut Value)| {
        let mut copy = tx.clone();
        change(&mut copy);
        copy
    };
    let swap_contact = |copy: &mut Value| put_stream(copy, 1, ny, 1);
    let missing = |stream: &str| format!("the proof does not prove stream {stream}, ");
    let not_named = |stream: &str| format!("the proof carries stream {stream}, which the question");
    vec![
        (
            "the contact stream removed, the answer null",
            edit(&|d| {
                drop_stream(d, 1);
                d["answer"] = Value::Null;
            }),
            missing(&tx_contact),
        ),
        (
            "the contact stream swapped for another jurisdiction's",
            edit(&swap_contact),
            not_named(&ny_contact),
        ),
        (
            "the contact stream swapped, the answer null",
            edit(&|d| {
                swap_contact(d);
                d["answer"] = Value::Null;
            }),
            not_named(&ny_contact),
        ),
        (
            "the contact stream swapped, the other jurisdiction's answer",
            edit(&|d| {
                swap_contact(d);
                d["answer"] = ny["answer"].clone();
            }),
            not_named(&ny_contact),
        ),
        (
            "the assignment stream dropped, the answer null",
            edit(&|d| {
                drop_stream(d, 0);
                d["answer"] = Value::Null;
            }),
            missing(&format!("assignment-{b}-TX")),
        ),
        (
            "the question's business changed",
            edit(&|d| d["question"]["business_id"] = json!(audited.other)),
            missing(&format!("assignment-{}-TX", audited.other)),
        ),
        (
            "the question's jurisdiction changed",
            edit(&|d| d["question"]["jurisdiction"] = json!("NY")),
            missing(&format!("assignment-{b}-NY")),
        ),
        (
            "the answer null over the whole honest proof",
            edit(&|d| d["answer"] = Value::Null),
            "fold to another answer than the one given: they give contact".into(),
        ),
        (
            "the assignment stream swapped for another business's, the answer null",
            edit(&|d| {
                drop_stream(d, 1);
                put_stream(d, 0, other, 0);
                d["answer"] = Value::Null;
            }),
            missing(&format!("assignment-{b}-TX")),
        ),
        (
            "another registration's stream brought along",
            edit(&|d| add_stream(d, ny, 0)),
            not_named(&format!("assignment-{b}-NY")),
        ),
        (
            "the contact stream twice",
            edit(&|d| add_stream(d, tx, 1)),
            format!("the proof carries stream {tx_contact} twice"),
        ),
        (
            "the other jurisdiction's answer",
            edit(&|d| d["answer"] = ny["answer"].clone()),
            "fold to another answer".into(),
        ),
        (
            "the contact's name edited",
            edit(&|d| d["answer"]["contact"]["name"] = json!("Elsewhere")),
            "fold to another answer".into(),
        ),
        (
            "the assignment stream without its events",
            edit(&|d| {
                streams(d)[0]["events"]
                    .as_array_mut()
                    .expect("events")
                    .clear();
            }),
            format!("the proof of stream assignment-{b}-TX has no events"),
        ),
        (
            "the assignment stream without its first event",
            edit(&|d| {
                streams(d)[0]["events"]
                    .as_array_mut()
                    .expect("events")
                    .remove(0);
                heads(d)[0]["positions"]
                    .as_array_mut()
                    .expect("positions")
                    .remove(0);
            }),
            format!(
                "the proof of stream assignment-{b}-TX starts at version 2: an answer needs \
                 whole streams"
            ),
        ),
    ]
}

#[tokio::test]
async fn both_verifiers_refuse_the_same_forged_answers_and_accept_a_proven_no_ra()
-> anyhow::Result<()> {
    let audited = Audited::new().await?;
    audited.seal_and_cosign().await?;
    let now = Utc::now();
    let tx = audited.proof(audited.business, "TX", now, &[]).await?;
    let ny = audited.proof(audited.business, "NY", now, &[]).await?;
    let other = audited.proof(audited.other, "TX", now, &[]).await?;
    assert_eq!(tx["digest"], ny["digest"], "one digest");
    assert_eq!(tx["streams"].as_array().map(Vec::len), Some(2));
    // "No RA" before the assignment started: the assignment stream alone proves it.
    let mut no_ra = tx.clone();
    drop_stream(&mut no_ra, 1);
    no_ra["answer"] = Value::Null;
    no_ra["question"]["at_micros"] = json!(946_684_800_000_000i64); // 2000-01-01
    // "No RA" where the business was never served: the index shows it has no stream.
    let never = audited.proof(audited.business, "CA", now, &[]).await?;
    assert_eq!(never["streams"], json!([]), "{never}");
    assert_eq!(never["answer"], Value::Null);
    let honest = [&tx, &ny, &other, &no_ra, &never];
    for document in honest {
        audited.rust_verdict(document).map_err(anyhow::Error::msg)?;
    }
    let said = audited.rust_verdict(&never).map_err(anyhow::Error::msg)?;
    assert!(
        said.ends_with("is nobody: no assignment in force"),
        "{said}"
    );
    let said = audited.rust_verdict(&no_ra).map_err(anyhow::Error::msg)?;
    assert!(
        said.ends_with("is nobody: no assignment in force"),
        "{said}"
    );
    let flags = ["--public-key", "public.pem", "--policy", "policy.txt"];
    let flags: Vec<String> = flags
        .iter()
        .map(|flag| match *flag {
            "public.pem" | "policy.txt" => audited.dir.join(flag).display().to_string(),
            flag => flag.to_owned(),
        })
        .collect();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let files = honest
        .iter()
        .enumerate()
        .map(|(i, document)| audited.file(&format!("honest-{i}.json"), document))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for (holds, said) in python_verdicts(&files, &flags)? {
        assert!(holds, "{said}");
    }

    let forged = forgeries(&audited, &tx, &ny, &other);
    let files = forged
        .iter()
        .enumerate()
        .map(|(i, (_, document, _))| audited.file(&format!("forged-{i}.json"), document))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let python = python_verdicts(&files, &flags)?;
    for ((what, document, words), (holds, said)) in forged.iter().zip(python) {
        let refused = audited
            .rust_verdict(document)
            .expect_err(&format!("Rust accepted: {what}"));
        assert!(refused.contains(words.as_str()), "Rust, {what}: {refused}");
        assert!(!holds, "Python accepted: {what}: {said}");
        assert!(said.contains(words.as_str()), "Python, {what}: {said}");
    }
    Ok(())
}

/// Runs `ledger proof verify` on `file` with `flags`: its exit code and stderr.
async fn ledger_verify(file: &Path, flags: &[&str]) -> anyhow::Result<(Option<i32>, String)> {
    let file = file.display().to_string();
    let mut arguments = vec!["proof", "verify", file.as_str()];
    arguments.extend_from_slice(flags);
    ra_ledger_tests::cli::ledger(&arguments, &[]).await
}

fn micros_text(micros: i64) -> String {
    DateTime::from_timestamp_micros(micros)
        .expect("an instant")
        .to_rfc3339_opts(SecondsFormat::Micros, true)
}

#[tokio::test]
async fn the_stated_question_and_the_max_age_are_checked_by_both_verifiers() -> anyhow::Result<()> {
    let audited = Audited::new().await?;
    audited.seal_and_cosign().await?;
    let tx = audited
        .proof(audited.business, "TX", Utc::now(), &[])
        .await?;
    let file = audited.file("tx.json", &tx)?;
    let key = audited.dir.join("public.pem").display().to_string();
    let policy = audited.dir.join("policy.txt").display().to_string();
    let business = audited.business.to_string();
    let at = micros_text(tx["question"]["at_micros"].as_i64().unwrap());
    let known_at = micros_text(tx["question"]["known_at_micros"].as_i64().unwrap());
    let base = ["--public-key", &key, "--policy", &policy];
    let asked = [
        "--business",
        &business,
        "--jurisdiction",
        "TX",
        "--at",
        &at,
        "--known-at",
        &known_at,
    ];
    let both = |extra: &[&str]| {
        let mut flags = base.to_vec();
        flags.extend_from_slice(extra);
        flags.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let mut stated = asked.to_vec();
    stated.extend_from_slice(&["--max-age", "1d"]);
    let with_question = both(&stated);
    let flags: Vec<&str> = with_question.iter().map(String::as_str).collect();
    let (code, stderr) = ledger_verify(&file, &flags).await?;
    assert_eq!(code, Some(0), "{stderr}");
    let (holds, said) = python_verdicts(std::slice::from_ref(&file), &flags)?.remove(0);
    assert!(holds, "{said}");

    // Each part of another question is named, in both.
    let other = audited.other.to_string();
    let later = micros_text(tx["question"]["at_micros"].as_i64().unwrap() + 1);
    for (flag, value, words) in [
        (
            "--business",
            other.as_str(),
            format!("you asked business {other}"),
        ),
        (
            "--jurisdiction",
            "NY",
            "you asked jurisdiction NY, it answers jurisdiction TX".into(),
        ),
        ("--at", later.as_str(), "you asked at ".into()),
        ("--known-at", later.as_str(), "you asked known-at ".into()),
    ] {
        let flags = both(&[flag, value]);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let (code, stderr) = ledger_verify(&file, &flags).await?;
        assert_eq!(code, Some(1), "{flag}: {stderr}");
        assert!(
            stderr.contains("the proof answers another question"),
            "{stderr}"
        );
        assert!(stderr.contains(&words), "{flag}: {stderr}");
        let (holds, said) = python_verdicts(std::slice::from_ref(&file), &flags)?.remove(0);
        assert!(!holds && said.contains(&words), "{flag}: {said}");
    }

    // --max-age: wait (on the clock, not a sleep) until the newest cosignature is 2 s old.
    let newest = newest_cosignature(&audited, &tx)?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while Utc::now().timestamp() <= newest + 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the clock did not move"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let flags = both(&["--max-age", "1s"]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (code, stderr) = ledger_verify(&file, &flags).await?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("older than --max-age 1 s"), "{stderr}");
    let (holds, said) = python_verdicts(std::slice::from_ref(&file), &flags)?.remove(0);
    assert!(
        !holds && said.contains("older than --max-age 1 s"),
        "{said}"
    );
    // And without the policy there is no cosignature to date it: a command-line error.
    let (code, stderr) = ledger_verify(&file, &["--public-key", &key, "--max-age", "1d"]).await?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--max-age needs --policy"), "{stderr}");
    Ok(())
}

/// The newest cosignature's time (Unix seconds) on the proof's checkpoint.
fn newest_cosignature(audited: &Audited, document: &Value) -> anyhow::Result<i64> {
    let note = ra_ledger::tlog::note::SignedNote::parse(
        document["log"]["checkpoint"].as_str().unwrap_or_default(),
    )?;
    let mut newest = 0;
    for witness in &audited.policy.witnesses {
        newest = newest.max(witness.key.verify_cosignature(&note)?);
    }
    Ok(newest as i64)
}

#[tokio::test]
async fn a_policy_counts_each_key_once_and_pins_the_log_key_in_both_verifiers() -> anyhow::Result<()>
{
    let audited = Audited::new().await?;
    audited.seal_and_cosign().await?;
    let tx = audited
        .proof(audited.business, "TX", Utc::now(), &[])
        .await?;
    let file = audited.file("tx.json", &tx)?;
    let key = audited.dir.join("public.pem").display().to_string();
    let [a, _] = witnesses();
    let log_line = audited.policy_text.lines().next().unwrap_or_default();
    let a_again = NoteKey {
        name: "w.example/a-again".into(),
        ..a.key.clone()
    };
    let another_log = NoteKey::log(&audited.origin, DigestKey::from_seed(&[9; 32]).public());
    for (what, policy, words) in [
        (
            "one witness listed twice in a group",
            format!(
                "{log_line}\n{}\ngroup g all a a\nquorum g\n",
                a.policy_line("a")
            ),
            "group g: witness a is under two of its members".to_owned(),
        ),
        (
            "two witness names with one key",
            format!(
                "{log_line}\n{}\nwitness b {}\ngroup g 2 a b\nquorum g\n",
                a.policy_line("a"),
                a_again.vkey()
            ),
            "witness b has the key of witness a".to_owned(),
        ),
        (
            "the policy's log key is another",
            format!(
                "log {}\n{}\nquorum a\n",
                another_log.vkey(),
                a.policy_line("a")
            ),
            "is not --public-key's".to_owned(),
        ),
    ] {
        let path = audited.dir.join("bad-policy.txt");
        std::fs::write(&path, &policy)?;
        let path = path.display().to_string();
        let flags = ["--public-key", key.as_str(), "--policy", path.as_str()];
        let (code, stderr) = ledger_verify(&file, &flags).await?;
        assert_ne!(code, Some(0), "{what}: {stderr}");
        assert!(stderr.contains(&words), "{what}: {stderr}");
        let output = Command::new("python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("verify_digest.py"))
            .arg(&file)
            .args(flags)
            .output()?;
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!output.status.success(), "{what}: {said}");
        assert!(said.contains(&words), "{what}: {said}");
    }
    // The Python verifier refuses a policy without the key to check the log with.
    let policy = audited.dir.join("policy.txt");
    let output = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("verify_digest.py"))
        .arg(&file)
        .arg("--policy")
        .arg(&policy)
        .output()?;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--policy needs --public-key"),
        "{output:?}"
    );
    Ok(())
}
