//! The witnesses in operation (issue 56, item 5), against the run's two real witnesses
//! (litewitness):
//!
//! - a witness that refuses turns the verdict (`GET /status`) to failing, and the console's
//!   operations page shows the quorum and each witness's last answer;
//! - a quorum short past a few digest intervals degrades the verdict;
//! - a witness that holds less than it cosigned before (its database restored from an
//!   older copy) lost its state: an alarm of its own, not a resend from the smaller size;
//! - one cosigner at a time: a round that finds the cosigning lock held sends nothing, and
//!   two rounds racing never refuse: one sends and the other reads what it stored, or, when
//!   the first ended before the second asked for the lock, the second finds every
//!   cosignature stored and counts it.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use base64::Engine as _;
use ra_ledger::digest::DigestKey;
use ra_ledger::digest::build::{Built, build_cached};
use ra_ledger::digest::cosign::{self, COSIGN_LOCK_KEY, Outcome, Round};
use ra_ledger::digest::log::TreeCache;
use ra_ledger::tlog::note::{Checkpoint, NoteKey};
use ra_ledger::tlog::policy::Policy;
use ra_ledger::tlog::policy::Witnessing;
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::{OPERATOR, TestApi};
use ra_ledger_tests::witness::{WitnessServer, witnesses};
use uuid::Uuid;

/// What witness b of a test's policy is.
#[derive(Clone, Copy, PartialEq)]
enum B {
    /// The run's witness b, knowing the log.
    Honest,
    /// The run's witness b, knowing the log's origin under another key: it refuses.
    OtherKey,
    /// A witness whose port answers nothing.
    Down,
}

/// A ledger whose log witness a knows, with a witness b as `b` says, served with its
/// verdict watching both (the quorum: both).
struct Watched {
    database: TestDatabase,
    api: TestApi,
    key: DigestKey,
    origin: String,
    policy: Arc<Policy>,
    cache: TreeCache,
    http: reqwest::Client,
}

impl Watched {
    async fn new(b: B, short_after: Duration) -> anyhow::Result<Self> {
        let database = TestDatabase::new().await?;
        let key = DigestKey::from_seed(&[56; 32]);
        let origin = format!("ra-ledger.test/{}", ra_ledger_tests::random_suffix());
        let log = NoteKey::log(&origin, key.public());
        let [a, run_b] = witnesses();
        a.add_log(&origin, &log.vkey())?;
        let b_line = match b {
            B::Honest | B::OtherKey => {
                let other = NoteKey::log(&origin, DigestKey::from_seed(&[9; 32]).public());
                let known = if b == B::Honest { &log } else { &other };
                run_b.add_log(&origin, &known.vkey())?;
                run_b.policy_line("b")
            }
            B::Down => {
                let port = ra_ledger_tests::process::free_port()?;
                let key = NoteKey {
                    name: "witness-b.test/down".into(),
                    algorithm: ra_ledger::tlog::note::ALG_COSIGNATURE_V1,
                    public: DigestKey::from_seed(&[3; 32]).public(),
                };
                format!("witness b {} http://127.0.0.1:{port}", key.vkey())
            }
        };
        let policy = Arc::new(Policy::parse(&format!(
            "log {}\n{}\n{b_line}\ngroup both all a b\nquorum both\n",
            log.vkey(),
            a.policy_line("a"),
        ))?);
        let api = TestApi::with_witnessing(
            &database,
            Witnessing {
                policy: Arc::clone(&policy),
                short_after,
            },
        )?;
        api.contact("TX", "Office").await;
        Ok(Self {
            database,
            api,
            key,
            cache: TreeCache::with_origin(&origin),
            origin,
            policy,
            http: cosign::client(Duration::from_secs(5)),
        })
    }

    /// `count` assignments, a digest sealed, and a cosigning round.
    async fn assign_seal_and_cosign(&self, count: usize) -> anyhow::Result<Round> {
        for _ in 0..count {
            self.api.assign(Uuid::now_v7()).await;
        }
        let built = build_cached(self.api.ledger.pool(), &self.key, &self.cache).await?;
        anyhow::ensure!(matches!(built, Built::Sealed { .. }), "{built:?}");
        self.round().await
    }

    async fn round(&self) -> anyhow::Result<Round> {
        Ok(cosign::round(
            self.api.ledger.pool(),
            &self.policy,
            &self.cache,
            &self.http,
        )
        .await?
        .expect("a checkpoint"))
    }

    /// `GET /status`: its status, and every finding (the deciding one first) as (state,
    /// runbook, reason).
    async fn verdict(&self) -> (StatusCode, Vec<(String, String, String)>) {
        // The operator's verdict: anyone's names no witness's answer, and is read at most
        // once a second (issue 57, item 1).
        let reply = self
            .api
            .call(
                axum::http::Method::GET,
                "/status",
                Some(ra_ledger_tests::api::OPERATOR),
                None,
            )
            .await;
        let body = &reply.body;
        let mut findings = vec![(
            body["state"].as_str().unwrap_or_default().to_owned(),
            body["runbook"].as_str().unwrap_or_default().to_owned(),
            body["reason"].as_str().unwrap_or_default().to_owned(),
        )];
        for also in body["also"].as_array().into_iter().flatten() {
            findings.push((
                also["state"].as_str().unwrap_or_default().to_owned(),
                also["runbook"].as_str().unwrap_or_default().to_owned(),
                also["reason"].as_str().unwrap_or_default().to_owned(),
            ));
        }
        (reply.status, findings)
    }
}

