//! Partitions added to an event topic while the relay streams. Nothing is lost: the relay
//! goes on, and every event reaches Kafka. But keys that hash to another partition under
//! the new count have their newer events there, so per-key order across the change is not
//! kept for consumers. The relay pages: its gauge `ra_relay_topic_partitions{topic}` says
//! the new count (RaTopicPartitionsChanged fires on the change), and it logs at `error` the
//! topic, both counts and what they mean ([`ra_ledger_cdc::relay::partitions`], which says
//! why it does not refuse).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use ra_ledger_tests::relay::{Collector, OpenEndedWriter, insert_backlog, test_config};
use ra_ledger_tests::stack::run_dir;
use ra_ledger_tests::{TestDatabase, TestTopics, random_suffix, wait_for};
use rdkafka::admin::{AdminOptions, NewPartitions};

use super::{LoggedRelay, admin, tally_after_all};

/// The series of `ra_relay_topic_partitions` for `topic` in a rendering.
fn partitions_gauge(rendered: &str, topic: &str) -> Option<u64> {
    let series = format!("ra_relay_topic_partitions{{topic=\"{topic}\"}} ");
    rendered
        .lines()
        .find_map(|line| line.strip_prefix(&series)?.parse().ok())
}

// Longer than our usual function on purpose: one scenario read top to bottom (the drift,
// what the system does meanwhile, the drift undone, every event counted); split into
// pieces, the order of its steps would be harder to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_added_to_an_event_topic_lose_nothing_and_page() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    // Every client here, the relay's producer and the collector included, reads the new
    // count within a second rather than librdkafka's five minutes.
    topics
        .client
        .insert("topic.metadata.refresh.interval.ms".into(), "1000".into());
    let mut config = test_config(&database, &mut topics).await?;
    config.health_check_interval_ms = 1_000;
    let contact = config.topic("contact");
    let relay = LoggedRelay::start(
        &config,
        &run_dir().join(format!("relay-{}", random_suffix())),
    )?;
    let mut collector = Collector::new(&topics)?;
    let client = database.connect().await?;
    let mut expected: HashSet<String> = insert_backlog(&client, 10, 20, 64)
        .await?
        .into_iter()
        .collect();
    anyhow::ensure!(
        collector
            .until_all(Duration::from_secs(60), &expected)
            .await,
        "the relay did not publish the first rows; its log:\n{}",
        relay.log()
    );
    let (watched, topic) = (&relay, &contact);
    wait_for(
        "the gauge saying 3 partitions",
        Duration::from_secs(30),
        move || async move { Ok(partitions_gauge(&watched.scrape().await, topic) == Some(3)) },
    )
    .await?;

    let writer = OpenEndedWriter::spawn(&database, 2, 20, Duration::from_millis(100)).await?;
    let added = admin(&topics)?
        .create_partitions(&[NewPartitions::new(&contact, 6)], &AdminOptions::new())
        .await?;
    for outcome in added {
        if let Err((topic, code)) = outcome {
            anyhow::bail!("adding partitions to {topic}: {code}");
        }
    }
    relay
        .until_logged(
            &format!("topic {contact} has 6 partitions, 3 when last read"),
            Duration::from_secs(60),
        )
        .await?;
    let log = relay.log();
    let line = log
        .lines()
        .find(|line| line.contains("has 6 partitions"))
        .unwrap_or_default();
    assert!(
        line.contains("ERROR") && line.contains("per-key order across the change is not kept"),
        "{line}"
    );
    assert_eq!(partitions_gauge(&relay.scrape().await, &contact), Some(6));
    // Keep writing until the producer has placed messages on the new partitions.
    let moved = collector
        .until(Duration::from_secs(60), |received| {
            received
                .iter()
                .any(|r| r.topic == contact && r.partition >= 3)
        })
        .await;
    expected.extend(writer.finish().await?);
    assert!(moved, "no message reached the new partitions");

    let tally = tally_after_all(&mut collector, &expected, "partitions added mid-stream").await;
    assert!(tally.lost == 0, "{} events lost", tally.lost);
    // What consumers lose: keys whose events now sit on two partitions, an old and a new.
    let mut placed: BTreeMap<&str, BTreeSet<i32>> = BTreeMap::new();
    for message in collector.received.iter().filter(|r| r.topic == contact) {
        placed
            .entry(&message.key)
            .or_default()
            .insert(message.partition);
    }
    let split = placed
        .values()
        .filter(|partitions| {
            partitions.iter().any(|&p| p < 3) && partitions.iter().any(|&p| p >= 3)
        })
        .count();
    println!(
        "{split} of {} contact keys have events on an old and a new partition",
        placed.len()
    );
    assert!(split > 0, "no key moved: {placed:?}");
    relay.stop()?;
    Ok(())
}
