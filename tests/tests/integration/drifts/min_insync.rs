//! `min.insync.replicas` raised above what a topic can meet: on the run's single broker, an
//! event topic of one replica set to 2, while the relay streams. What Kafka 4.4 does, found
//! here: nothing. Its effective minimum is the smaller of the setting and the partition's
//! replicas (`Partition.effectiveMinIsr`, since KIP-966), so `acks=all` produces are taken
//! as before: the relay streams on, its session never ends, nothing is lost. The refusal the
//! setting exists for, NOT_ENOUGH_REPLICAS while fewer replicas are in sync than it asks
//! (brokers down), makes the relay hold (librdkafka retries for ever: `message.timeout.ms` is
//! 0) and go on once they are back: `cluster_faults::two_down::`, on three brokers
//! (`deploy/test-cluster`). If a Kafka upgrade enforced the setting above the replication
//! factor, this test fails and says what to update.

use std::collections::HashSet;
use std::time::Duration;

use ra_ledger_cdc::metrics::SESSIONS;
use ra_ledger_tests::relay::{Collector, RunningRelay, insert_backlog, parse_lsn, test_config};
use ra_ledger_tests::{TestDatabase, TestTopics, metric, wait_for};

use super::{ids_of_type, set_topic_config, tally_after_all, topic_config};
use crate::failover_harness::confirmed_flush;

// Longer than our usual function on purpose: one scenario read top to bottom (the drift,
// what the system does meanwhile, the drift undone, every event counted); split into
// pieces, the order of its steps would be harder to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_insync_replicas_raised_above_the_replication_factor_is_capped_by_kafka_and_loses_nothing()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let client = database.connect().await?;
    let relay = RunningRelay::start(config.clone());
    let mut collector = Collector::new(&topics)?;
    let mut expected: HashSet<String> = insert_backlog(&client, 5, 20, 64)
        .await?
        .into_iter()
        .collect();
    anyhow::ensure!(
        collector
            .until_all(Duration::from_secs(60), &expected)
            .await,
        "the relay did not publish the first rows"
    );

    // Every transaction of insert_backlog has contact rows: one topic refusing holds all.
    let contact = config.topic("contact");
    set_topic_config(&topics, &contact, &[("min.insync.replicas", "2")]).await?;
    let (kafka, topic) = (&topics, &contact);
    wait_for(
        "min.insync.replicas=2 in force",
        Duration::from_secs(30),
        move || async move {
            Ok(topic_config(kafka, topic, "min.insync.replicas")
                .await?
                .as_deref()
                == Some("2"))
        },
    )
    .await?;
    let held = insert_backlog(&client, 5, 20, 64).await?;
    let written: String = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await?
        .get(0);
    expected.extend(held.iter().cloned());
    let held_contacts: HashSet<String> = ids_of_type(&held, &client, "contact")
        .await?
        .into_iter()
        .map(str::to_owned)
        .collect();
    anyhow::ensure!(!held_contacts.is_empty(), "no contact rows written");

    // Kafka 4.4 takes acks=all writes as before: its effective minimum is the topic's
    // replication factor when the setting is above it. Nothing is held, nothing lost.
    let arrived = collector
        .until_all(Duration::from_secs(60), &held_contacts)
        .await;
    assert_eq!(
        topic_config(&topics, &contact, "min.insync.replicas")
            .await?
            .as_deref(),
        Some("2"),
        "the setting changed under the test"
    );
    assert!(
        arrived,
        "contact events written while min.insync.replicas=2 did not reach Kafka: Kafka now \
         enforces it above the replication factor, so the relay holds; catalogue row 54 and \
         this test must say so"
    );
    let (sql, slot, end) = (&client, &config.slot, parse_lsn(&written));
    wait_for(
        "the slot confirmed past the rows written at min.insync.replicas=2",
        Duration::from_secs(60),
        move || async move { Ok(parse_lsn(&confirmed_flush(sql, slot).await?) >= end) },
    )
    .await?;
    assert_eq!(
        metric(&relay.metrics.render(), SESSIONS.name),
        1,
        "the relay's session ended: Kafka refused something"
    );

    set_topic_config(&topics, &contact, &[("min.insync.replicas", "1")]).await?;
    expected.extend(insert_backlog(&client, 5, 20, 64).await?);
    let tally = tally_after_all(
        &mut collector,
        &expected,
        "min.insync.replicas raised above the replication factor, then lowered",
    )
    .await;
    assert!(tally.lost == 0, "{} events lost", tally.lost);
    relay.stop().await?;
    Ok(())
}
