//! The relay and the server's history: a stored position must belong to the server the
//! relay reached, and a slot must not be re-created in silence. Each test here is a way the
//! relay used to skip events and confirm the slot past them, with no error:
//! - a position record that names no server (written outside the relay's transactions);
//! - a position of another database that shares the slot name and the topics;
//! - a server restored to an older point under the same slot name;
//! - a slot dropped under load (and `ledger relay recover`, which loses nothing).

use std::collections::HashSet;
use std::time::Duration;

use ra_ledger_cdc::config::{DeliveryMode, RelayConfig};
use ra_ledger_cdc::history::HistoryError;
use ra_ledger_cdc::relay::RelayError;
use ra_ledger_cdc::relay::recover::{RecoverOptions, recover};
use ra_ledger_cdc::relay::slot::SlotError;
use ra_ledger_tests::relay::{
    Collector, Isolation, RunningRelay, Tally, drop_slot_once_released, insert_backlog,
    spawn_paced_writer, test_config,
};
use ra_ledger_tests::stack::PostgresServer;
use ra_ledger_tests::{TestDatabase, TestTopics, metric};

/// The server's WAL position plus `ahead` bytes, as `X/Y`.
async fn wal_plus(client: &tokio_postgres::Client, ahead: i64) -> anyhow::Result<String> {
    Ok(client
        .query_one(
            "SELECT (pg_current_wal_lsn() + $1::text::numeric)::text",
            &[&ahead.to_string()],
        )
        .await?
        .get(0))
}

/// The server's identity as the relay records it: system identifier, timeline, database.
async fn identity(client: &tokio_postgres::Client) -> anyhow::Result<(String, i32, String)> {
    let row = client
        .query_one(
            "SELECT (SELECT system_identifier::text FROM pg_control_system()), \
                    (SELECT timeline_id FROM pg_control_checkpoint()), current_database()",
            &[],
        )
        .await?;
    Ok((row.get(0), row.get(1), row.get(2)))
}

fn exactly_once(config: RelayConfig) -> RelayConfig {
    RelayConfig {
        delivery: DeliveryMode::ExactlyOnce,
        ..config
    }
}

/// The reproduction of issue 32's first finding: a record keyed by the slot, 64 MiB above
/// the server's WAL, written outside any relay transaction. The relay used to skip every
/// transaction below it (26 skipped, 0 published) and confirm the slot past them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_that_names_no_server_skips_nothing() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = exactly_once(test_config(&database, &mut topics).await?);
    let client = database.connect().await?;
    let far = wal_plus(&client, 64 << 20).await?;
    let forged = format!(
        r#"{{"slot":"{}","commit_lsn":"{far}","end_lsn":"{far}"}}"#,
        config.slot
    );
    topics
        .write_record(&config.position_topic(), &config.slot, &forged)
        .await?;
    let mut collector = Collector::new(&topics)?;
    let relay = RunningRelay::start(config.clone());
    let expected: HashSet<String> = insert_backlog(&client, 20, 1, 32)
        .await?
        .into_iter()
        .collect();
    let all = collector
        .until_all(Duration::from_secs(60), &expected)
        .await;
    let rendered = relay.metrics.render();
    relay.stop().await?;
    let tally = Tally::of("forged position", &expected, &collector.received);
    assert!(all, "not every event reached Kafka: {tally:?}");
    assert_eq!(
        metric(&rendered, ra_ledger_cdc::metrics::TRANSACTIONS_SKIPPED.name),
        0,
        "{rendered}"
    );
    assert_eq!(tally.duplicates, 0);
    Ok(())
}

/// A position of this very server, but ahead of everything it has written: refused, with
/// the recovery named, and nothing confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_ahead_of_the_servers_wal_is_refused() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = exactly_once(test_config(&database, &mut topics).await?);
    let client = database.connect().await?;
    let (system_id, timeline, name) = identity(&client).await?;
    let far = wal_plus(&client, 64 << 20).await?;
    let forged = format!(
        r#"{{"slot":"{}","commit_lsn":"{far}","end_lsn":"{far}","system_id":"{system_id}","timeline":{timeline},"database":"{name}"}}"#,
        config.slot
    );
    topics
        .write_record(&config.position_topic(), &config.slot, &forged)
        .await?;
    insert_backlog(&client, 5, 1, 32).await?;
    let confirmed_before: Option<String> = client
        .query_one(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&config.slot],
        )
        .await?
        .get(0);
    let error = RunningRelay::start(config.clone())
        .refusal(Duration::from_secs(60))
        .await?;
    assert!(
        matches!(error, RelayError::History(HistoryError::Ahead { .. })),
        "{error}"
    );
    let text = error.to_string();
    assert!(
        text.contains("ahead of this server's WAL") && text.contains("ledger relay recover"),
        "{text}"
    );
    let confirmed_after: Option<String> = client
        .query_one(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&config.slot],
        )
        .await?
        .get(0);
    assert_eq!(confirmed_after, confirmed_before, "the slot did not move");
    Ok(())
}

