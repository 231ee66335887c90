//! The contracts consuming teams build on, checked against the real thing: `docs/asyncapi.yaml`
//! against every record the real relay, a real replay, a digest and a supersede put on
//! Kafka ([`asyncapi`]); a consumer in Python written from the `.proto` and that document
//! alone ([`python_consumer`]); both served by `ledger serve` as the repository holds them
//! ([`served`]).

pub(crate) mod asyncapi;
mod python_consumer;
mod served;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use ra_ledger::digest::DigestKey;
use ra_ledger::digest::build::{Built, build_cached};
use ra_ledger::digest::cosign;
use ra_ledger::digest::log::TreeCache;
use ra_ledger::replay::ReplayState;
use ra_ledger::tlog::note::NoteKey;
use ra_ledger::tlog::policy::Policy;
use ra_ledger_tests::api::{TestApi, contact_body};
use ra_ledger_tests::relay::{RunningRelay, test_config};
use ra_ledger_tests::worker::{self, RunningWorker, wait_for_run};
use ra_ledger_tests::{TestDatabase, TestTopics};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers as _;
use rdkafka::{ClientConfig, Message as _, Offset, TopicPartitionList};
use serde_json::json;
use uuid::Uuid;

use asyncapi::{Contract, Seen};

/// Every record of every topic named `<prefix>.*`, each partition read from the beginning to
/// the end offset it had when the read began.
fn read_every_topic(mut config: ClientConfig, prefix: &str) -> anyhow::Result<Vec<Seen>> {
    let consumer: BaseConsumer = config
        .set("group.id", format!("contract-{}", Uuid::now_v7()))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()?;
    let timeout = Duration::from_secs(10);
    let metadata = consumer.fetch_metadata(None, timeout)?;
    let prefix = format!("{prefix}.");
    let mut assignment = TopicPartitionList::new();
    let mut ends: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for topic in metadata
        .topics()
        .iter()
        .filter(|t| t.name().starts_with(&prefix))
    {
        for partition in topic.partitions() {
            let (low, high) = consumer.fetch_watermarks(topic.name(), partition.id(), timeout)?;
            if high > low {
                assignment.add_partition_offset(topic.name(), partition.id(), Offset::Beginning)?;
                ends.insert((topic.name().to_owned(), partition.id()), high);
            }
        }
    }
    consumer.assign(&assignment)?;
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ends.is_empty() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "partitions {ends:?} not read to their end"
        );
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message?;
        let place = (message.topic().to_owned(), message.partition());
        if ends
            .get(&place)
            .is_some_and(|&end| message.offset() + 1 >= end)
        {
            ends.remove(&place);
        }
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        seen.push(Seen {
            topic: message.topic()[prefix.len()..].to_owned(),
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().map(text),
            headers: message
                .headers()
                .map(|headers| {
                    headers
                        .iter()
                        .map(|h| (h.key.to_owned(), text(h.value.unwrap_or_default())))
                        .collect()
                })
                .unwrap_or_default(),
            payload: message.payload().unwrap_or_default().to_vec(),
        });
    }
    Ok(seen)
}

