//! `deploy/stack up` run again and again leaves the witnesses cosigning (issue 56, item 5).
//!
//! Each `up` ran `witnessctl add-key` again; litewitness kept every copy and answered every
//! checkpoint with HTTP 500 "ambiguous key" from the second `up` on. A whole `stack up`
//! builds the release binaries and starts PostgreSQL, Kafka, the schema registry and the
//! services; the witnesses' part of it is `witnesses_up` of deploy/witnesses.sh, which this
//! test runs three times, as `up` does, against the real litewitness processes it starts,
//! with the test's `ledger` binary and a ledger database of the run: then a checkpoint is
//! cosigned with the quorum of the policy the script wrote. A database holding copies of the
//! key (left by the `up`s before the fix) is repaired by the next `up`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ra_ledger::digest::DigestKey;
use ra_ledger::digest::build::{Built, build_cached};
use ra_ledger::digest::cosign::{self, Outcome, Round};
use ra_ledger::digest::log::TreeCache;
use ra_ledger::tlog::policy::Policy;
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::TestApi;
use uuid::Uuid;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the repository")
        .to_owned()
}

/// The stack's state folder of this test; its witnesses are stopped when it is dropped.
struct StackDir {
    dir: PathBuf,
    port: u16,
}

impl StackDir {
    fn new() -> anyhow::Result<Self> {
        // The shared stack clears the run's folder when it starts: started first.
        ra_ledger_tests::stack();
        let dir = ra_ledger_tests::stack::run_dir()
            .join(format!("stack-{}", ra_ledger_tests::random_suffix()));
        std::fs::create_dir_all(dir.join("secrets"))?;
        let made = Command::new("openssl")
            .args(["genpkey", "-algorithm", "ed25519", "-out"])
            .arg(dir.join("secrets/digest-key.pem"))
            .output()?;
        anyhow::ensure!(made.status.success(), "openssl genpkey: {made:?}");
        // Two ports in a row, as the stack's witnesses take them.
        let port = loop {
            let port = ra_ledger_tests::process::free_port()?;
            if std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
                break port;
            }
        };
        Ok(Self { dir, port })
    }

    /// Runs `function` of deploy/witnesses.sh as deploy/stack does; what it logged.
    fn run(&self, function: &str) -> anyhow::Result<String> {
        let output = Command::new("bash")
            .arg("-c")
            .arg(
                "set -euo pipefail; source \"$1/deploy/lib.sh\"; \
                 source \"$1/deploy/witnesses.sh\"; \"$2\"",
            )
            .arg("bash")
            .arg(repository())
            .arg(function)
            .env("STACK_DIR", &self.dir)
            .env("SECRETS_DIR", self.dir.join("secrets"))
            .env("LEDGER_BIN", ra_ledger_tests::cli::binary()?)
            .env("RA_WITNESS_PORT", self.port.to_string())
            .output()?;
        let said = String::from_utf8_lossy(&output.stderr).into_owned();
        anyhow::ensure!(output.status.success(), "{function} failed: {said}");
        Ok(said)
    }

    /// What the old `up` did to witness `name`'s database: the log's key added again.
    fn add_key_again(&self, name: &str) -> anyhow::Result<()> {
        let key = std::fs::read_to_string(self.dir.join("witness-policy.txt"))?
            .lines()
            .find_map(|line| line.strip_prefix("log "))
            .expect("a log line")
            .to_owned();
        let bin = std::env::var("LEDGER_WITNESS_BIN")?;
        let db = self.dir.join(format!("witness-{name}/litewitness.db"));
        let added = Command::new(Path::new(&bin).join("witnessctl"))
            .args(["add-key", "-db"])
            .arg(db)
            .args(["-origin", key.split('+').next().expect("an origin"), "-key"])
            .arg(&key)
            .output()?;
        anyhow::ensure!(added.status.success(), "witnessctl add-key: {added:?}");
        Ok(())
    }

    fn policy(&self) -> anyhow::Result<Policy> {
        Ok(Policy::parse(&std::fs::read_to_string(
            self.dir.join("witness-policy.txt"),
        )?)?)
    }
}

impl Drop for StackDir {
    fn drop(&mut self) {
        if let Err(error) = self.run("witnesses_down") {
            eprintln!("stopping the test stack's witnesses: {error:#}");
        }
    }
}

/// An assignment, a digest sealed with the stack's key, and a round with the stack's policy.
async fn seal_and_cosign(
    api: &TestApi,
    key: &DigestKey,
    cache: &TreeCache,
    policy: &Policy,
) -> anyhow::Result<Round> {
    api.assign(Uuid::now_v7()).await;
    let built = build_cached(api.ledger.pool(), key, cache).await?;
    anyhow::ensure!(matches!(built, Built::Sealed { .. }), "{built:?}");
    let http = cosign::client(Duration::from_secs(5));
    Ok(cosign::round(api.ledger.pool(), policy, cache, &http)
        .await?
        .expect("a checkpoint"))
}

#[tokio::test]
async fn stack_up_three_times_leaves_the_witnesses_cosigning() -> anyhow::Result<()> {
    let stack = StackDir::new()?;
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    api.contact("TX", "Office").await;
    let key = DigestKey::from_pem_file(&stack.dir.join("secrets/digest-key.pem"))?;
    // The stack's ledger signs with the default origin, as `ledger proof log-key` names it.
    let cache = TreeCache::with_origin(ra_ledger::tlog::DEFAULT_ORIGIN);

    stack.run("witnesses_up")?;
    let again = stack.run("witnesses_up")?;
    assert!(again.contains("witness a already running"), "{again}");
    let policy = stack.policy()?;
    let round = seal_and_cosign(&api, &key, &cache, &policy).await?;
    assert!(round.quorum, "after two ups: {:?}", round.witnesses);

    // A database left with copies of the key by the `up`s before the fix: litewitness
    // answers 500 "ambiguous key", and the next `up` repairs it.
    for name in ["a", "b"] {
        stack.add_key_again(name)?;
    }
    let ambiguous = seal_and_cosign(&api, &key, &cache, &policy).await?;
    assert!(!ambiguous.quorum);
    for witness in &ambiguous.witnesses {
        assert_eq!(witness.outcome, Outcome::Unavailable, "{witness:?}");
        assert!(
            witness
                .reason
                .as_deref()
                .unwrap_or("")
                .contains("ambiguous"),
            "{witness:?}"
        );
    }
    let third = stack.run("witnesses_up")?;
    assert!(
        third.contains("witness a holds the log's key 2 times"),
        "{third}"
    );
    // The policy names the same witnesses and keys: their keys were kept.
    assert_eq!(stack.policy()?.witnesses, policy.witnesses);
    let round = seal_and_cosign(&api, &key, &cache, &stack.policy()?).await?;
    assert!(round.quorum, "after the third up: {:?}", round.witnesses);
    assert_eq!(round.cosigners.len(), 2);
    Ok(())
}
