//! Issue 55, item 1: retention deleted outbox rows on the slot's confirmed position, a fact
//! the relay never vouched for. A slot created from a snapshot counts as confirmed at its
//! consistent point before the snapshot's rows are in Kafka, and a DBA moves a slot with
//! `pg_replication_slot_advance` or a peek. Each test here lost every row on the main of
//! 2cf9409; retention now deletes only below the relay's own record of what Kafka holds
//! (`relay_slots.published_lsn`, migration V20). And item 2: a refused `ledger relay
//! recover` changes nothing.

use std::collections::HashSet;
use std::time::Duration;

use ra_ledger::retention;
use ra_ledger_cdc::config::RelayConfig;
use ra_ledger_cdc::history::HistoryError;
use ra_ledger_cdc::relay::RelayError;
use ra_ledger_cdc::relay::recover::{RecoverOptions, recover};
use ra_ledger_tests::relay::{Collector, RunningRelay, insert_backlog, test_config};
use ra_ledger_tests::{TestDatabase, TestTopics, wait_for};
use tokio_postgres::Client;

use crate::relay_faults::spawn_relay;

/// Rows in the outbox.
async fn outbox_rows(client: &Client) -> anyhow::Result<i64> {
    Ok(client
        .query_one("SELECT count(*) FROM outbox", &[])
        .await?
        .get(0))
}

/// The slot's registration: ready, generation.
async fn registration(client: &Client, slot: &str) -> anyhow::Result<Option<(bool, i64)>> {
    Ok(client
        .query_opt(
            "SELECT ready, generation FROM relay_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?
        .map(|row| (row.get(0), row.get(1))))
}

/// A database whose relay has published `rows` outbox rows (two transactions) and still
/// runs, a collector that received them, and their ids.
struct Published {
    database: TestDatabase,
    _topics: TestTopics,
    config: RelayConfig,
    client: Client,
    collector: Collector,
    expected: HashSet<String>,
    relay: RunningRelay,
}

async fn published(rows: usize) -> anyhow::Result<Published> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let client = database.connect().await?;
    let mut collector = Collector::new(&topics)?;
    let expected: HashSet<String> = insert_backlog(&client, 2, rows / 2, 32)
        .await?
        .into_iter()
        .collect();
    let relay = RunningRelay::start(config.clone());
    anyhow::ensure!(
        collector
            .until_all(Duration::from_secs(60), &expected)
            .await,
        "the first rows did not reach Kafka"
    );
    Ok(Published {
        database,
        _topics: topics,
        config,
        client,
        collector,
        expected,
        relay,
    })
}

/// The reproduction: 1,000 outbox rows, a retention mark, the relay's first start
/// before its topics exist (its snapshot's publish waits), retention again, kill -9, a
/// restart as systemd would, the topics created. Retention removed all 1,000 (the slot
/// "confirmed" at its consistent point) and the retry published 0 of them. Now nothing is
/// removed while the snapshot is published, and all 1,000 reach Kafka.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_first_publish_loses_nothing_to_retention() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let client = database.connect().await?;
    // The database's first slot is the relay's, from a snapshot; its topics come later.
    client
        .execute("SELECT pg_drop_replication_slot($1)", &[&config.slot])
        .await?;
    let mut late = TestTopics::on(topics.brokers.clone());
    let config = RelayConfig {
        topic_prefix: format!("{}.outbox.event.", late.prefix),
        ..config
    };
    let expected: HashSet<String> = insert_backlog(&client, 10, 100, 32)
        .await?
        .into_iter()
        .collect();
    let pool = ra_ledger::db::pool(&database.url, "test-retention-loss", 1)?;
    let prune = || retention::prune(&pool, &config.slot, 500);
    assert_eq!(prune().await?.removed, 0, "the first round takes a mark");

    let mut relay = spawn_relay(&config)?;
    let slot = config.slot.clone();
    wait_for(
        "the relay's first slot, not ready",
        Duration::from_secs(60),
        || {
            let (client, slot) = (&client, &slot);
            async move {
                let exists: bool = client
                    .query_one(
                        "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)",
                        &[slot],
                    )
                    .await?
                    .get(0);
                Ok(exists && registration(client, slot).await? == Some((false, 1)))
            }
        },
    )
    .await?;
    let mut removed = 0;
    for _ in 0..3 {
        removed += prune().await?.removed;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        removed, 0,
        "removed while the first slot's snapshot was published"
    );
    relay.kill()?;
    relay.wait()?;
    let mut relay = spawn_relay(&config)?;
    for _ in 0..3 {
        removed += prune().await?.removed;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        removed, 0,
        "removed after the kill, before the retry published"
    );
    assert_eq!(outbox_rows(&client).await?, 1_000);

    for aggregate in ra_ledger_tests::relay::AGGREGATES {
        late.create(&format!("outbox.event.{aggregate}")).await?;
    }
    late.create_with_partitions(&ra_ledger_cdc::config::position_topic("outbox.event."), 1)
        .await?;
    let mut collector = Collector::new(&late)?;
    assert!(
        collector
            .until_all(Duration::from_secs(120), &expected)
            .await,
        "{} of 1,000 committed events reached Kafka",
        collector.distinct_ids().intersection(&expected).count()
    );
    // Once Kafka has them, retention goes on: the snapshot recorded its consistent point.
    wait_for(
        "retention to remove the published rows",
        Duration::from_secs(60),
        || async {
            prune().await?;
            Ok(outbox_rows(&client).await? == 0)
        },
    )
    .await?;
    relay.kill()?;
    relay.wait()?;
    Ok(())
}

