//! Replays (`ledger replay`, `POST /v1/replays`): a team that joins after the live topic
//! lost its early part bootstraps from a replay while writes go on, and ends with every
//! event applied once and the ledger's answers; a replay killed with SIGKILL three times
//! resumes from its checkpoint each time with nothing missing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use ra_ledger::domain::Jurisdiction;
use ra_ledger_cdc::consumer::example::{self, ExampleArgs, ExampleCounts};
use ra_ledger_cdc::replay::{self as contract, CompletionMarker, Delivery};
use ra_ledger_tests::api::TestApi;
use ra_ledger_tests::relay::{self, RunningRelay};
use ra_ledger_tests::worker::{self, RunningWorker};
use ra_ledger_tests::{TestDatabase, TestTopics};
use rdkafka::Message as _;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Headers as _;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Appends about 500 events per second until `stop`, in ticks of 100 ms: 45 new
/// assignments in one transaction through the real write path (events, outbox rows,
/// projections), then an assignment, an end or a replace through the API.
async fn write_at_500_per_second(
    api: Arc<TestApi>,
    pool: deadpool_postgres::Pool,
    contact: Uuid,
    stop: Arc<AtomicBool>,
) {
    let texas = Jurisdiction::parse("jurisdiction", "TX").expect("TX");
    let mut next = Instant::now();
    let mut open: Vec<String> = Vec::new();
    let mut step = 0u64;
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep_until(next.into()).await;
        next += Duration::from_millis(100);
        ra_ledger_testing::seed_assignments(&pool, texas, contact, 45, 45, |_| {})
            .await
            .expect("a batch of assignments");
        for _ in 0..2 {
            step += 1;
            let reply = match (step % 3, open.pop()) {
                (1, Some(id)) => {
                    api.post(&format!("/v1/assignments/{id}/end"), json!({}))
                        .await
                }
                (2, Some(id)) => {
                    let reply = api
                        .post(&format!("/v1/assignments/{id}/replace"), json!({}))
                        .await;
                    open.push(reply.str("assignment_id"));
                    reply
                }
                (_, popped) => {
                    open.extend(popped);
                    let reply = api
                        .post(
                            "/v1/assignments",
                            json!({"business_id": Uuid::now_v7(), "jurisdiction": "TX"}),
                        )
                        .await;
                    open.push(reply.str("assignment_id"));
                    reply
                }
            };
            assert!(
                reply.status.is_success(),
                "{} {:?}",
                reply.status,
                reply.body
            );
        }
    }
}

/// Events in the ledger.
async fn event_count(database: &TestDatabase) -> anyhow::Result<i64> {
    Ok(database
        .connect()
        .await?
        .query_one("SELECT count(*) FROM events", &[])
        .await?
        .get(0))
}