/// Two databases with the same slot name and topic prefix on one Kafka cluster (the
/// production template twice): the second relay is refused, naming both servers, and the
/// first is not fenced by it; nothing of the first is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_databases_sharing_a_slot_name_and_topics_do_not_skip_each_others_events()
-> anyhow::Result<()> {
    let first_database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let first = exactly_once(test_config(&first_database, &mut topics).await?);
    let other_server = ra_ledger_tests::stack::private_postgres()?;
    let second_database = TestDatabase::on(&other_server.admin_url()).await?;
    let second_client = second_database.connect().await?;
    second_client
        .query_one(
            "SELECT 1 FROM pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&first.slot],
        )
        .await?;
    let second = RelayConfig {
        database_url: second_database.url.as_str().into(),
        ..first.clone()
    };
    let first_client = first_database.connect().await?;
    let mut collector = Collector::new(&topics)?;
    let first_relay = RunningRelay::start(first.clone());
    let mut expected: HashSet<String> = insert_backlog(&first_client, 10, 2, 32)
        .await?
        .into_iter()
        .collect();
    assert!(
        collector
            .until_all(Duration::from_secs(60), &expected)
            .await
    );
    // The second database has writes of its own, far below the first's position.
    insert_backlog(&second_client, 3, 1, 32).await?;
    let error = RunningRelay::start(second)
        .refusal(Duration::from_secs(90))
        .await?;
    let text = error.to_string();
    assert!(
        matches!(error, RelayError::History(HistoryError::Foreign { .. })),
        "{text}"
    );
    assert!(
        text.contains(&format!("database {}", first_database.name))
            && text.contains(&format!("database {}", second_database.name)),
        "names both: {text}"
    );
    // The first relay was not fenced: it goes on publishing.
    expected.extend(insert_backlog(&first_client, 10, 2, 32).await?);
    let all = collector
        .until_all(Duration::from_secs(60), &expected)
        .await;
    let first_rendered = first_relay.metrics.render();
    first_relay.stop().await?;
    let tally = Tally::of("first database", &expected, &collector.received);
    assert!(all, "{tally:?}");
    assert_eq!(
        metric(
            &first_rendered,
            ra_ledger_cdc::metrics::TRANSACTIONS_SKIPPED.name
        ),
        0
    );
    drop(other_server);
    Ok(())
}

/// Stops `server` (fast), copies its data folder to `backup`, starts it again.
fn back_up(server: &PostgresServer, backup: &std::path::Path) -> anyhow::Result<()> {
    server.stop_and_wait()?;
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(&server.data_dir)
        .arg(backup)
        .status()?;
    anyhow::ensure!(status.success(), "cp -a failed");
    server.start()
}

/// Stops `server`, puts `backup` in place of its data folder, starts it: a restore from a
/// file-system snapshot, under the same slot name.
fn restore(server: &PostgresServer, backup: &std::path::Path) -> anyhow::Result<()> {
    server.stop_and_wait()?;
    std::fs::remove_dir_all(&server.data_dir)?;
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(backup)
        .arg(&server.data_dir)
        .status()?;
    anyhow::ensure!(status.success(), "cp -a failed");
    server.start()
}

/// A server restored to an older point under the same slot name: refused while the
/// position is ahead of its WAL, refused still once it wrote past it (its new transactions
/// reuse the LSNs Kafka holds), and recovered by `ledger relay recover` with nothing of the
/// restored history lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_to_an_older_point_is_refused_and_recovered() -> anyhow::Result<()> {
    let server = ra_ledger_tests::stack::private_postgres()?;
    let database = TestDatabase::on(&server.admin_url()).await?;
    let mut topics = TestTopics::new();
    let config = exactly_once(test_config(&database, &mut topics).await?);
    let backup = server.data_dir.with_file_name("backup");
    back_up(&server, &backup)?;
    let mut collector = Collector::new(&topics)?;
    {
        let client = database.connect().await?;
        let relay = RunningRelay::start(config.clone());
        let published: HashSet<String> = insert_backlog(&client, 200, 2, 64)
            .await?
            .into_iter()
            .collect();
        assert!(
            collector
                .until_all(Duration::from_secs(60), &published)
                .await
        );
        relay.stop().await?;
    }
    restore(&server, &backup)?;
    let error = RunningRelay::start(config.clone())
        .refusal(Duration::from_secs(60))
        .await?;
    assert!(
        matches!(error, RelayError::History(HistoryError::Ahead { .. })),
        "{error}"
    );
    // The restored server writes on, past the position: the LSNs Kafka holds now name
    // other transactions.
    let client = database.connect().await?;
    let written: HashSet<String> = insert_backlog(&client, 600, 2, 64)
        .await?
        .into_iter()
        .collect();
    let error = RunningRelay::start(config.clone())
        .refusal(Duration::from_secs(60))
        .await?;
    // The heartbeat count the position carries is above the restored one (rule 6), or,
    // from a relay that wrote no count, its newest event is missing (the outbox check).
    assert!(
        matches!(
            error,
            RelayError::History(HistoryError::Restored { .. } | HistoryError::Rewound { .. })
        ),
        "{error}"
    );
    assert!(
        error.to_string().contains("ledger relay recover"),
        "{error}"
    );
    let recovered = recover(&config, &RecoverOptions::default()).await?;
    println!("recovered after a restore: {recovered:?}");
    assert!(recovered.dropped_slot);
    let relay = RunningRelay::start(config.clone());
    let later: HashSet<String> = insert_backlog(&client, 20, 2, 64)
        .await?
        .into_iter()
        .collect();
    let expected: HashSet<String> = written.union(&later).cloned().collect();
    let all = collector
        .until_all(Duration::from_secs(90), &expected)
        .await;
    relay.stop().await?;
    let tally = Tally::of("after the restore", &expected, &collector.received);
    assert!(all, "{tally:?}");
    drop(server);
    Ok(())
}