/// Reads every topic until each of `expected` is on a live topic (the relay runs behind).
async fn read_until_published(
    topics: &TestTopics,
    expected: &HashSet<String>,
) -> anyhow::Result<Vec<Seen>> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (config, prefix) = (topics.client_config(), topics.prefix.clone());
        let seen = tokio::task::spawn_blocking(move || read_every_topic(config, &prefix)).await??;
        let live: HashSet<&str> = seen
            .iter()
            .filter(|s| !s.topic.contains(".replay."))
            .filter_map(|s| s.headers.get("id").map(String::as_str))
            .collect();
        let missing = expected
            .iter()
            .filter(|id| !live.contains(id.as_str()))
            .count();
        if missing == 0 {
            return Ok(seen);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{missing} of {} events not on the live topics",
            expected.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every event id the ledger wrote to its outbox: the events and the digests.
async fn published_ids(database: &TestDatabase) -> anyhow::Result<HashSet<String>> {
    let client = database.connect().await?;
    let rows = client
        .query(
            "SELECT event_id::text FROM events UNION \
             SELECT event_id::text FROM outbox WHERE aggregate_type = 'digest'",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// Waits until replay `id` is complete.
pub(crate) async fn replay_completes(database: &TestDatabase, id: Uuid) -> anyhow::Result<()> {
    let pool = ra_ledger::db::pool(&database.url, "contract-replay", 1)?;
    let client = pool.get().await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = ra_ledger::replay::status(&client, id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("no replay {id}"))?;
        match status.status {
            ReplayState::Complete => return Ok(()),
            ReplayState::Failed => anyhow::bail!("replay {id} failed: {status:?}"),
            _ => {}
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "replay {id} not complete: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// On every partition of a replay topic, the last record is its completion marker.
fn markers_end_every_replay_partition(seen: &[Seen]) {
    let mut last: BTreeMap<(&str, i32), &Seen> = BTreeMap::new();
    for record in seen.iter().filter(|s| s.topic.contains(".replay.")) {
        last.entry((&record.topic, record.partition))
            .and_modify(|before| {
                if record.offset > before.offset {
                    *before = record;
                }
            })
            .or_insert(record);
    }
    assert!(!last.is_empty(), "no replay topic was read");
    for ((topic, partition), record) in last {
        assert_eq!(
            record.headers.get("replay_marker").map(String::as_str),
            Some("complete"),
            "{topic}/{partition} does not end with its marker"
        );
    }
}

// One scenario read top to bottom: every kind of record, then the document checked on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_asyncapi_document_describes_every_record_the_ledger_puts_on_kafka()
-> anyhow::Result<()> {
    let contract = Contract::load()?;
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let relay_config = test_config(&database, &mut topics).await?;
    topics.create("outbox.event.digest").await?;
    let relay = RunningRelay::start(relay_config.clone());
    let worker = RunningWorker::start(worker::test_config(&database, &topics));

    // Contacts and assignments through the API (each request has a trace), one ended.
    let api = TestApi::new(&database)?;
    let contact: Uuid = api.contact("TX", "First Office").await.parse()?;
    let mut assignments = Vec::new();
    for _ in 0..5 {
        assignments.push(api.assign(Uuid::now_v7()).await);
    }
    let ended = api
        .post(
            &format!("/v1/assignments/{}/end", assignments[0]),
            json!({}),
        )
        .await;
    assert!(ended.status.is_success(), "{:?}", ended.body);

    // A supersede: the contact events, a reassignment run of two pages, its REPLACEs.
    let superseded = api
        .post(
            &format!("/v1/contacts/{contact}/supersede"),
            json!({"name": "Second Office", "address": contact_body("TX", "x")["address"], "page_size": 3}),
        )
        .await;
    superseded.expect(StatusCode::ACCEPTED);
    let run_id: Uuid = superseded.str("run_id").parse()?;
    wait_for_run(&database, run_id, Duration::from_secs(120), |status| {
        status.status == ra_ledger::reassign::RunState::Completed
    })
    .await?;

    // A signed digest, and its checkpoint cosigned by the run's two witnesses.
    let key = DigestKey::from_seed(&[29; 32]);
    let origin = format!("ra-ledger.test/{}", ra_ledger_tests::random_suffix());
    let cache = TreeCache::with_origin(&origin);
    let sealed = build_cached(api.ledger.pool(), &key, &cache).await?;
    assert!(matches!(sealed, Built::Sealed { seq: 1, .. }), "{sealed:?}");
    let log = NoteKey::log(&origin, key.public());
    let [a, b] = ra_ledger_tests::witness::witnesses();
    a.add_log(&origin, &log.vkey())?;
    b.add_log(&origin, &log.vkey())?;
    let policy = Policy::parse(&format!(
        "log {}\n{}\n{}\ngroup both all a b\nquorum both\n",
        log.vkey(),
        a.policy_line("a"),
        b.policy_line("b")
    ))?;
    let round = cosign::round(
        api.ledger.pool(),
        &policy,
        &cache,
        &cosign::client(Duration::from_secs(5)),
    )
    .await?
    .expect("a checkpoint");
    assert!(round.quorum, "{round:?}");

    // A replay of every aggregate type a replay can select.
    let reply = api
        .operate(
            "/v1/replays",
            json!({"aggregate_types": ["contact", "assignment", "reassignment"],
                   "topic_prefix": relay_config.topic_prefix, "rate": 20_000}),
        )
        .await;
    reply.expect(StatusCode::ACCEPTED);
    let replay_id: Uuid = reply.str("replay_id").parse()?;
    replay_completes(&database, replay_id).await?;

    let expected = published_ids(&database).await?;
    let seen = read_until_published(&topics, &expected).await?;
    worker.stop().await?;
    relay.stop().await?;

    let mut identified = BTreeSet::new();
    let mut problems = Vec::new();
    for record in &seen {
        match contract.identify(record) {
            Ok(kind) => {
                identified.insert(kind);
            }
            Err(problem) => problems.push(problem),
        }
    }
    problems.extend(contract.unseen(&identified).map_err(anyhow::Error::msg)?);
    eprintln!(
        "{} records on {} topics; kinds seen: {identified:?}",
        seen.len(),
        seen.iter().map(|s| &s.topic).collect::<BTreeSet<_>>().len()
    );
    assert!(
        problems.is_empty(),
        "{} problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
    markers_end_every_replay_partition(&seen);
    Ok(())
}