/// Creates a contact in TX and `count` assignments to it through the real write path, then
/// ends and replaces a few of them through the API: a past of every assignment event type.
async fn seed_past(database: &TestDatabase, api: &TestApi, count: usize) -> anyhow::Result<Uuid> {
    let contact: Uuid = api.contact("TX", "Agent of the past").await.parse()?;
    let pool = ra_ledger::db::pool(&database.url, "seed", 1)?;
    let texas = Jurisdiction::parse("jurisdiction", "TX")?;
    ra_ledger_testing::seed_assignments(&pool, texas, contact, count, 1_000, |_| {}).await?;
    let client = database.connect().await?;
    let some: Vec<Uuid> = client
        .query(
            "SELECT assignment_id FROM assignments ORDER BY assignment_id LIMIT 300",
            &[],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    for (n, id) in some.iter().enumerate() {
        let action = if n % 2 == 0 { "end" } else { "replace" };
        let reply = api
            .post(&format!("/v1/assignments/{id}/{action}"), json!({}))
            .await;
        assert!(
            reply.status.is_success(),
            "{} {:?}",
            reply.status,
            reply.body
        );
    }
    Ok(contact)
}

/// The ids of every assignment event in the ledger.
async fn assignment_event_ids(database: &TestDatabase) -> anyhow::Result<HashSet<String>> {
    Ok(database
        .connect()
        .await?
        .query(
            "SELECT event_id::text FROM events WHERE stream LIKE 'assignment-%'",
            &[],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect())
}

/// Asks for a replay of the assignments under `topic_prefix` at `rate`, as an operator does.
async fn request_replay(api: &TestApi, topic_prefix: &str, rate: u32) -> anyhow::Result<Uuid> {
    let reply = api
        .operate(
            "/v1/replays",
            json!({"aggregate_types": ["assignment"], "topic_prefix": topic_prefix, "rate": rate}),
        )
        .await;
    reply.expect(StatusCode::ACCEPTED);
    assert_eq!(reply.str("status"), "requested");
    Ok(reply.str("replay_id").parse()?)
}

/// Polls the replay until `done` or `timeout`.
async fn wait_for_replay(
    database: &TestDatabase,
    id: Uuid,
    timeout: Duration,
    done: impl Fn(&ra_ledger::replay::ReplayStatus) -> bool,
) -> anyhow::Result<ra_ledger::replay::ReplayStatus> {
    let pool = ra_ledger::db::pool(&database.url, "wait-for-replay", 1)?;
    let client = pool.get().await?;
    let deadline = Instant::now() + timeout;
    loop {
        let status = ra_ledger::replay::status(&client, id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("no replay {id}"))?;
        if done(&status) {
            return Ok(status);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "replay {id} did not get there within {timeout:?}: {status:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One message of a replay topic.
#[derive(Debug)]
struct Replayed {
    partition: i32,
    key: String,
    event_id: String,
    stream_version: i64,
}

/// Reads a replay topic from the beginning until every partition delivered its marker.
async fn read_replay_topic(
    topics: &TestTopics,
    replay_id: Uuid,
    topic: &str,
) -> anyhow::Result<(Vec<Replayed>, CompletionMarker)> {
    let consumer: StreamConsumer = topics
        .client_config()
        .set("group.id", format!("reader-{}", Uuid::now_v7()))
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .create()?;
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let partitions: Vec<i32> = metadata.topics()[0]
        .partitions()
        .iter()
        .map(|p| p.id())
        .collect();
    let mut bootstrap = contract::Bootstrap::new(&replay_id.to_string(), topic, partitions);
    consumer.assign(&bootstrap.replay_assignment()?)?;
    let mut replayed = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while bootstrap.complete().is_none() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "markers missing on {:?} after {} messages",
            bootstrap.waiting(),
            replayed.len()
        );
        let Ok(message) = tokio::time::timeout(Duration::from_secs(1), consumer.recv()).await
        else {
            continue;
        };
        let message = message?;
        match contract::classify(&message)? {
            Delivery::Marker(marker) => bootstrap.marker_seen(message.partition(), marker)?,
            Delivery::Event(_) => {
                let header = |name: &str| {
                    message
                        .headers()
                        .and_then(|headers| {
                            headers.iter().find(|h| h.key == name).and_then(|h| h.value)
                        })
                        .map(|value| String::from_utf8_lossy(value).into_owned())
                        .unwrap_or_default()
                };
                assert_eq!(header("replay_id"), replay_id.to_string());
                replayed.push(Replayed {
                    partition: message.partition(),
                    key: String::from_utf8_lossy(message.key().unwrap_or_default()).into(),
                    event_id: header("id"),
                    stream_version: ra_ledger_cdc::consumer::decode(
                        message.payload().unwrap_or_default(),
                    )?
                    .stream_version,
                });
            }
        }
    }
    let marker = bootstrap.complete().cloned().expect("complete");
    Ok((replayed, marker))
}

/// Per key, the first delivery of each event comes in stream-version order from 1 with no
/// hole (a resumed batch may repeat versions after that), and a key stays on one partition.
fn check_key_order(replayed: &[Replayed]) {
    let mut next: HashMap<&str, (i64, i32)> = HashMap::new();
    for message in replayed {
        let (expected, partition) = next.entry(&message.key).or_insert((1, message.partition));
        assert_eq!(*partition, message.partition, "key {} moved", message.key);
        if message.stream_version == *expected {
            *expected += 1;
        } else {
            assert!(
                message.stream_version < *expected,
                "key {}: version {} before {}",
                message.key,
                message.stream_version,
                expected
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_joiner_bootstraps_from_a_replay_while_writes_go_on() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = Arc::new(TestApi::new(&database)?);
    // 100,000 events before the relay's slot exists: the live topic never holds them, as a
    // topic whose early part retention deleted.
    let contact = seed_past(&database, &api, 99_500).await?;
    let past_events = assignment_event_ids(&database).await?.len();
    assert!(past_events >= 99_800, "{past_events}");

    let mut topics = TestTopics::new();
    let mut relay_config = relay::test_config(&database, &mut topics).await?;
    // Larger relay batches (about 50 events at this rate instead of one or two) mean fewer
    // records and fetches for the broker, which shares the machine's two cores with
    // everything else in this test.
    relay_config.kafka.insert("linger.ms".into(), "100".into());
    let relay = RunningRelay::start(relay_config.clone());

    // Writes at about 500 per second from here to the end.
    let stop = Arc::new(AtomicBool::new(false));
    let writing = (Instant::now(), event_count(&database).await?);
    let writer = tokio::spawn(write_at_500_per_second(
        Arc::clone(&api),
        ra_ledger::db::pool(&database.url, "writer", 1)?,
        contact,
        Arc::clone(&stop),
    ));
    tokio::time::sleep(Duration::from_secs(3)).await;

    // An operator asks for the replay; the worker runs it.
    let replay_id = request_replay(&api, &relay_config.topic_prefix, 20_000).await?;
    let worker = RunningWorker::start(worker::test_config(&database, &topics));

    // The new team bootstraps, in its own database.
    let team = TestDatabase::unmigrated().await?;
    let counts = Arc::new(ExampleCounts::default());
    let shutdown = CancellationToken::new();
    let live_topic = format!("{}assignment", relay_config.topic_prefix);
    let mut args = ExampleArgs::new(&team.url);
    args.brokers = topics.brokers.clone();
    args.topic_prefix = relay_config.topic_prefix.clone();
    args.group = format!("late-team-{}", Uuid::now_v7());
    args.bootstrap = Some(replay_id.to_string());
    args.kafka = topics.client.clone();
    let consumer = tokio::spawn(example::run(args, Arc::clone(&counts), shutdown.clone()));
    let started = Instant::now();
    while !counts.live.load(Ordering::Relaxed) {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(400),
            "the bootstrap did not reach the live topic: {counts}"
        );
        anyhow::ensure!(!consumer.is_finished(), "the consumer stopped: {counts}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let status = wait_for_replay(&database, replay_id, Duration::from_secs(10), |s| {
        s.status == ra_ledger::replay::ReplayState::Complete
    })
    .await?;
    eprintln!(
        "replay {replay_id}: {} events in the past, published {}, bootstrap took {:.1} s ({counts}); handoff {:?}",
        status.total_events.unwrap_or_default(),
        status.published,
        started.elapsed().as_secs_f64(),
        status.targets[0].handoff
    );
    // A few more seconds of live writes after the handoff, then quiet.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    writer.await?;
    let written = event_count(&database).await? - writing.1;
    eprintln!(
        "{written} events written in {:.1} s ({:.0}/s) while the team bootstrapped",
        writing.0.elapsed().as_secs_f64(),
        written as f64 / writing.0.elapsed().as_secs_f64()
    );

    // The team ends with every assignment event of the ledger, each applied once.
    let expected = assignment_event_ids(&database).await?;
    let team_client = team.connect().await?;
    let catching_up = Instant::now();
    let deadline = catching_up + Duration::from_secs(120);
    let applied: HashSet<String> = loop {
        let applied: HashSet<String> = team_client
            .query(
                "SELECT event_id FROM ledger_inbox WHERE consumer = $1",
                &[&example::CONSUMER],
            )
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        if applied.len() >= expected.len() || Instant::now() > deadline {
            break applied;
        }

        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    eprintln!(
        "caught up with the live topic {:.1} s after the writes stopped",
        catching_up.elapsed().as_secs_f64()
    );
    shutdown.cancel();
    consumer.await??;
    worker.stop().await?;
    relay.stop().await?;
    let missing: Vec<&String> = expected.difference(&applied).take(5).collect();
    let extra: Vec<&String> = applied.difference(&expected).take(5).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{} missing (e.g. {missing:?}), {} not in the ledger (e.g. {extra:?})",
        expected.difference(&applied).count(),
        applied.difference(&expected).count()
    );
    // Applied once each: one inbox row per event, and the handler ran exactly that often.
    assert_eq!(
        counts.applied.load(Ordering::Relaxed) as usize,
        expected.len()
    );
    eprintln!(
        "{} events applied once each ({} past, {written} written meanwhile); {} duplicates absorbed",
        expected.len(),
        past_events,
        counts.duplicates.load(Ordering::Relaxed)
    );

    // The team's fold is the ledger's answer: its current RA of every business equals the
    // projection's, and the as-of API agrees for a sample.
    let team_rows: BTreeMap<String, String> = team_client
        .query(
            "SELECT business_id, assignment_id FROM example_current_ra",
            &[],
        )
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let ledger_rows: BTreeMap<String, String> = database
        .connect()
        .await?
        .query(
            "SELECT business_id::text, assignment_id::text FROM assignments WHERE ended_at IS NULL",
            &[],
        )
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(team_rows.len(), ledger_rows.len());
    assert!(team_rows == ledger_rows, "the team's current RAs differ");
    let businesses: Vec<String> = database
        .connect()
        .await?
        .query(
            "SELECT DISTINCT business_id::text FROM assignments ORDER BY 1 DESC LIMIT 150",
            &[],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .chain(
            // Ended and replaced ones of the past, too.
            database
                .connect()
                .await?
                .query(
                    "SELECT business_id::text FROM assignments WHERE ended_at IS NOT NULL LIMIT 50",
                    &[],
                )
                .await?
                .iter()
                .map(|row| row.get(0)),
        )
        .collect();
    for business in &businesses {
        let answer = api
            .get(&format!(
                "/v1/businesses/{business}/jurisdictions/TX/registered-agent"
            ))
            .await;
        let ledger = match answer.status {
            StatusCode::OK => answer.body["assignment"]["assignment_id"]
                .as_str()
                .map(str::to_owned),
            StatusCode::NOT_FOUND => None,
            other => panic!("{other}: {:?}", answer.body),
        };
        assert_eq!(
            team_rows.get(business),
            ledger.as_ref(),
            "business {business}"
        );
    }

    // What the replay topic holds: the past, once per key in version order, and the marker
    // with the handoff the team used.
    let replay_topic = contract::replay_topic(
        contract::DEFAULT_TARGET,
        &live_topic,
        &replay_id.to_string(),
    );
    let (replayed, marker) = read_replay_topic(&topics, replay_id, &replay_topic).await?;
    let distinct: HashSet<&str> = replayed.iter().map(|r| r.event_id.as_str()).collect();
    assert_eq!(
        distinct.len() as i64,
        status.total_events.unwrap_or_default()
    );
    assert!(distinct.len() >= past_events);
    assert_eq!(marker.live_topic, live_topic);
    assert_eq!(Some(&marker.handoff), status.targets[0].handoff.as_ref());
    check_key_order(&replayed);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_killed_three_times_resumes_from_its_checkpoint() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    seed_past(&database, &api, 24_000).await?;
    let expected = assignment_event_ids(&database).await?;
    let mut topics = TestTopics::new();
    // The live topics (no relay needed: their end offsets are 0).
    let relay_config = relay::test_config(&database, &mut topics).await?;
    let replay_id = request_replay(&api, &relay_config.topic_prefix, 3_000).await?;
    let config = worker::test_config(&database, &topics);
    let binary = env!("CARGO_BIN_EXE_worker-under-test");
    for (kill, at) in [5_000i64, 11_000, 17_000].into_iter().enumerate() {
        let mut process = worker::spawn(binary, &config)?;
        let status = wait_for_replay(&database, replay_id, Duration::from_secs(120), |s| {
            s.published >= at
        })
        .await?;
        process.kill()?;
        process.wait()?;
        eprintln!(
            "kill {}: SIGKILL at {} published, checkpoint {}",
            kill + 1,
            status.published,
            status.checkpoint
        );
    }
    let mut process = worker::spawn(binary, &config)?;
    let status = wait_for_replay(&database, replay_id, Duration::from_secs(120), |s| {
        s.status == ra_ledger::replay::ReplayState::Complete
    })
    .await?;
    process.kill()?;
    process.wait()?;
    assert_eq!(status.attempts, 4, "{status:#?}");
    let live_topic = format!("{}assignment", relay_config.topic_prefix);
    let replay_topic = contract::replay_topic(
        contract::DEFAULT_TARGET,
        &live_topic,
        &replay_id.to_string(),
    );
    let (replayed, marker) = read_replay_topic(&topics, replay_id, &replay_topic).await?;
    let distinct: HashSet<String> = replayed.iter().map(|r| r.event_id.clone()).collect();
    let missing = expected.difference(&distinct).count();
    assert_eq!(missing, 0, "{missing} events missing from the replay topic");
    assert_eq!(distinct.len(), expected.len());
    eprintln!(
        "{} events on the replay topic, {} distinct, {} duplicates after 3 kills",
        replayed.len(),
        distinct.len(),
        replayed.len() - distinct.len()
    );
    assert_eq!(marker.events as usize, expected.len());
    assert!(
        marker.handoff.values().all(|offset| *offset == 0),
        "{marker:?}"
    );
    check_key_order(&replayed);
    Ok(())
}

#[tokio::test]
async fn replay_requests_refuse_bad_input_and_write_nothing() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let cases = [
        (json!({"aggregate_types": []}), "aggregate_types"),
        (json!({"aggregate_types": ["digest"]}), "aggregate_types"),
        (json!({"aggregate_types": "assignment"}), ""),
        (json!({"event_types": ["Nope"]}), "event_types"),
        (json!({"stream_prefix": ""}), "stream_prefix"),
        (
            json!({"recorded_from": "2026-02-01T00:00:00Z", "recorded_to": "2026-01-01T00:00:00Z"}),
            "recorded_to",
        ),
        (json!({"recorded_from": "yesterday"}), ""),
        (json!({"rate": 0}), "rate"),
        (json!({"rate": -5}), ""),
        (json!({"rate": 10_000_000}), "rate"),
        // Issue 35, item 8: the cap is the fastest rate measured beside the live load.
        (
            json!({"rate": 20_001}),
            "between 1 and 20000 events per second",
        ),
        (
            json!({"rate": 1_000_000}),
            "between 1 and 20000 events per second",
        ),
        (json!({"topic_prefix": "no spaces"}), "topic_prefix"),
        (json!({"target": "{live}.mine"}), "target"),
        (
            json!({"target": format!("{}{{id}}", "x".repeat(300))}),
            "target",
        ),
        (json!({"surprise": 1}), ""),
        (json!([]), ""),
    ];
    for (body, field) in cases {
        let reply = api.operate("/v1/replays", body.clone()).await;
        assert!(
            reply.status == StatusCode::BAD_REQUEST
                || reply.status == StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {} {:?}",
            reply.status,
            reply.body
        );
        let message = reply.body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(field), "{body}: {message}");
    }
    for (uri, status) in [
        ("/v1/replays/not-a-uuid", StatusCode::BAD_REQUEST),
        (
            &*format!("/v1/replays/{}", Uuid::now_v7()),
            StatusCode::NOT_FOUND,
        ),
    ] {
        assert_eq!(api.get(uri).await.status, status, "{uri}");
    }
    // Neither an auditor nor a writer (a customer-service tool) may ask for a replay.
    for token in [ra_ledger_tests::api::AUDITOR, ra_ledger_tests::api::WRITER] {
        let refused = api
            .call(
                axum::http::Method::POST,
                "/v1/replays",
                Some(token),
                Some(json!({})),
            )
            .await;
        refused.expect(StatusCode::FORBIDDEN);
        assert!(
            refused.body["error"]["message"]
                .as_str()
                .is_some_and(|message| message.contains("needs role operator")),
            "{:?}",
            refused.body
        );
    }
    let written: i64 = database
        .connect()
        .await?
        .query_one("SELECT count(*) FROM replays", &[])
        .await?
        .get(0);
    assert_eq!(written, 0);
    // A good one is recorded as requested, and shown.
    let reply = api
        .operate("/v1/replays", json!({"event_types": ["AssignmentStarted"]}))
        .await;
    reply.expect(StatusCode::ACCEPTED);
    let shown = api.get(&reply.str("status_url")).await;
    assert_eq!(shown.status, StatusCode::OK);
    assert_eq!(shown.str("status"), "requested");
    assert_eq!(
        shown.body["targets"].as_array().map(Vec::len),
        Some(2),
        "{:?}",
        shown.body
    );
    Ok(())
}

/// Replays requested or running are bounded: the next is refused with 429 and a message,
/// and writes nothing; one that ends frees its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_beyond_the_bound_are_refused_until_one_ends() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let limit = ra_ledger::replay::MAX_OPEN_REPLAYS;
    let mut accepted = Vec::new();
    for _ in 0..limit {
        let reply = api.operate("/v1/replays", json!({})).await;
        reply.expect(StatusCode::ACCEPTED);
        accepted.push(reply.str("replay_id"));
    }
    let client = database.connect().await?;
    let count = async || -> anyhow::Result<i64> {
        Ok(client
            .query_one("SELECT count(*) FROM replays", &[])
            .await?
            .get(0))
    };
    let refused = api.operate("/v1/replays", json!({})).await;
    refused.expect_error(StatusCode::TOO_MANY_REQUESTS, "too_many_replays");
    let message = refused.body["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains(&format!("at most {limit}")), "{message}");
    assert_eq!(count().await?, limit, "the refused request wrote nothing");
    // Requests at once cannot both take the last place.
    client
        .execute(
            "UPDATE replays SET status = 'failed', error = 'test' WHERE id = $1",
            &[&accepted[0].parse::<Uuid>()?],
        )
        .await?;
    let (first, second) = tokio::join!(
        api.operate("/v1/replays", json!({})),
        api.operate("/v1/replays", json!({}))
    );
    let mut statuses = [first.status, second.status];
    statuses.sort();
    assert_eq!(
        statuses,
        [StatusCode::ACCEPTED, StatusCode::TOO_MANY_REQUESTS],
        "{:?} {:?}",
        first.body,
        second.body
    );
    assert_eq!(count().await?, limit + 1);
    Ok(())
}