/// How a DBA moves a slot past rows nobody published.
#[derive(Debug, Clone, Copy)]
enum Move {
    /// `pg_replication_slot_advance`.
    Advance,
    /// A peek that consumes: `pg_logical_slot_get_binary_changes`.
    Peek,
}

/// The second reproduction: the relay stopped, 500 rows committed, the slot moved
/// by hand past them, retention run. Retention removed them, then the relay refused with
/// `Gap` and said recover publishes the rows still kept: none were. Now retention keeps
/// them, the relay refuses, and `ledger relay recover` publishes all of them.
async fn a_slot_moved_by_hand_loses_nothing_to_retention(way: Move) -> anyhow::Result<()> {
    let Published {
        database,
        _topics,
        config,
        client,
        mut collector,
        mut expected,
        relay,
    } = published(100).await?;
    let pool = ra_ledger::db::pool(&database.url, "test-retention-loss", 1)?;
    relay.stop().await?;
    let unpublished = insert_backlog(&client, 5, 100, 32).await?;
    expected.extend(unpublished.iter().cloned());
    retention::prune(&pool, &config.slot, 500).await?;
    let moved = match way {
        Move::Advance => "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())::text",
        Move::Peek => {
            "SELECT count(*)::text FROM pg_logical_slot_get_binary_changes($1, NULL, NULL, \
             'proto_version', '1', 'publication_names', 'ra_ledger_outbox')"
        }
    };
    wait_for(
        "the slot released by the relay",
        Duration::from_secs(30),
        || async {
            Ok(client
                .query_one(
                    "SELECT NOT active FROM pg_replication_slots WHERE slot_name = $1",
                    &[&config.slot],
                )
                .await?
                .get(0))
        },
    )
    .await?;
    client.query_one(moved, &[&config.slot]).await?;
    let mut removed = 0;
    for _ in 0..3 {
        removed += retention::prune(&pool, &config.slot, 500).await?.removed;
    }
    assert_eq!(
        removed, 0,
        "{way:?}: rows removed that the relay never published"
    );
    let error = RunningRelay::start(config.clone())
        .refusal(Duration::from_secs(60))
        .await?;
    assert!(
        matches!(error, RelayError::History(HistoryError::Gap { .. })),
        "{way:?}: {error}"
    );
    let recovered = recover(&config, &RecoverOptions::default()).await?;
    assert!(recovered.outbox_rows >= 500, "{recovered:?}");
    assert!(
        collector
            .until_all(Duration::from_secs(60), &expected)
            .await,
        "{way:?}: {} of the 500 rows behind the moved slot reached Kafka",
        collector
            .distinct_ids()
            .iter()
            .filter(|id| unpublished.contains(id))
            .count()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_advanced_by_hand_loses_nothing_to_retention() -> anyhow::Result<()> {
    a_slot_moved_by_hand_loses_nothing_to_retention(Move::Advance).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_peeked_by_hand_loses_nothing_to_retention() -> anyhow::Result<()> {
    a_slot_moved_by_hand_loses_nothing_to_retention(Move::Peek).await
}

/// Issue 55, item 2: with a relay streaming, `ledger relay recover` is refused (the slot is
/// busy), and it had already marked the running relay's registration not ready: the next
/// plain restart dropped the slot and published every row again. A refused recovery now
/// changes nothing, and the restart streams on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_recover_changes_nothing() -> anyhow::Result<()> {
    let Published {
        database: _database,
        _topics,
        config,
        client,
        mut collector,
        mut expected,
        relay,
    } = published(200).await?;
    let before = registration(&client, &config.slot).await?;
    assert_eq!(before.map(|(ready, _)| ready), Some(true));
    let refused = recover(&config, &RecoverOptions::default()).await;
    assert!(
        matches!(refused, Err(RelayError::SlotBusy { .. })),
        "{refused:?}"
    );
    assert_eq!(
        registration(&client, &config.slot).await?,
        before,
        "a refused recovery changed the running relay's registration"
    );
    relay.stop().await?;
    let relay = RunningRelay::start(config.clone());
    expected.extend(insert_backlog(&client, 1, 10, 32).await?);
    assert!(
        collector
            .until_all(Duration::from_secs(60), &expected)
            .await
    );
    relay.stop().await?;
    // A snapshot's records carry no commit_lsn header: none may have been published again.
    let republished = collector
        .received
        .iter()
        .filter(|message| !message.headers.contains_key("commit_lsn"))
        .count();
    assert_eq!(republished, 0, "rows published again from a snapshot");
    Ok(())
}
