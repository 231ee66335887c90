//! `min.insync.replicas` raised above what a topic can meet: on the run's single broker, an
//! event topic of one replica set to 2. Every `acks=all` produce to it is refused with
//! NOT_ENOUGH_REPLICAS before it is appended, a retriable error librdkafka retries for
//! ever (the relay's `message.timeout.ms` is 0): the relay holds, confirms nothing, and
//! retention keeps every row; once the setting is lowered the retries land by themselves.

use std::collections::HashSet;
use std::time::Duration;

use ra_ledger::retention;
use ra_ledger_cdc::metrics::{IN_FLIGHT, STREAMING};
use ra_ledger_tests::relay::{
    Collector, RunningRelay, Tally, insert_backlog, parse_lsn, test_config,
};
use ra_ledger_tests::{TestDatabase, TestTopics, metric};

use super::{kept_in_outbox, set_topic_config, slot_confirmed, topic_config, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_insync_replicas_raised_above_the_replicas_holds_the_relay_until_lowered()
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
    let pool = ra_ledger::db::pool(&database.url, "test-drifts-min-insync", 1)?;
    retention::prune(&pool, &config.slot, 500).await?; // a mark below the held rows
    let held = insert_backlog(&client, 5, 20, 64).await?;
    let written: String = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await?
        .get(0);
    expected.extend(held.iter().cloned());
    let held_contacts: HashSet<&str> = ids_of_type(&held, &client, "contact").await?;

    // The relay sent them and Kafka acknowledges none.
    let watched = &relay;
    wait_for(
        "the held rows sent and unacknowledged",
        Duration::from_secs(60),
        move || async move { Ok(metric(&watched.metrics.render(), IN_FLIGHT.name) > 0) },
    )
    .await?;
    let arrived = collector
        .until(Duration::from_secs(8), |received| {
            received.iter().any(|r| held_contacts.contains(r.id()))
        })
        .await;
    assert!(
        !arrived,
        "a contact event reached Kafka past min.insync.replicas=2"
    );
    let rendered = relay.metrics.render();
    assert!(
        metric(&rendered, IN_FLIGHT.name) > 0 && metric(&rendered, STREAMING.name) == 1,
        "the relay does not hold (streaming, messages in flight):\n{rendered}"
    );
    assert!(
        !relay.task.is_finished(),
        "the relay stopped on a passing refusal"
    );
    let confirmed = slot_confirmed(&client, &config.slot).await?;
    assert!(
        parse_lsn(&confirmed) < parse_lsn(&written),
        "the slot confirmed {confirmed}, past rows Kafka refused (written up to {written})"
    );
    for _ in 0..2 {
        retention::prune(&pool, &config.slot, 500).await?;
    }
    assert_eq!(
        kept_in_outbox(&client, &held).await?,
        held.len(),
        "retention removed rows Kafka does not hold"
    );

    // Lowered again: the relay goes on by itself.
    set_topic_config(&topics, &contact, &[("min.insync.replicas", "1")]).await?;
    let done = collector
        .until_all(Duration::from_secs(120), &expected)
        .await;
    let tally = Tally::of(
        "min.insync.replicas raised then lowered",
        &expected,
        &collector.received,
    );
    assert!(done && tally.lost == 0, "{} events lost", tally.lost);
    let (sql, slot, written) = (&client, &config.slot, parse_lsn(&written));
    wait_for(
        "the slot confirmed past the held rows",
        Duration::from_secs(60),
        move || async move { Ok(parse_lsn(&slot_confirmed(sql, slot).await?) >= written) },
    )
    .await?;
    relay.stop().await?;
    Ok(())
}

/// The ids of `ids` whose rows are of `aggregate_type`.
async fn ids_of_type<'a>(
    ids: &'a [String],
    client: &tokio_postgres::Client,
    aggregate_type: &str,
) -> anyhow::Result<HashSet<&'a str>> {
    let rows = client
        .query(
            "SELECT event_id::text FROM outbox WHERE event_id::text = ANY($1) AND aggregate_type = $2",
            &[&ids, &aggregate_type],
        )
        .await?;
    let of_type: HashSet<String> = rows.iter().map(|row| row.get(0)).collect();
    Ok(ids
        .iter()
        .filter(|id| of_type.contains(*id))
        .map(String::as_str)
        .collect())
}