/// The finding of `runbook` among `findings`: (state, reason).
fn finding(findings: &[(String, String, String)], runbook: &str) -> Option<(String, String)> {
    findings
        .iter()
        .find(|(_, found, _)| found == runbook)
        .map(|(state, _, reason)| (state.clone(), reason.clone()))
}

fn outcomes(round: &Round) -> Vec<Outcome> {
    round.witnesses.iter().map(|w| w.outcome).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_witness_fails_the_verdict_and_the_console_shows_each_witness()
-> anyhow::Result<()> {
    let watched = Watched::new(B::OtherKey, Duration::from_secs(3600)).await?;
    let (_, before) = watched.verdict().await;
    assert_eq!(
        finding(&before, "docs/operators.md#rawitnessrefused"),
        None,
        "{before:?}"
    );
    let round = watched.assign_seal_and_cosign(2).await?;
    assert_eq!(
        outcomes(&round),
        [Outcome::Cosigned, Outcome::Refused],
        "{:?}",
        round.witnesses
    );
    let reason = round.witnesses[1].reason.clone().unwrap_or_default();
    let (status, findings) = watched.verdict().await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let (state, said) =
        finding(&findings, "docs/operators.md#rawitnessrefused").expect("the refusal's finding");
    assert_eq!(state, "failing");
    assert_eq!(
        said,
        format!(
            "witness b refused the checkpoint of digest {} ({reason}): the log may not be what it cosigned before; it is not sent that checkpoint again",
            round.digest_seq
        )
    );

    // The operations page: the quorum, short, and each witness's last answer.
    let base = format!("http://{}", watched.api.serve().await?);
    let cookie = crate::console::session_cookie(&base, OPERATOR).await;
    let page = crate::console::http()
        .get(format!("{base}/operations"))
        .header(reqwest::header::COOKIE, cookie)
        .send()
        .await?
        .text()
        .await?;
    assert!(page.contains("id=\"witness-states\""), "{page}");
    assert!(
        page.contains("data-witness=\"a\" data-outcome=\"cosigned\""),
        "{page}"
    );
    assert!(
        page.contains("data-witness=\"b\" data-outcome=\"refused\""),
        "{page}"
    );
    assert!(page.contains("SHORT of the quorum"), "{page}");
    Ok(())
}

#[tokio::test]
async fn a_quorum_short_past_a_few_intervals_degrades_the_verdict() -> anyhow::Result<()> {
    // Witness b is down; the quorum rule speaks once the checkpoint waited longer than
    // short_after (zero here).
    let watched = Watched::new(B::Down, Duration::ZERO).await?;
    let round = watched.assign_seal_and_cosign(1).await?;
    assert_eq!(outcomes(&round), [Outcome::Cosigned, Outcome::Unavailable]);
    let (_, findings) = watched.verdict().await;
    let (state, said) = finding(&findings, "docs/operators.md#racheckpointshortofquorum")
        .expect("the quorum's finding");
    assert_eq!(state, "degraded");
    assert!(
        said.starts_with("the transparency log has been short of its witness quorum")
            && said.ends_with(&format!(
                "(newest checkpoint: digest {}, cosigned by a)",
                round.digest_seq
            )),
        "{said}"
    );
    // Within a few intervals, no finding: a checkpoint waits a round for its cosignatures.
    let patient = TestApi::with_witnessing(
        &watched.database,
        Witnessing {
            policy: Arc::clone(&watched.policy),
            short_after: Duration::from_secs(3600),
        },
    )?;
    let reply = patient.get("/status").await;
    assert!(
        !reply.text.contains("racheckpointshortofquorum"),
        "{}",
        reply.text
    );
    Ok(())
}

/// Sets what `witness` holds of `origin` back to `checkpoint`, as a restore of its database
/// from an older copy does.
fn restore(witness: &WitnessServer, origin: &str, checkpoint: &Checkpoint) -> anyhow::Result<()> {
    let output = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys\n\
             db = sqlite3.connect(sys.argv[1], timeout=30)\n\
             db.execute('UPDATE log SET tree_size = ?, tree_hash = ? WHERE origin = ?', \
             (int(sys.argv[2]), sys.argv[3], sys.argv[4]))\n\
             db.commit()\n\
             assert db.total_changes == 1, db.total_changes\n",
        )
        .arg(&witness.db)
        .arg(checkpoint.size.to_string())
        .arg(base64::engine::general_purpose::STANDARD.encode(checkpoint.root))
        .arg(origin)
        .output()?;
    anyhow::ensure!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

#[tokio::test]
async fn a_witness_holding_less_than_it_cosigned_lost_its_state() -> anyhow::Result<()> {
    let watched = Watched::new(B::Honest, Duration::from_secs(3600)).await?;
    let first = watched.assign_seal_and_cosign(3).await?;
    assert!(first.quorum, "{:?}", first.witnesses);
    let second = watched.assign_seal_and_cosign(2).await?;
    assert!(second.quorum, "{:?}", second.witnesses);
    // Witness b's database is restored from a copy taken at the first checkpoint.
    let [_, b] = witnesses();
    restore(
        b,
        &watched.origin,
        &Checkpoint::parse(&first.cosigned.body)?,
    )?;
    let third = watched.assign_seal_and_cosign(1).await?;
    assert_eq!(
        outcomes(&third),
        [Outcome::Cosigned, Outcome::LostState],
        "{:?}",
        third.witnesses
    );
    assert!(!third.quorum);
    let lost = &third.witnesses[1];
    assert_eq!(
        lost.reason.as_deref(),
        Some(
            format!(
                "the witness holds size {}, smaller than the {} it held before: it lost its \
                 state or was restored from a backup, and no longer tells a fork from this log",
                first.size, second.size
            )
            .as_str()
        )
    );
    // Remembered at the larger size: not sent again, and the next checkpoint finds it
    // behind again.
    assert_eq!(lost.size, second.size);
    let again = watched.round().await?;
    assert_eq!(outcomes(&again), outcomes(&third));
    let fourth = watched.assign_seal_and_cosign(1).await?;
    assert_eq!(fourth.witnesses[1].outcome, Outcome::LostState);
    let (_, findings) = watched.verdict().await;
    let (state, said) = finding(&findings, "docs/operators.md#rawitnessloststate")
        .expect("the lost state's finding");
    assert_eq!(state, "degraded");
    assert!(said.starts_with("witness b lost its state"), "{said}");
    Ok(())
}

#[tokio::test]
async fn one_cosigner_at_a_time() -> anyhow::Result<()> {
    let watched = Watched::new(B::Honest, Duration::from_secs(3600)).await?;
    // Another replica holds the lock: this round reads and sends nothing.
    let replica = watched.database.connect().await?;
    replica
        .execute("SELECT pg_advisory_lock($1)", &[&COSIGN_LOCK_KEY])
        .await?;
    let standing_by = watched.assign_seal_and_cosign(2).await?;
    assert!(!standing_by.cosigner);
    assert_eq!(
        outcomes(&standing_by),
        [Outcome::Unavailable, Outcome::Unavailable]
    );
    let client = watched.database.connect().await?;
    let sent: i64 = client
        .query_one("SELECT count(*) FROM witness_state", &[])
        .await?
        .get(0);
    assert_eq!(sent, 0, "nothing sent while another replica holds the lock");
    replica
        .execute("SELECT pg_advisory_unlock($1)", &[&COSIGN_LOCK_KEY])
        .await?;
    let cosigned = watched.round().await?;
    assert!(cosigned.cosigner && cosigned.quorum, "{cosigned:?}");

    // Two replicas' rounds racing, each on its own pool (connected before, so neither starts
    // late by a connection): whichever takes the lock sends, the other reads what it
    // stored; never a refusal. Whether they overlap is the scheduler's choice: when the
    // first ended before the second asked, both held the lock in turn, and the second
    // counted the stored cosignatures (the same checkpoint, the same cosigners).
    let other = ra_ledger::db::pool(&watched.database.url, "ledger-witness-b", 1)?;
    drop(other.get().await?);
    for _ in 0..3 {
        for _ in 0..2 {
            watched.api.assign(Uuid::now_v7()).await;
        }
        build_cached(watched.api.ledger.pool(), &watched.key, &watched.cache).await?;
        let (one, two) = tokio::join!(
            cosign::round(
                watched.api.ledger.pool(),
                &watched.policy,
                &watched.cache,
                &watched.http
            ),
            cosign::round(&other, &watched.policy, &watched.cache, &watched.http),
        );
        let (one, two) = (one?.expect("a checkpoint"), two?.expect("a checkpoint"));
        assert!(
            one.cosigner || two.cosigner,
            "one of two racing rounds sends"
        );
        assert_eq!(
            (one.digest_seq, one.size),
            (two.digest_seq, two.size),
            "both rounds are about the newest checkpoint"
        );
        if one.cosigner && two.cosigner {
            // One after the other: the second sent nothing new and counts what is stored.
            assert_eq!(one.cosigners, two.cosigners, "{one:?}\n{two:?}");
            assert!(one.quorum && two.quorum, "{one:?}\n{two:?}");
        }
        for round in [&one, &two] {
            assert!(
                !outcomes(round).iter().any(|o| o.is_alarm()),
                "{:?}",
                round.witnesses
            );
        }
        let sender = if one.cosigner { &one } else { &two };
        assert!(sender.quorum, "{:?}", sender.witnesses);
    }
    Ok(())
}
