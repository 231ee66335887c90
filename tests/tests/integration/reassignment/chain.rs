//! The chain of pages: a large run end to end, redelivered and duplicated requests, a
//! worker killed mid-chain.

use super::*;
use std::time::Instant;

// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
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
    let (database, topics, relay, mut config) = relayed().await?;
    // Every page through Kafka, so every copy meets the fence (a worker that runs the next
    // page at once drops the copies of those pages before: see the test below).
    config.continue_chain = false;
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
async fn a_worker_runs_the_next_page_at_once_and_drops_its_copy_from_kafka() -> anyhow::Result<()> {
    let (database, topics, relay, config) = relayed().await?;
    assert!(config.continue_chain, "the default");
    let worker = RunningWorker::start(config.clone());
    let seeded = seeded(&database, 500).await?;
    let (run_id, new) = supersede(&seeded.api, seeded.contact_id, 100).await;
    let status = wait_for_run(&database, run_id, Duration::from_secs(120), completed).await?;
    assert_eq!((status.replaced, status.pages), (500, 6));
    assert_all_moved(&seeded, seeded.contact_id, new).await;
    // Page 1 came through Kafka; pages 2 to 6 ran straight after the page before, one at a
    // time, and every one of them still published its request.
    assert_eq!(worker.metrics.continued(), 5);
    let requests = page_requests(&seeded.client, run_id).await?;
    assert_eq!(
        requests.iter().map(|r| r.page).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5, 6]
    );
    assert_eq!(
        ra_ledger_testing::max_pages_in_flight(&seeded.client, run_id).await?,
        1,
        "one page at a time"
    );
    // Their copies come back through the relay and Kafka and are dropped here, without a
    // write.
    let events = count(&seeded.client, "SELECT count(*) FROM events", &[]).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while worker.metrics.already_run() < 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "the copies of the pages run at once were not all dropped: {}",
            worker.metrics.already_run()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(worker.metrics.stale(), 0);
    assert_eq!(
        count(&seeded.client, "SELECT count(*) FROM events", &[]).await,
        events
    );
    worker.stop().await?;
    drop((relay, topics));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_time_a_chain_run_at_once_goes_on_through_kafka() -> anyhow::Result<()> {
    let (database, topics, relay, mut config) = relayed().await?;
    // Long enough for a page or two at once, far too short for the whole run.
    config.continue_chain_ms = 200;
    let worker = RunningWorker::start(config.clone());
    let seeded = seeded(&database, 3_000).await?;
    let (run_id, new) = supersede(&seeded.api, seeded.contact_id, 50).await;
    let status = wait_for_run(&database, run_id, Duration::from_secs(180), completed).await?;
    assert_eq!((status.replaced, status.pages), (3_000, 61));
    assert_all_moved(&seeded, seeded.contact_id, new).await;
    assert_eq!(
        ra_ledger_testing::max_pages_in_flight(&seeded.client, run_id).await?,
        1
    );
    // Some pages ran at once, the others came through Kafka; every copy of a page run at
    // once is dropped as such, none reaches the fence.
    let continued = worker.metrics.continued();
    assert!(
        (1..60).contains(&continued),
        "{continued} of 60 pages after the first ran at once"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while worker.metrics.already_run() < continued {
        assert!(std::time::Instant::now() < deadline, "copies not dropped");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(worker.metrics.already_run(), continued);
    assert_eq!(worker.metrics.stale(), 0);
    println!("{continued} of 60 pages ran at once, the rest through Kafka");
    worker.stop().await?;
    drop((relay, topics));
    Ok(())
}

/// How soon a restarted worker must move a chain on again. With dynamic membership the
/// restarted worker waits for the killed member's session (6 s) to run out, then for a
/// rebalance; with static membership (`group.instance.id`) it takes the partitions back as
/// it joins. The test prints both measurements.
const TAKEOVER_BOUND: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_chain_resumes_from_the_recorded_cursor() -> anyhow::Result<()> {
    worker_killed_mid_chain(None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_member_killed_mid_chain_takes_its_partitions_back_at_once() -> anyhow::Result<()>
{
    worker_killed_mid_chain(Some(format!("worker-{}", ra_ledger_tests::random_suffix()))).await
}

/// A chain of 41 pages whose worker is killed with SIGKILL three times and restarted at
/// once, with `instance_id` (static membership) or without (dynamic).
async fn worker_killed_mid_chain(instance_id: Option<String>) -> anyhow::Result<()> {
    let membership = if instance_id.is_some() {
        "static"
    } else {
        "dynamic"
    };
    let (database, _topics, relay, mut config) = relayed().await?;
    config.instance_id = instance_id;
    let binary = env!("CARGO_BIN_EXE_worker-under-test");
    let seeded = seeded(&database, 2_000).await?;
    let (run_id, new) = supersede(&seeded.api, seeded.contact_id, 50).await;
    let mut pages_at_kill = Vec::new();
    let mut takeovers = Vec::new();
    let mut process = worker::spawn(binary, &config)?;
    for kill in 1..=3u32 {
        let status = wait_for_run(&database, run_id, Duration::from_secs(120), |s| {
            s.pages >= kill * 8 || completed(s)
        })
        .await?;
        process.kill()?; // SIGKILL: no goodbye to the group
        process.wait()?;
        pages_at_kill.push(status.pages);
        // Restarted at once, with no operator step: the chain moves on by itself.
        let restarted = Instant::now();
        process = worker::spawn(binary, &config)?;
        wait_for_run(&database, run_id, TAKEOVER_BOUND, |s| {
            s.pages > status.pages || completed(s)
        })
        .await?;
        takeovers.push(restarted.elapsed());
    }
    let status = wait_for_run(&database, run_id, Duration::from_secs(180), completed).await?;
    println!(
        "{membership} membership: the restarted worker moved the chain on after {takeovers:?}"
    );
    // SIGTERM: the worker stops cleanly.
    ra_ledger_tests::process::send_signal(process.id(), "TERM")?;
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
async fn one_trace_follows_a_supersede_from_the_http_request_to_the_last_pages_events_on_kafka()
-> anyhow::Result<()> {
    let (database, topics, _relay, config) = relayed().await?;
    let mut collector = Collector::new(&topics)?;
    let _worker = RunningWorker::start(config);
    let seeded = seeded(&database, 1_000).await?;
    let old = seeded.contact_id;
    let address = seeded.api.serve().await?;
    // The caller's span; the service's span is its child, every page a span of its own.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller = format!("00-{trace_id}-00f067aa0ba902b7-01");
    let reply = reqwest::Client::new()
        .post(format!("http://{address}/v1/contacts/{old}/supersede"))
        .bearer_auth(ra_ledger_tests::api::WRITER)
        .header("traceparent", &caller)
        .json(&json!({
            "name": "Second Office",
            "address": contact_body(TX, "x")["address"],
            "page_size": 100,
        }))
        .send()
        .await?;
    assert_eq!(reply.status().as_u16(), 202);
    let answered = reply.headers()["traceparent"].to_str()?.to_owned();
    assert!(
        answered.starts_with(&format!("00-{trace_id}-")),
        "{answered}"
    );
    assert_ne!(answered, caller, "the service answers with its own span");
    let body: serde_json::Value = reply.json().await?;
    let run_id: Uuid = body["run_id"].as_str().expect("a run id").parse()?;
    let status = wait_for_run(&database, run_id, Duration::from_secs(300), completed).await?;
    assert_eq!((status.replaced, status.pages), (1_000, 11), "{status:#?}");

    // Every event of the run (its correlation), in the ledger and on Kafka, carries the trace.
    let rows = seeded
        .client
        .query(
            "SELECT event_id::text, traceparent, event_type FROM events \
             WHERE correlation_id = $1 ORDER BY position",
            &[&status.correlation_id],
        )
        .await?;
    let expected: HashSet<String> = rows.iter().map(|row| row.get(0)).collect();
    assert!(expected.len() > 2_000, "{} events", expected.len());
    let mut spans = HashSet::new();
    for row in &rows {
        let traceparent: Option<String> = row.get(1);
        let traceparent =
            traceparent.unwrap_or_else(|| panic!("{} has no trace", row.get::<_, String>(0)));
        assert!(
            traceparent.starts_with(&format!("00-{trace_id}-")),
            "{traceparent}"
        );
        spans.insert(traceparent);
    }
    // The supersede's span and one per page (11 pages) at least.
    assert!(spans.len() >= 12, "{} spans", spans.len());
    assert!(
        collector
            .until_all(Duration::from_secs(120), &expected)
            .await,
        "not every event of the run reached Kafka"
    );
    for message in collector
        .received
        .iter()
        .filter(|m| expected.contains(m.id()))
    {
        let traceparent = message
            .headers
            .get("traceparent")
            .unwrap_or_else(|| panic!("{} reached Kafka without a trace", message.id()));
        assert!(
            traceparent.starts_with(&format!("00-{trace_id}-")),
            "{traceparent}"
        );
    }
    // The last page's last event: on Kafka under the trace, in a span of its own (not the
    // supersede's).
    let last = rows
        .iter()
        .rev()
        .find(|row| row.get::<_, String>(2) == "AssignmentStarted")
        .expect("the run started assignments");
    let (last_id, last_span): (String, Option<String>) = (last.get(0), last.get(1));
    let on_kafka = collector
        .received
        .iter()
        .find(|m| m.id() == last_id)
        .expect("the last page's event on Kafka");
    assert_eq!(on_kafka.headers.get("traceparent"), last_span.as_ref());
    let first_span: Option<String> = rows[0].get(1);
    assert_ne!(last_span, first_span, "the page has a span of its own");
    println!(
        "trace {trace_id}: {} events under {} spans, the last page's last event {last_id} on Kafka",
        expected.len(),
        spans.len()
    );
    Ok(())
}
