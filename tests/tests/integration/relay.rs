//! The CDC relay against the real PostgreSQL and broker: headers, commit order, parking,
//! takeover, idle WAL.

use std::collections::HashSet;
use std::time::Duration;

use ra_ledger_tests::relay::{
    Collector, RunningRelay, insert_backlog, oversized_backlog, test_config,
};
use ra_ledger_tests::{TestDatabase, TestTopics};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_committed_rows_with_key_value_and_headers() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let client = database.connect().await?;
    let ids = insert_backlog(&client, 1, 3, 10).await?;
    let relay = RunningRelay::start(config.clone());
    let mut collector = Collector::new(&topics)?;
    assert!(
        collector
            .until(Duration::from_secs(60), |r| r.len() >= 3)
            .await,
        "got {:?}",
        collector.received
    );
    relay.stop().await?;

    let expected: HashSet<String> = ids.iter().cloned().collect();
    assert_eq!(collector.distinct_ids(), expected);
    let rows = client
        .query("SELECT event_id::text, aggregate_type, aggregate_id, payload, xmin::text::bigint FROM outbox", &[])
        .await?;
    for row in rows {
        let id: String = row.get(0);
        let message = collector
            .received
            .iter()
            .find(|m| m.id() == id)
            .expect("published");
        assert_eq!(
            message.topic,
            format!("{}.outbox.event.{}", topics.prefix, row.get::<_, String>(1))
        );
        assert_eq!(message.key, row.get::<_, String>(2));
        assert_eq!(message.payload, row.get::<_, Vec<u8>>(3));
        assert_eq!(message.headers["event_type"], "TestEvent");
        assert_eq!(message.headers["txid"], row.get::<_, i64>(4).to_string());
        assert!(
            message.headers["commit_lsn"].contains('/'),
            "{:?}",
            message.headers
        );
        assert!(
            message.headers["commit_timestamp"].ends_with('Z'),
            "{:?}",
            message.headers
        );
    }
    let mut ordinals: Vec<String> = collector
        .received
        .iter()
        .map(|m| m.headers["ordinal"].clone())
        .collect();
    ordinals.sort();
    assert_eq!(ordinals, vec!["0", "1", "2"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_committing_transaction_is_published_after_the_one_that_committed_first()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let relay = RunningRelay::start(config);
    let mut slow = database.connect().await?;
    let fast = database.connect().await?;
    let insert = "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
                  VALUES (gen_random_uuid(), 'contact', 'same-aggregate', $1, '\\x00') RETURNING id, event_id::text";

    // The slow transaction takes the lower outbox id, then waits.
    let slow_tx = slow.transaction().await?;
    let slow_row = slow_tx.query_one(insert, &[&"Slow"]).await?;
    let fast_row = fast.query_one(insert, &[&"Fast"]).await?;
    assert!(
        slow_row.get::<_, i64>(0) < fast_row.get::<_, i64>(0),
        "the slow one holds the lower id"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    slow_tx.commit().await?;

    let mut collector = Collector::new(&topics)?;
    assert!(
        collector
            .until(Duration::from_secs(60), |r| r.len() >= 2)
            .await,
        "got {:?}",
        collector.received
    );
    relay.stop().await?;
    let order: Vec<&str> = collector
        .received
        .iter()
        .map(|m| m.headers["event_type"].as_str())
        .collect();
    assert_eq!(
        order,
        vec!["Fast", "Slow"],
        "commit order, not id order, and nothing skipped"
    );
    assert_eq!(
        collector.received[0].partition,
        collector.received[1].partition
    );
    assert!(collector.received[0].offset < collector.received[1].offset);
    Ok(())
}

// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_parked_and_the_stream_goes_on() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let client = database.connect().await?;
    // Kafka refuses the big event for good.
    let (mut config, big, after) =
        oversized_backlog(&database, &mut topics, &client, (2, 2)).await?;
    let relay = RunningRelay::start(config.clone());
    let mut collector = Collector::new(&topics)?;
    assert!(
        collector
            .until(Duration::from_secs(60), |r| r.len() >= 4)
            .await,
        "got {:?}",
        collector.received
    );
    // The slot moves past the parked message too.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let lag: Option<i64> = client
            .query_one(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1",
                &[&config.slot],
            )
            .await?
            .get(0);
        if lag.is_some_and(|lag| lag < 64 * 1024) || std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(relay.metrics.parked_total(), 1);
    let render = relay.metrics.render();
    relay.stop().await?;
    assert!(
        render.contains(&format!(
            "{} 1",
            ra_ledger_cdc::metrics::PARKED_MESSAGES.name
        )),
        "{render}"
    );

    let expected: HashSet<String> = after.iter().cloned().collect();
    assert_eq!(
        collector.distinct_ids(),
        expected,
        "everything after the poison arrived"
    );
    let parked = ra_ledger_cdc::parking::list(&client, false).await?;
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].event_id, big);
    assert_eq!(parked[0].payload_bytes, 300_000);
    assert_eq!(parked[0].headers["id"], big.as_str());
    assert!(
        parked[0].headers["commit_lsn"]
            .as_str()
            .unwrap()
            .contains('/')
    );
    assert!(
        parked[0].error.to_lowercase().contains("too large"),
        "{}",
        parked[0].error
    );

    // Once the limit is raised, re-publishing delivers it with its headers.
    config
        .kafka
        .insert("message.max.bytes".into(), "1000000".into());
    let producer = ra_ledger_cdc::publish::producer(&config)?;
    let outcomes = ra_ledger_cdc::parking::republish(&client, &producer, None).await?;
    assert_eq!(
        outcomes,
        vec![ra_ledger_cdc::parking::Republished::Sent { id: parked[0].id }]
    );
    assert!(
        collector
            .until(Duration::from_secs(30), |r| r.iter().any(|m| m.id() == big))
            .await
    );
    assert!(
        ra_ledger_cdc::parking::list(&client, false)
            .await?
            .is_empty()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_relay_waits_and_takes_over_when_the_first_dies() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let client = database.connect().await?;
    let first = RunningRelay::start(config.clone());
    let mut collector = Collector::new(&topics)?;
    let before = insert_backlog(&client, 1, 2, 10).await?;
    assert!(
        collector
            .until(Duration::from_secs(60), |r| r.len() >= 2)
            .await
    );

    let second = RunningRelay::start(config.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        second
            .metrics
            .render()
            .contains(&format!("{} 0", ra_ledger_cdc::metrics::STREAMING.name)),
        "the second waits while the first holds the slot"
    );
    // The first dies without a goodbye.
    first.task.abort();
    let after = insert_backlog(&client, 1, 2, 10).await?;
    let want: HashSet<String> = before.iter().chain(&after).cloned().collect();
    assert!(
        collector
            .until(Duration::from_secs(60), |r| want
                .iter()
                .all(|id| r.iter().any(|m| m.id() == id)))
            .await,
        "the second relay took over"
    );
    assert!(
        second
            .metrics
            .render()
            .contains(&format!("{} 1", ra_ledger_cdc::metrics::STREAMING.name))
    );
    second.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_an_idle_outbox_from_pinning_wal() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let client = database.connect().await?;
    let relay = RunningRelay::start(config.clone());
    tokio::time::sleep(Duration::from_secs(1)).await;
    client
        .batch_execute("CREATE TABLE churn (id bigserial, filler text)")
        .await?;
    let start_lsn: String = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await?
        .get(0);
    // Other tables churn (about 40 MB of WAL) while the outbox stays idle.
    for _ in 0..20 {
        client
            .batch_execute(
                "INSERT INTO churn (filler) SELECT repeat('x', 1000) FROM generate_series(1, 2000)",
            )
            .await?;
    }
    let churned: i64 = client
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn)::bigint",
            &[&start_lsn],
        )
        .await?
        .get(0);
    assert!(
        churned > 20_000_000,
        "the churn wrote {churned} bytes of WAL"
    );
    // A checkpoint lets the slot's restart point move along with its confirmed position.
    client.batch_execute("CHECKPOINT").await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (retained, confirmed_lag) = loop {
        let row = client
            .query_one(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, \
                        pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint \
                 FROM pg_replication_slots WHERE slot_name = $1",
                &[&config.slot],
            )
            .await?;
        let (retained, lag): (i64, i64) = (row.get(0), row.get(1));
        if (retained < 4_000_000 && lag < 1_000_000) || std::time::Instant::now() > deadline {
            break (retained, lag);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        client.batch_execute("CHECKPOINT").await?;
    };
    relay.stop().await?;
    assert!(
        confirmed_lag < 1_000_000,
        "confirmed position lags {confirmed_lag} bytes after {churned} bytes of churn"
    );
    assert!(
        retained < 4_000_000,
        "the slot retains {retained} bytes of WAL after {churned} bytes of churn"
    );
    Ok(())
}

// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_library_applies_each_event_once_despite_duplicates() -> anyhow::Result<()> {
    use ra_ledger_cdc::consumer::{self, INBOX_SCHEMA, Outcome};
    use ra_ledger_proto::v1::envelope::Event;

    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let api = ra_ledger_tests::api::TestApi::new(&database)?;
    let contact = api
        .post(
            "/v1/contacts",
            ra_ledger_tests::api::contact_body("TX", "Agents"),
        )
        .await;
    assert_eq!(contact.status.as_u16(), 201);
    let mut assignments = Vec::new();
    for _ in 0..10 {
        let business = uuid::Uuid::now_v7();
        let reply = api
            .post(
                "/v1/assignments",
                serde_json::json!({"business_id": business, "jurisdiction": "TX"}),
            )
            .await;
        assignments.push(reply.str("assignment_id"));
    }
    for assignment in &assignments[..5] {
        api.post(
            &format!("/v1/assignments/{assignment}/replace"),
            serde_json::json!({}),
        )
        .await;
    }
    // 1 contact event + 10 starts + 5 × (end + start) = 21 events.
    let relay = RunningRelay::start(config);
    let mut collector = Collector::new(&topics)?;
    assert!(
        collector
            .until(Duration::from_secs(60), |r| r.len() >= 21)
            .await
    );
    relay.stop().await?;

    // Every message arrives three times, and two consumers race on each copy.
    let consumer_db = TestDatabase::new().await?;
    let mut first = consumer_db.connect().await?;
    let mut second = consumer_db.connect().await?;
    first.batch_execute(INBOX_SCHEMA).await?;
    first
        .batch_execute("CREATE TABLE applied (event_id text, event_type text)")
        .await?;
    let deliveries: Vec<_> = collector
        .received
        .iter()
        .flat_map(|m| [m.clone(), m.clone(), m.clone()])
        .collect();
    let (mut applied, mut duplicates) = (0, 0);
    async fn handle(
        client: &mut tokio_postgres::Client,
        payload: Vec<u8>,
    ) -> Result<Outcome, consumer::ConsumeError> {
        let envelope = consumer::decode(&payload)?;
        consumer::apply_once(client, "test-consumer", &envelope, |tx, envelope| {
            Box::pin(async move {
                tx.execute(
                    "INSERT INTO applied VALUES ($1, $2)",
                    &[&envelope.event_id, &envelope.event_type],
                )
                .await?;
                Ok(())
            })
        })
        .await
    }
    for pair in deliveries.chunks(2) {
        let outcomes: Vec<Outcome> = match pair {
            [a, b] => {
                let (x, y) = tokio::join!(
                    handle(&mut first, a.payload.clone()),
                    handle(&mut second, b.payload.clone())
                );
                vec![x?, y?]
            }
            [a] => vec![handle(&mut first, a.payload.clone()).await?],
            _ => unreachable!(),
        };
        for outcome in outcomes {
            match outcome {
                Outcome::Applied => applied += 1,
                Outcome::Duplicate => duplicates += 1,
            }
        }
    }
    assert_eq!((applied, duplicates), (21, 42));
    let rows: i64 = first
        .query_one("SELECT count(DISTINCT event_id) FROM applied", &[])
        .await?
        .get(0);
    let total: i64 = first
        .query_one("SELECT count(*) FROM applied", &[])
        .await?
        .get(0);
    assert_eq!((rows, total), (21, 21), "each event applied exactly once");
    // Decoding gives the domain event back.
    let started = collector
        .received
        .iter()
        .filter_map(|m| consumer::decode(&m.payload).ok())
        .filter(|e| matches!(e.event, Some(Event::AssignmentStarted(_))))
        .count();
    assert_eq!(started, 15);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_runs_as_a_least_privilege_role() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let mut config = test_config(&database, &mut topics).await?;
    let role = format!("relay_{}", ra_ledger_tests::random_suffix());
    let client = database.connect().await?;
    client
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN REPLICATION PASSWORD 'relay-secret'"
        ))
        .await?;
    ra_ledger::migrate::grant_relay_role(&client, &role).await?;
    let admin: tokio_postgres::Config = database.url.parse()?;
    config.database_url = format!(
        "postgres://{role}:relay-secret@127.0.0.1:{}/{}",
        admin.get_ports()[0],
        database.name
    )
    .into();
    // Oversized messages make it use outbox_parked too.
    config
        .kafka
        .insert("message.max.bytes".into(), "100000".into());
    let ids = insert_backlog(&client, 2, 2, 10).await?;
    insert_backlog(&client, 1, 1, 200_000).await?;
    let relay = RunningRelay::start(config.clone());
    let mut collector = Collector::new(&topics)?;
    assert!(
        collector
            .until(Duration::from_secs(60), |r| r.len() >= 4)
            .await
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(relay.metrics.parked_total(), 1);
    let metrics = relay.metrics.render();
    relay.stop().await?;
    assert!(
        metrics.contains(&format!("{} 1\n", ra_ledger_cdc::metrics::SESSIONS.name)),
        "no reconnect loop (heartbeats are allowed):\n{metrics}"
    );
    assert_eq!(
        collector.distinct_ids(),
        ids.into_iter().collect::<HashSet<_>>()
    );

    // It may read the outbox and nothing else, and write nothing but outbox_parked.
    let relay_client = ra_ledger_tests::database::connect(&config.database_url).await?;
    for statement in [
        "SELECT count(*) FROM events",
        "SELECT count(*) FROM assignments",
        "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'x', 'x', 'x', '')",
        "DELETE FROM outbox",
    ] {
        let error = relay_client
            .batch_execute(statement)
            .await
            .expect_err(statement);
        assert_eq!(
            error.code(),
            Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
            "{statement}: {error}"
        );
    }
    drop(relay_client);
    client
        .batch_execute(&format!("DROP OWNED BY {role}"))
        .await?;
    Ok(())
}
