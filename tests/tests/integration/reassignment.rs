//! Supersede and chained-page reassignment runs, through the real relay and broker: the
//! 5,000-row run, redelivery, double clicks, a killed worker, a poison row, and bad input.

use std::collections::HashSet;
use std::time::Duration;

use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use ra_ledger::domain::Jurisdiction;
use ra_ledger::reassign::{self, PageOutcome, RunStatus};
use ra_ledger::worker::WorkerConfig;
use ra_ledger_cdc::consumer;
use ra_ledger_tests::api::{TestApi, contact_body};
use ra_ledger_tests::relay::{Collector, RunningRelay, test_config};
use ra_ledger_tests::runs::{count, lock_waiters, lock_waiters_reach, page_requests};
use ra_ledger_tests::worker::{self, RunningWorker, wait_for_run};
use ra_ledger_tests::{TestDatabase, TestTopics};
use serde_json::json;
use tokio_postgres::Client;
use uuid::Uuid;

const TX: &str = "TX";

/// A database with a primary contact in Texas serving `rows` seeded assignments.
struct Seeded {
    api: TestApi,
    client: Client,
    contact_id: Uuid,
    businesses: Vec<Uuid>,
}

async fn seeded(database: &TestDatabase, rows: usize) -> anyhow::Result<Seeded> {
    Ok(poisoned_then_seeded(database, 0, rows).await?.0)
}

/// Like [`seeded`], after first assigning `poisoned` businesses that take effect four
/// minutes from now (within the clock skew the ledger accepts). Their REPLACE now would
/// reorder their streams' history, which the ledger refuses on every attempt. They have the
/// lowest ids: first in the first pages. Returns them too.
async fn poisoned_then_seeded(
    database: &TestDatabase,
    poisoned: usize,
    rows: usize,
) -> anyhow::Result<(Seeded, Vec<Uuid>)> {
    let api = TestApi::new(database)?;
    let created = api
        .post("/v1/contacts", contact_body(TX, "First Office"))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.body);
    let contact_id: Uuid = created.str("contact_id").parse()?;
    let future = Utc::now() + chrono::Duration::minutes(4);
    let mut poison = Vec::new();
    for _ in 0..poisoned {
        let business = Uuid::now_v7();
        let reply = api
            .post(
                "/v1/assignments",
                json!({"business_id": business, "jurisdiction": TX, "effective_at": future}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:?}", reply.body);
        poison.push(business);
    }
    let businesses = ra_ledger::testing::seed_assignments(
        api.ledger.pool(),
        Jurisdiction::parse("jurisdiction", TX)?,
        contact_id,
        rows,
        1_000,
        |_| {},
    )
    .await?;
    let seeded = Seeded {
        api,
        client: database.connect().await?,
        contact_id,
        businesses,
    };
    Ok((seeded, poison))
}

/// A fresh database and topics, the relay between them, and a worker configuration.
async fn relayed() -> anyhow::Result<(TestDatabase, TestTopics, RunningRelay, WorkerConfig)> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let relay = RunningRelay::start(test_config(&database, &mut topics).await?);
    let config = worker::test_config(&database, &topics);
    Ok((database, topics, relay, config))
}

