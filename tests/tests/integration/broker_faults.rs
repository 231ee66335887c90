//! The broker under faults, through the real relay and an independent consumer: kill -9 and
//! restart while events stream, and consumer groups resuming inside a record batch. "Lost"
//! means an outbox event id missing from Kafka.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ra_ledger_tests::metric;
use ra_ledger_tests::relay::{
    Collector, Received, RunningRelay, Tally, insert_backlog, on_private_broker, subscribe,
};
use rand::Rng;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};

// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_while_50_000_events_stream_loses_none_and_keeps_key_order()
-> anyhow::Result<()> {
    let (broker, database, topics, config) = on_private_broker().await?;
    let relay = RunningRelay::start(config);
    let mut collector = Collector::on(&topics, &broker.brokers())?;

    // Bursts of 10 transactions of 100 events, 50 of them, then bursts of one transaction
    // of 10 events on until the last kill is over, so every outage falls while events are
    // being written: how long three kills take depends on the machine, and a fixed number
    // of bursts could end first. (With full bursts to the end, a slow broker restart made
    // it 200,000 events and more, whose drain was most of the test's time.)
    let writer_client = database.connect().await?;
    let written = Arc::new(AtomicUsize::new(0));
    let kills_done = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn({
        let (written, kills_done) = (Arc::clone(&written), Arc::clone(&kills_done));
        async move {
            let mut ids = Vec::new();
            let mut bursts = 0;
            while bursts < 50 || !kills_done.load(Ordering::Acquire) {
                let (transactions, events) = if bursts < 50 { (10, 100) } else { (1, 10) };
                ids.extend(insert_backlog(&writer_client, transactions, events, 64).await?);
                written.store(ids.len(), Ordering::Release);
                bursts += 1;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            anyhow::Ok(ids)
        }
    });
    let mut kills = Vec::new();
    let mut written_during_outages = Vec::new();
    for _ in 0..3 {
        let up = Duration::from_millis(rand::rng().random_range(1_000..4_000));
        collector.until(up, |_| false).await;
        let read = collector.received.len();
        let published = metric(
            &relay.metrics.render(),
            ra_ledger_cdc::metrics::EVENTS_PUBLISHED.name,
        );
        let written_before = written.load(Ordering::Acquire);
        broker.kill()?;
        let down = Duration::from_millis(rand::rng().random_range(100..2_000));
        tokio::time::sleep(down).await;
        broker.start()?;
        let during = written.load(Ordering::Acquire) - written_before;
        written_during_outages.push(during);
        kills.push(format!(
            "{published} published of {written_before} written, {read} read, down {down:?}, {during} written meanwhile"
        ));
    }
    kills_done.store(true, Ordering::Release);
    let expected: HashSet<String> = writer.await??.into_iter().collect();
    assert!(
        expected.len() >= 50_000,
        "{} events written",
        expected.len()
    );
    let all_arrived = collector
        .until_all(Duration::from_secs(300), &expected)
        .await;
    println!("broker kill -9 x3: {kills:?}");
    let tally = Tally::of("broker kill -9 x3", &expected, &collector.received);
    // The same relay task carried on through every restart: it reconnected by itself.
    assert!(!relay.task.is_finished(), "the relay stopped");
    relay.stop().await?;
    assert!(all_arrived && tally.lost == 0, "{} events lost", tally.lost);
    assert_eq!(tally.order_violations, 0);
    assert!(
        written_during_outages.iter().all(|&n| n > 0),
        "every outage fell while events were written: {written_during_outages:?}"
    );
    Ok(())
}

/// Reads `n` messages (or until `timeout`), commits where it got to and leaves the group.
async fn read_and_commit(
    consumer: StreamConsumer,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<Received>> {
    let mut received = Vec::new();
    let deadline = Instant::now() + timeout;
    while received.len() < n && Instant::now() < deadline {
        if let Ok(message) = tokio::time::timeout(Duration::from_millis(500), consumer.recv()).await
        {
            received.push(Received::from(&message?));
        }
    }
    if !received.is_empty() {
        consumer.commit_consumer_state(CommitMode::Sync)?;
    }
    Ok(received)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_group_resuming_inside_a_record_batch_misses_nothing() -> anyhow::Result<()> {
    let (broker, database, topics, config) = on_private_broker().await?;
    let client = database.connect().await?;
    // A backlog the relay sends in many-record batches (it lingers 10 ms to fill them).
    let expected: HashSet<String> = insert_backlog(&client, 30, 100, 64)
        .await?
        .into_iter()
        .collect();
    let relay = RunningRelay::start(config);
    let mut everything = Collector::on(&topics, &broker.brokers())?;
    assert!(
        everything
            .until_all(Duration::from_secs(120), &expected)
            .await
    );
    relay.stop().await?;

    // One group, four lives: each stops at an odd count, mid-batch, commits and leaves; the
    // broker is killed and restarted before the last one.
    let group = format!("resume-{}", topics.prefix);
    let mut received = Vec::new();
    for n in [37, 251, 3] {
        let consumer = subscribe(&topics, &broker.brokers(), &group)?;
        received.extend(read_and_commit(consumer, n, Duration::from_secs(60)).await?);
    }
    let resumed_at: Vec<(i32, i64)> = received
        .iter()
        .rev()
        .take(1)
        .map(|r| (r.partition, r.offset))
        .collect();
    broker.kill()?;
    broker.start()?;
    let consumer = subscribe(&topics, &broker.brokers(), &group)?;
    let left = expected.len().saturating_sub(received.len());
    received.extend(read_and_commit(consumer, left, Duration::from_secs(120)).await?);
    println!("the last life resumed after {resumed_at:?}");
    let tally = Tally::of("group resumed 3 times mid-batch", &expected, &received);
    // Offsets committed before the restart survived it: nothing was read twice either.
    assert_eq!(
        (tally.lost, tally.duplicates, tally.order_violations),
        (0, 0, 0)
    );
    Ok(())
}