/// Bug 3 of issue 32: a missing slot was re-created at the current LSN, and whatever was
/// committed since the old one's position never reached Kafka. Now the relay stops and
/// creates nothing; `ledger relay recover` publishes what the outbox still holds and
/// creates the slot. Under load, in both modes: 0 lost.
async fn a_dropped_slot_is_refused_then_recovered_under_load(
    delivery: DeliveryMode,
) -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = RelayConfig {
        delivery,
        ..test_config(&database, &mut topics).await?
    };
    let client = database.connect().await?;
    let mut collector =
        Collector::with_isolation(&topics, &topics.brokers, Isolation::ReadCommitted)?;
    let writer = spawn_paced_writer(&database, 60, 5, 4, Duration::from_millis(100)).await?;
    let relay = RunningRelay::start(config.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    relay.stop().await?;
    drop_slot_once_released(&client, &config.slot).await?;
    let error = RunningRelay::start(config.clone())
        .refusal(Duration::from_secs(60))
        .await?;
    assert!(
        matches!(error, RelayError::Slot(SlotError::Lost { .. })),
        "{error}"
    );
    let slots: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
            &[&config.slot],
        )
        .await?
        .get(0);
    assert_eq!(slots, 0, "the relay created no slot");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let recovered = recover(&config, &RecoverOptions::default()).await?;
    println!("{delivery:?}: recovered {recovered:?}");
    let relay = RunningRelay::start(config.clone());
    let expected: HashSet<String> = writer.await??.into_iter().collect();
    let all = collector
        .until_all(Duration::from_secs(120), &expected)
        .await;
    relay.stop().await?;
    let tally = Tally::of(
        &format!("slot dropped under load, {delivery:?}"),
        &expected,
        &collector.received,
    );
    assert!(all, "{tally:?}");
    assert_eq!(tally.order_violations, 0, "{tally:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_slot_is_refused_then_recovered_under_load_at_least_once() -> anyhow::Result<()> {
    a_dropped_slot_is_refused_then_recovered_under_load(DeliveryMode::AtLeastOnce).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_slot_is_refused_then_recovered_under_load_exactly_once() -> anyhow::Result<()> {
    a_dropped_slot_is_refused_then_recovered_under_load(DeliveryMode::ExactlyOnce).await
}

/// `ledger relay recover --events-since`: events whose outbox rows retention removed are
/// published again from the ledger's `events`, each once, beside the outbox rows still kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_publishes_events_retention_removed_from_the_outbox() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let pool = ra_ledger::db::pool(&database.url, "recover-test", 4)?;
    let ledger = ra_ledger::commands::Ledger::new(pool.clone());
    let metadata = ra_ledger::store::Metadata {
        actor: "recover-test".into(),
        correlation_id: uuid::Uuid::now_v7(),
        causation_id: None,
        traceparent: None,
    };
    let since = chrono::Utc::now();
    let contact = ra_ledger_testing::primary_contact(&ledger, "TX", &metadata).await?;
    let texas = ra_ledger::domain::Jurisdiction::parse("j", "TX")?;
    ra_ledger_testing::seed_assignments(&pool, texas, contact, 50, 10, |_| {}).await?;
    let client = database.connect().await?;
    // Their outbox rows are gone (as retention removes them once a slot confirmed them).
    client.execute("DELETE FROM outbox", &[]).await?;
    let kept: HashSet<String> = insert_backlog(&client, 2, 5, 16)
        .await?
        .into_iter()
        .collect();
    let events: HashSet<String> = client
        .query("SELECT event_id::text FROM events", &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    drop_slot_once_released(&client, &config.slot).await?;
    let mut collector = Collector::new(&topics)?;
    let recovered = recover(
        &config,
        &RecoverOptions {
            events_since: Some(since),
        },
    )
    .await?;
    println!("recover --events-since: {recovered:?}");
    assert_eq!((recovered.events, recovered.outbox_rows), (51, 10));
    let expected: HashSet<String> = events.union(&kept).cloned().collect();
    let all = collector
        .until_all(Duration::from_secs(60), &expected)
        .await;
    let tally = Tally::of("recover --events-since", &expected, &collector.received);
    assert!(all, "{tally:?}");
    assert_eq!(tally.duplicates, 0, "{tally:?}");
    Ok(())
}