/// Supersedes `contact_id` over HTTP; returns the run id and the new contact id.
async fn supersede(api: &TestApi, contact_id: Uuid, page_size: u32) -> (Uuid, Uuid) {
    let reply = api
        .post(
            &format!("/v1/contacts/{contact_id}/supersede"),
            json!({
                "name": "Second Office",
                "address": contact_body(TX, "x")["address"],
                "page_size": page_size,
            }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    let run_id: Uuid = reply.str("run_id").parse().expect("a run id");
    assert_eq!(
        reply.str("status_url"),
        format!("/v1/reassignment-runs/{run_id}")
    );
    let new_id = reply.body["new"]["contact_id"]
        .as_str()
        .expect("the new contact")
        .parse()
        .expect("a UUID");
    (run_id, new_id)
}

/// Checks the end state every completed repoint must have: each business one active
/// assignment, on the new contact, the old one ended at the instant the new one started.
async fn assert_all_moved(seeded: &Seeded, old: Uuid, new: Uuid) {
    let client = &seeded.client;
    let rows = seeded.businesses.len() as i64;
    assert_eq!(
        count(
            client,
            "SELECT count(*) FROM assignments WHERE contact_id = $1 AND ended_at IS NULL \
             AND business_id = ANY($2)",
            &[&old, &seeded.businesses]
        )
        .await,
        0,
        "nothing stays on the old contact"
    );
    assert_eq!(
        count(
            client,
            "SELECT count(*) FROM assignments WHERE contact_id = $1 AND ended_at IS NULL \
                        AND business_id = ANY($2)",
            &[&new, &seeded.businesses]
        )
        .await,
        rows,
        "every business is on the new contact"
    );
    assert_eq!(
        count(
            client,
            "SELECT count(*) FROM (SELECT business_id FROM assignments WHERE ended_at IS NULL \
                        GROUP BY business_id, jurisdiction HAVING count(*) > 1) d",
            &[]
        )
        .await,
        0,
        "one active assignment per business"
    );
    assert_eq!(
        count(
            client,
            "SELECT count(*) FROM assignments o JOIN assignments n ON n.assignment_id = o.replaced_by \
             WHERE o.contact_id = $1 AND n.contact_id = $2 AND o.end_reason = 'replaced' \
               AND n.replaces = o.assignment_id AND o.ended_at = n.started_at",
            &[&old, &new]
        )
        .await,
        rows,
        "each old assignment ended when its replacement started"
    );
    assert_eq!(
        count(
            client,
            "SELECT count(*) FROM assignments WHERE contact_id = $1 AND business_id = ANY($2)",
            &[&old, &seeded.businesses]
        )
        .await,
        rows,
        "no old assignment was replaced twice"
    );
}

fn completed(status: &RunStatus) -> bool {
    status.status == reassign::RunState::Completed
}

async fn max_pages_in_flight(client: &Client, run_id: Uuid) -> i64 {
    ra_ledger::testing::max_pages_in_flight(client, run_id)
        .await
        .expect("page intervals")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_assignments_move_in_pages_of_100_through_relay_and_broker()
-> anyhow::Result<()> {
    let (database, topics, relay, config) = relayed().await?;
    // Read while writing: the broker's memory storage is slow to re-read long partitions.
    let mut collector = Collector::new(&topics)?;
    let worker = RunningWorker::start(config.clone());
    let seeded = seeded(&database, 5_000).await?;
    let old = seeded.contact_id;
    let before: DateTime<Utc> = seeded.client.query_one("SELECT now()", &[]).await?.get(0);

    let (run_id, new) = supersede(&seeded.api, old, 100).await;
    // New subscriptions pick up the new contact from the supersede's commit on, while the
    // run is still going.
    let newcomer = Uuid::now_v7();
    let assigned = seeded
        .api
        .post(
            "/v1/assignments",
            json!({"business_id": newcomer, "jurisdiction": TX}),
        )
        .await;
    assert_eq!(assigned.body["contact_id"], json!(new.to_string()));

    let status = wait_for_run(&database, run_id, Duration::from_secs(300), completed).await?;
    println!(
        "5000 rows in pages of 100: {:.1} s, longest page {:.0} ms",
        status.elapsed_seconds, status.longest_page_ms
    );
    assert_eq!(
        (status.replaced, status.skipped, status.failed, status.pages),
        (5_000, 0, 0, 51),
        "{status:#?}"
    );
    assert_eq!((status.total_at_start, status.remaining), (5_000, 0));
    assert_all_moved(&seeded, old, new).await;
    let over_http = seeded
        .api
        .get(&format!("/v1/reassignment-runs/{run_id}"))
        .await;
    assert_eq!(over_http.status, StatusCode::OK);
    assert_eq!(over_http.body["replaced"], json!(5_000));
    assert_eq!(over_http.body["status"], json!("completed"));

    // The pages ran one at a time, in order, each after the previous one's cursor.
    assert_eq!(max_pages_in_flight(&seeded.client, run_id).await, 1);
    let chained = count(
        &seeded.client,
        "SELECT count(*) FROM reassignment_pages p JOIN reassignment_pages q \
           ON q.run_id = p.run_id AND q.page = p.page + 1 \
         WHERE p.run_id = $1 AND q.cursor_from = p.cursor_to AND q.started_at >= p.finished_at",
        &[&run_id],
    )
    .await;
    assert_eq!(chained, 50);

    // Audit answers: before the supersede, the old contact; now, the new one.
    let business = seeded.businesses[1234];
    let then = seeded
        .api
        .get(&format!(
            "/v1/businesses/{business}/jurisdictions/TX/registered-agent?at={}",
            before
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
                .replace('+', "%2B")
        ))
        .await;
    assert_eq!(
        then.body["contact"]["contact_id"],
        json!(old.to_string()),
        "{:?}",
        then.body
    );
    let now = seeded
        .api
        .get(&format!(
            "/v1/businesses/{business}/jurisdictions/TX/registered-agent"
        ))
        .await;
    assert_eq!(now.body["contact"]["contact_id"], json!(new.to_string()));

    // Kafka carries exactly the run's REPLACE events: two per row, once each after dedupe.
    let correlation = status.correlation_id;
    let expected: HashSet<String> = seeded
        .client
        .query(
            "SELECT event_id::text FROM events e JOIN reassignment_runs r ON r.run_id = $1 \
             WHERE e.correlation_id = r.correlation_id \
               AND e.event_type IN ('AssignmentEnded', 'AssignmentStarted')",
            &[&run_id],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(expected.len(), 10_000);
    let arrived = collector
        .until_all(Duration::from_secs(300), &expected)
        .await;
    let run_events: Vec<(String, String)> = collector
        .received
        .iter()
        .filter(|r| r.topic.ends_with(".outbox.event.assignment"))
        .filter_map(|r| consumer::decode(&r.payload).ok())
        .filter(|e| e.correlation_id == correlation.to_string())
        .map(|e| (e.event_id, e.event_type))
        .collect();
    let distinct: HashSet<String> = run_events.iter().map(|(id, _)| id.clone()).collect();
    assert!(arrived, "{} of 10000 run events arrived", distinct.len());
    assert_eq!(distinct, expected, "exactly the expected event ids");
    let ends = run_events
        .iter()
        .filter(|(_, t)| t == "AssignmentEnded")
        .count();
    assert!(ends >= 5_000);

    // Projections rebuilt from the ledger equal the live ones; hash chains intact.
    let mut rebuild_client = ra_ledger::db::pool(&database.url, "rebuild", 1)?
        .get()
        .await?;
    let report = ra_ledger::rebuild::rebuild(&mut rebuild_client, true, |_, _| {}).await?;
    assert!(
        report.differences.iter().all(|(_, n)| *n == 0),
        "{:?}",
        report.differences
    );
    let verified = ra_ledger::verify::verify(&seeded.client, |_| {}).await?;
    assert!(verified.broken.is_none(), "{:?}", verified.broken);

    worker.stop().await?;
    relay.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_page_request_rewrites_nothing_and_forks_nothing() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let seeded = seeded(&database, 250).await?;
    let pool = seeded.api.ledger.pool().clone();
    let (run_id, new) = supersede(&seeded.api, seeded.contact_id, 100).await;
    let first = page_requests(&seeded.client, run_id).await?.remove(0);
    assert_eq!((first.page, first.cursor), (1, None));

    // The same request delivered twice at the same moment: one page, one continuation.
    let (a, b) = tokio::join!(
        reassign::handle(&pool, &first, 3),
        reassign::handle(&pool, &first, 3)
    );
    let outcomes = [a?, b?];
    let processed = outcomes
        .iter()
        .filter(|o| matches!(o, PageOutcome::Processed(_)))
        .count();
    let stale = outcomes
        .iter()
        .filter(|o| matches!(o, PageOutcome::Stale { .. }))
        .count();
    assert_eq!((processed, stale), (1, 1), "{outcomes:?}");
    let requests = page_requests(&seeded.client, run_id).await?;
    assert_eq!(requests.len(), 2, "exactly one continuation");
    let events_after_page = count(&seeded.client, "SELECT count(*) FROM events", &[]).await;

    // Redelivered later (after a crash before the offset commit): dropped, nothing written.
    let again = reassign::handle(&pool, &first, 3).await?;
    assert!(matches!(again, PageOutcome::Stale { .. }), "{again:?}");
    assert_eq!(
        count(&seeded.client, "SELECT count(*) FROM events", &[]).await,
        events_after_page
    );

    // The rest of the chain, each link delivered twice.
    let mut next = requests[1].clone();
    loop {
        let outcome = reassign::handle(&pool, &next, 3).await?;
        let PageOutcome::Processed(report) = outcome else {
            panic!("the current link must be processed: {outcome:?}");
        };
        let duplicate = reassign::handle(&pool, &next, 3).await?;
        assert!(matches!(duplicate, PageOutcome::Stale { .. }));
        if report.completed {
            break;
        }
        next = page_requests(&seeded.client, run_id)
            .await?
            .pop()
            .expect("a next link");
    }
    let requests = page_requests(&seeded.client, run_id).await?;
    assert_eq!(
        requests.iter().map(|r| r.page).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_all_moved(&seeded, seeded.contact_id, new).await;
    let status = wait_for_run(&database, run_id, Duration::ZERO, |_| true).await?;
    // Runs do not get in the way of rebuilding the projections from the ledger.
    let mut rebuild_client = ra_ledger::db::pool(&database.url, "rebuild", 1)?
        .get()
        .await?;
    ra_ledger::rebuild::rebuild(&mut rebuild_client, false, |_, _| {}).await?;
    assert_all_moved(&seeded, seeded.contact_id, new).await;
    assert_eq!(
        (status.replaced, status.pages, status.status.as_str()),
        (250, 3, "completed")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_requests_through_the_broker_are_dropped_by_the_fence() -> anyhow::Result<()> {
    let (database, topics, relay, config) = relayed().await?;
    let worker = RunningWorker::start(config.clone());
    let seeded = seeded(&database, 300).await?;
    let (run_id, new) = supersede(&seeded.api, seeded.contact_id, 100).await;
    wait_for_run(&database, run_id, Duration::from_secs(120), completed).await?;
    let events = count(&seeded.client, "SELECT count(*) FROM events", &[]).await;

    // Publish every page request of the finished run again, as a broker redelivery would.
    let producer: rdkafka::producer::FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &topics.brokers)
        .create()?;
    let payloads = seeded
        .client
        .query(
            "SELECT payload FROM events WHERE stream = $1 AND event_type = 'ReassignmentPageRequested'",
            &[&format!("reassignment-{run_id}")],
        )
        .await?;
    let stale_before = worker.metrics.stale();
    for row in &payloads {
        let payload: &[u8] = row.get(0);
        producer
            .send(
                rdkafka::producer::FutureRecord::to(&config.topic)
                    .key(&run_id.to_string())
                    .payload(payload),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(error, _)| error)?;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while worker.metrics.stale() < stale_before + payloads.len() as u64 {
        assert!(
            std::time::Instant::now() < deadline,
            "duplicates were not all dropped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        count(&seeded.client, "SELECT count(*) FROM events", &[]).await,
        events
    );
    assert_all_moved(&seeded, seeded.contact_id, new).await;
    worker.stop().await?;
    relay.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_clicks_one_after_the_other_and_at_the_same_moment() -> anyhow::Result<()> {
    let (database, _topics, relay, config) = relayed().await?;
    let seeded = seeded(&database, 1_000).await?;
    let old = seeded.contact_id;

    // Two supersede clicks at the same moment: one wins, the other is refused; one run.
    let body = json!({"name": "Second Office", "address": contact_body(TX, "x")["address"], "page_size": 50});
    let uri = format!("/v1/contacts/{old}/supersede");
    let (a, b) = tokio::join!(
        seeded.api.post(&uri, body.clone()),
        seeded.api.post(&uri, body.clone())
    );
    let mut statuses = [a.status, b.status];
    statuses.sort();
    assert_eq!(
        statuses,
        [StatusCode::ACCEPTED, StatusCode::CONFLICT],
        "{a:?} {b:?}"
    );
    let winner = if a.status == StatusCode::ACCEPTED {
        a
    } else {
        b
    };
    let first_run: Uuid = winner.str("run_id").parse()?;
    let new: Uuid = winner.body["new"]["contact_id"]
        .as_str()
        .unwrap_or_default()
        .parse()?;
    assert_eq!(
        count(
            &seeded.client,
            "SELECT count(*) FROM reassignment_runs",
            &[]
        )
        .await,
        1
    );

    // A second run for the same contact started at the same moment as the first one's
    // pages: both chains go at once, on two workers.
    let second = seeded
        .api
        .post(
            &format!("/v1/contacts/{old}/reassignment-runs"),
            json!({"page_size": 50}),
        )
        .await;
    assert_eq!(second.status, StatusCode::ACCEPTED, "{:?}", second.body);
    let second_run: Uuid = second.str("run_id").parse()?;
    let workers = [
        RunningWorker::start(config.clone()),
        RunningWorker::start(config.clone()),
    ];
    // And a third racer driving the second run's first page directly.
    let first_page = page_requests(&seeded.client, second_run).await?.remove(0);
    let _ = reassign::handle(seeded.api.ledger.pool(), &first_page, 3).await;
    let a = wait_for_run(&database, first_run, Duration::from_secs(120), completed).await?;
    let b = wait_for_run(&database, second_run, Duration::from_secs(120), completed).await?;
    assert_eq!(a.replaced + b.replaced, 1_000, "{a:#?}\n{b:#?}");
    assert_eq!(a.failed + b.failed, 0);
    assert_all_moved(&seeded, old, new).await;
    println!(
        "same moment: run 1 replaced {} skipped {}, run 2 replaced {} skipped {}",
        a.replaced, a.skipped, b.replaced, b.skipped
    );

    // One after the other: a third run finds everything done and writes nothing.
    let assignment_events = "SELECT count(*) FROM events WHERE stream LIKE 'assignment-%'";
    let before = count(&seeded.client, assignment_events, &[]).await;
    let third = seeded
        .api
        .post(&format!("/v1/contacts/{old}/reassignment-runs"), json!({}))
        .await;
    assert_eq!(third.status, StatusCode::ACCEPTED, "{:?}", third.body);
    let third_run: Uuid = third.str("run_id").parse()?;
    let c = wait_for_run(&database, third_run, Duration::from_secs(60), completed).await?;
    assert_eq!((c.replaced, c.skipped, c.failed, c.pages), (0, 0, 0, 1));
    assert_eq!(count(&seeded.client, assignment_events, &[]).await, before);
    // And a second supersede of the same contact is refused, naming its successor.
    let again = seeded.api.post(&uri, body).await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert!(
        again.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains(&new.to_string())
    );

    for worker in workers {
        worker.stop().await?;
    }
    relay.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_chain_resumes_from_the_recorded_cursor() -> anyhow::Result<()> {
    let (database, _topics, relay, config) = relayed().await?;
    let binary = env!("CARGO_BIN_EXE_worker-under-test");
    let seeded = seeded(&database, 2_000).await?;
    let (run_id, new) = supersede(&seeded.api, seeded.contact_id, 50).await;
    let mut pages_at_kill = Vec::new();
    for kill in 1..=3u32 {
        let mut process = worker::spawn(binary, &config)?;
        let status = wait_for_run(&database, run_id, Duration::from_secs(120), |s| {
            s.pages >= kill * 8 || completed(s)
        })
        .await?;
        process.kill()?;
        process.wait()?;
        pages_at_kill.push(status.pages);
    }
    // Re-raising the current link by hand (as an operator would) is safe as well.
    reassign::resume(seeded.api.ledger.pool(), run_id).await?;
    let mut process = worker::spawn(binary, &config)?;
    let status = wait_for_run(&database, run_id, Duration::from_secs(180), completed).await?;
    // SIGTERM: the worker stops cleanly.
    ra_ledger_tests::stack::send_signal(process.id(), "TERM")?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(exit) = process.try_wait()? {
            break exit;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the worker ignored SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "SIGTERM exit: {exit:?}");
    println!("killed at pages {pages_at_kill:?}; finished with {status:?}");
    assert!(pages_at_kill[0] < 41, "the first kill landed mid-chain");
    assert_eq!(
        (status.replaced, status.failed, status.pages),
        (2_000, 0, 41)
    );
    assert_all_moved(&seeded, seeded.contact_id, new).await;
    assert_eq!(
        count(
            &seeded.client,
            "SELECT count(DISTINCT page) FROM reassignment_pages WHERE run_id = $1",
            &[&run_id]
        )
        .await,
        41
    );
    assert_eq!(max_pages_in_flight(&seeded.client, run_id).await, 1);
    relay.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_row_in_the_first_page_is_recorded_and_the_chain_moves_past_it()
-> anyhow::Result<()> {
    let (database, _topics, relay, config) = relayed().await?;
    let worker = RunningWorker::start(config.clone());
    let (seeded, poison) = poisoned_then_seeded(&database, 1, 249).await?;
    let (contact_id, poisoned_business) = (seeded.contact_id, poison[0]);
    let (run_id, new) = supersede(&seeded.api, contact_id, 100).await;
    let status = wait_for_run(&database, run_id, Duration::from_secs(120), completed).await?;
    assert_eq!(
        (status.replaced, status.failed, status.pages),
        (249, 1, 3),
        "{status:#?}"
    );
    let failure = &status.failures[0];
    assert_eq!(failure.business_id, poisoned_business);
    assert_eq!(
        failure.attempts, 4,
        "three whole-page attempts and one on its own"
    );
    assert!(
        failure.reason.contains("earlier than the previous event"),
        "{}",
        failure.reason
    );
    assert_all_moved(&seeded, contact_id, new).await;
    assert_eq!(
        count(&seeded.client, "SELECT count(*) FROM assignments WHERE business_id = $1 AND ended_at IS NULL AND contact_id = $2", &[&poisoned_business, &contact_id]).await,
        1,
        "the poison row stays where it was"
    );
    let row_failed = count(
        &seeded.client,
        "SELECT count(*) FROM events WHERE stream = $1 AND event_type = 'ReassignmentRowFailed'",
        &[&format!("reassignment-{run_id}")],
    )
    .await;
    assert_eq!(row_failed, 1);
    let isolated = count(
        &seeded.client,
        "SELECT count(*) FROM reassignment_pages WHERE run_id = $1 AND isolated",
        &[&run_id],
    )
    .await;
    assert_eq!(isolated, 1, "only the poisoned page ran row by row");
    worker.stop().await?;
    relay.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_reassignment_requests_get_clear_errors_and_change_nothing() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let seeded = seeded(&database, 3).await?;
    let old = seeded.contact_id;
    let events = "SELECT count(*) FROM events";
    let before = count(&seeded.client, events, &[]).await;
    let address = contact_body(TX, "x")["address"].clone();
    for (uri, body, status, needle) in [
        (
            format!("/v1/contacts/{old}/supersede"),
            json!({"name": "N", "address": address, "page_size": 0}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "page_size",
        ),
        (
            format!("/v1/contacts/{old}/supersede"),
            json!({"name": "N", "address": address, "page_size": 10_001}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "page_size",
        ),
        (
            format!("/v1/contacts/{old}/reassignment-runs"),
            json!({}),
            StatusCode::CONFLICT,
            "supersede it first",
        ),
        (
            format!("/v1/contacts/{}/reassignment-runs", Uuid::now_v7()),
            json!({}),
            StatusCode::NOT_FOUND,
            "not found",
        ),
        (
            "/v1/contacts/not-a-uuid/reassignment-runs".to_owned(),
            json!({}),
            StatusCode::BAD_REQUEST,
            "not a UUID",
        ),
        (
            format!("/v1/contacts/{old}/reassignment-runs"),
            json!({"page_sise": 5}),
            StatusCode::BAD_REQUEST,
            "page_sise",
        ),
    ] {
        let reply = seeded.api.post(&uri, body).await;
        assert_eq!(reply.status, status, "{uri}: {:?}", reply.body);
        let message = reply.body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{uri}: {message}");
    }
    let missing = seeded
        .api
        .get(&format!("/v1/reassignment-runs/{}", Uuid::now_v7()))
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let garbage = seeded.api.get("/v1/reassignment-runs/nope").await;
    assert_eq!(garbage.status, StatusCode::BAD_REQUEST);
    let unauthenticated = seeded
        .api
        .call(
            axum::http::Method::GET,
            &format!("/v1/reassignment-runs/{}", Uuid::now_v7()),
            None,
            None,
        )
        .await;
    assert_eq!(unauthenticated.status, StatusCode::UNAUTHORIZED);
    assert_eq!(count(&seeded.client, events, &[]).await, before);
    assert_eq!(
        count(
            &seeded.client,
            "SELECT count(*) FROM reassignment_runs",
            &[]
        )
        .await,
        0
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_racing_for_the_same_rows_skip_cleanly() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let seeded = seeded(&database, 100).await?;
    let pool = seeded.api.ledger.pool().clone();
    let old = seeded.contact_id;
    let (first_run, new) = supersede(&seeded.api, old, 100).await;
    let second = seeded
        .api
        .post(
            &format!("/v1/contacts/{old}/reassignment-runs"),
            json!({"page_size": 100}),
        )
        .await;
    let second_run: Uuid = second.str("run_id").parse()?;
    let first = page_requests(&seeded.client, first_run).await?.remove(0);
    let second = page_requests(&seeded.client, second_run).await?.remove(0);

    // Hold the first row so both pages read the same candidates and queue on its lock.
    let mut blocker = database.connect().await?;
    let hold = blocker.transaction().await?;
    hold.execute(
        "SELECT 1 FROM assignments WHERE contact_id = $1 AND ended_at IS NULL \
         ORDER BY assignment_id LIMIT 1 FOR UPDATE",
        &[&old],
    )
    .await?;
    let a = tokio::spawn({
        let pool = pool.clone();
        async move { reassign::handle(&pool, &first, 3).await }
    });
    lock_waiters_reach(&seeded.client, 1, "the first page queues on the row lock").await;
    let b = tokio::spawn({
        let pool = pool.clone();
        async move { reassign::handle(&pool, &second, 3).await }
    });
    lock_waiters_reach(&seeded.client, 2, "the second page queues behind it").await;
    hold.rollback().await?;
    let reports: Vec<(usize, usize)> = [a.await??, b.await??]
        .into_iter()
        .map(|outcome| match outcome {
            PageOutcome::Processed(report) => (report.replaced, report.skipped),
            other => panic!("both pages must run: {other:?}"),
        })
        .collect();
    assert_eq!(
        reports,
        vec![(100, 0), (0, 100)],
        "the second found every row finished"
    );
    assert_all_moved(&seeded, old, new).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_poison_rows_than_a_page_cannot_starve_the_rows_behind_them() -> anyhow::Result<()> {
    // The bounded-read starvation case: every row of the first pages fails for good, and a
    // page holds fewer rows than fail. The cursor must still move past them to the rows
    // that can move.
    let (database, _topics, relay, config) = relayed().await?;
    let worker = RunningWorker::start(config.clone());
    let (seeded, poisoned) = poisoned_then_seeded(&database, 12, 8).await?;
    let contact_id = seeded.contact_id;
    let (run_id, new) = supersede(&seeded.api, contact_id, 5).await;
    let status = wait_for_run(&database, run_id, Duration::from_secs(120), completed).await?;
    // Pages: 5 poisoned, 5 poisoned, 2 poisoned + 3 good, 5 good, then the empty short page.
    assert_eq!(
        (status.replaced, status.failed, status.pages),
        (8, 12, 5),
        "{status:#?}"
    );
    let failed: HashSet<Uuid> = status.failures.iter().map(|f| f.business_id).collect();
    assert_eq!(failed, poisoned.into_iter().collect::<HashSet<_>>());
    assert_all_moved(&seeded, contact_id, new).await;
    worker.stop().await?;
    relay.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assign_racing_a_supersede_never_lands_on_the_old_contact_afterwards()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let seeded = seeded(&database, 10).await?;
    let old = seeded.contact_id;
    let texas = Jurisdiction::parse("jurisdiction", TX)?;
    // An assign in flight: it holds the jurisdiction's shared lock, as `assign` does from
    // before it reads the primary contact until it commits.
    let mut in_flight = database.connect().await?;
    let assigning = in_flight.transaction().await?;
    let (class, object) = ra_ledger::queries::primary_contact_lock(texas);
    assigning
        .query_one(
            ra_ledger::queries::SHARE_PRIMARY_CONTACT,
            &[&class, &object],
        )
        .await?;
    // The supersede waits for it...
    let supersede = tokio::spawn({
        let api = seeded.api.clone();
        async move { supersede(&api, old, 100).await }
    });
    lock_waiters_reach(
        &seeded.client,
        1,
        "the supersede waits for the assign in flight",
    )
    .await;
    assert_eq!(lock_waiters(&seeded.client).await, 1);
    assert!(!supersede.is_finished());
    // ...and an assign that arrives meanwhile waits for the supersede, then gets the new
    // contact.
    let late = Uuid::now_v7();
    let assign = tokio::spawn({
        let api = seeded.api.clone();
        async move {
            api.post(
                "/v1/assignments",
                json!({"business_id": late, "jurisdiction": TX}),
            )
            .await
        }
    });
    lock_waiters_reach(
        &seeded.client,
        2,
        "the late assign queues behind the supersede",
    )
    .await;
    assert_eq!(lock_waiters(&seeded.client).await, 2);
    assigning.commit().await?;
    let (_, new) = supersede.await?;
    let assigned = assign.await?;
    assert_eq!(assigned.status, StatusCode::CREATED, "{:?}", assigned.body);
    assert_eq!(assigned.body["contact_id"], json!(new.to_string()));
    Ok(())
}
