//! The relay's position, written by both delivery modes (issue 50, items 2, 3, 7 and 14):
//! - switching between the modes, any number of times, under writes and heartbeats, refuses
//!   nothing and loses nothing (exactly once used to refuse after at least once had moved
//!   the slot: "something other than the relay advanced the slot");
//! - a quiet database restored from a file-system copy is refused under exactly once, even
//!   once its WAL has passed the position again (its heartbeat count went back);
//! - an exactly-once relay pointed at a clone checks before it fences: the real relay goes
//!   on undisturbed;
//! - at least once refuses, across restarts, a server on an older timeline than the one it
//!   published from;
//! - a clean stop inside a large transaction reads it to its end: nothing is sent again.

use std::collections::HashSet;
use std::time::Duration;

use ra_ledger_cdc::config::{DeliveryMode, RelayConfig};
use ra_ledger_cdc::history::HistoryError;
use ra_ledger_cdc::relay::RelayError;
use ra_ledger_cdc::relay::recover::{RecoverOptions, recover};
use ra_ledger_tests::relay::{
    Collector, OpenEndedWriter, RunningRelay, Tally, insert_backlog, test_config,
};
use ra_ledger_tests::stack::PostgresServer;
use ra_ledger_tests::{TestDatabase, TestTopics, metric};

fn in_mode(config: &RelayConfig, delivery: DeliveryMode) -> RelayConfig {
    RelayConfig {
        delivery,
        ..config.clone()
    }
}

/// Modes alternated under writes and heartbeats (every 200 ms), each for a while, the relay
/// stopped cleanly between them or, with `crash`, its task dropped as a crash would.
async fn switching_modes(crash: bool) -> anyhow::Result<Tally> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let mut collector = Collector::new(&topics)?;
    let writer = OpenEndedWriter::spawn(&database, 2, 3, Duration::from_millis(40)).await?;
    let client = database.connect().await?;
    let modes = [
        DeliveryMode::ExactlyOnce,
        DeliveryMode::AtLeastOnce,
        DeliveryMode::ExactlyOnce,
        DeliveryMode::AtLeastOnce,
        DeliveryMode::AtLeastOnce,
        DeliveryMode::ExactlyOnce,
        DeliveryMode::ExactlyOnce,
        DeliveryMode::AtLeastOnce,
    ];
    for delivery in modes {
        let relay = RunningRelay::start(in_mode(&config, delivery));
        // Each mode runs until it published some of the writes, then a while longer: a
        // fixed time alone failed on a loaded machine, where an exactly-once start (its
        // producer's transactions initialised, its position read) took longer than it.
        let started = std::time::Instant::now();
        let published = || {
            metric(
                &relay.metrics.render(),
                ra_ledger_cdc::metrics::EVENTS_PUBLISHED.name,
            )
        };
        while published() == 0 && !relay.task.is_finished() {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{} published nothing in 120 s",
                delivery.as_str()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        assert!(
            !relay.task.is_finished(),
            "the relay stopped in {}: {:?}",
            delivery.as_str(),
            relay.task.await
        );
        // Each mode's account, printed (a failure shows it): a session that ended in an
        // error is resent from the slot by design, which a clean stop's duplicate is not.
        let sessions = metric(
            &relay.metrics.render(),
            ra_ledger_cdc::metrics::SESSIONS.name,
        );
        let events = published();
        if crash {
            relay.task.abort();
            let _ = relay.task.await;
        } else {
            relay.stop().await?;
        }
        let confirmed = crate::failover_harness::confirmed_flush(&client, &config.slot).await?;
        println!(
            "{}: {sessions} session(s), {events} events published, the slot at {confirmed} after its {}",
            delivery.as_str(),
            if crash { "crash" } else { "clean stop" }
        );
    }
    let written: HashSet<String> = writer.finish().await?.into_iter().collect();
    let relay = RunningRelay::start(in_mode(&config, DeliveryMode::ExactlyOnce));
    let all = collector.until_all(Duration::from_secs(60), &written).await;
    relay.stop().await?;
    let tally = Tally::of(
        if crash {
            "modes switched by crashes"
        } else {
            "modes switched cleanly"
        },
        &written,
        &collector.received,
    );
    println!("{tally:?}");
    assert!(all, "events lost across the mode switches: {tally:?}");
    Ok(tally)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_modes_back_and_forth_refuses_nothing_and_duplicates_nothing()
-> anyhow::Result<()> {
    let tally = switching_modes(false).await?;
    // A clean stop confirms everything Kafka has, in either mode, and the position says
    // so: the next relay resends nothing, whichever its mode.
    assert_eq!(tally.duplicates, 0, "{tally:?}");
    Ok(())
}

/// A clean stop ends between transactions (the reader reads an open one to its end first),
/// so the next relay sends nothing again: transactions of 5,000 rows, the relay stopped as
/// soon as the first is acknowledged, while it is inside the second. Before, the stop
/// returned mid-transaction: the rows it had sent of the open one stayed unconfirmed and
/// were sent again (the duplicate the mode switch above met under load).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_inside_a_large_transaction_sends_nothing_again() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    // At most 500 messages in flight: the reader is never more than that ahead of Kafka, so
    // when the first transaction is acknowledged it is inside the second.
    let config = RelayConfig {
        max_in_flight: 500,
        ..test_config(&database, &mut topics).await?
    };
    let mut collector = Collector::new(&topics)?;
    let client = database.connect().await?;
    let written: HashSet<String> = insert_backlog(&client, 4, 5_000, 64)
        .await?
        .into_iter()
        .collect();
    let relay = RunningRelay::start(config.clone());
    let started = std::time::Instant::now();
    while metric(
        &relay.metrics.render(),
        ra_ledger_cdc::metrics::EVENTS_PUBLISHED.name,
    ) == 0
    {
        assert!(!relay.task.is_finished(), "the relay stopped");
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "nothing published in 120 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    relay.stop().await?;
    let relay = RunningRelay::start(config);
    let all = collector
        .until_all(Duration::from_secs(120), &written)
        .await;
    relay.stop().await?;
    let tally = Tally::of(
        "a clean stop inside a transaction",
        &written,
        &collector.received,
    );
    assert!(all, "events lost: {tally:?}");
    assert_eq!(tally.duplicates, 0, "{tally:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_modes_by_crashes_refuses_nothing_and_loses_nothing() -> anyhow::Result<()> {
    // Duplicates are the tail each crashed relay had not confirmed: at least once.
    switching_modes(true).await.map(|_| ())
}

/// Item 14: the position names timeline 2 of this cluster (a relay published from a
/// promoted server), and the relay reaches a server of timeline 1 (the old primary back,
/// first in the URL). At least once used to check timelines only within one process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_refuses_an_older_timeline_than_it_published_from() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let client = database.connect().await?;
    let row = client
        .query_one(
            "SELECT (SELECT system_identifier::text FROM pg_control_system()), \
                    (SELECT timeline_id FROM pg_control_checkpoint()), current_database(), \
                    pg_current_wal_lsn()::text",
            &[],
        )
        .await?;
    let (system_id, timeline, name, wal): (String, i32, String, String) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let newer = format!(
        r#"{{"slot":"{}","commit_lsn":"{wal}","end_lsn":"{wal}","system_id":"{system_id}","timeline":{},"database":"{name}","delivery":"at_least_once"}}"#,
        config.slot,
        timeline + 1
    );
    topics
        .write_record(&config.position_topic(), &config.slot, &newer)
        .await?;
    let error = RunningRelay::start(config.clone())
        .refusal(Duration::from_secs(60))
        .await?;
    assert!(
        matches!(
            error,
            RelayError::History(HistoryError::OlderTimeline { .. })
        ),
        "{error}"
    );
    Ok(())
}

/// A PostgreSQL of the test's own (it is stopped, copied, replaced), a database on it, the
/// test's topics and an exactly-once relay configuration.
async fn exactly_once_on_a_private_server()
-> anyhow::Result<(PostgresServer, TestDatabase, TestTopics, RelayConfig)> {
    let server = ra_ledger_tests::stack::private_postgres()?;
    let database = TestDatabase::on(&server.admin_url()).await?;
    let mut topics = TestTopics::new();
    let config = in_mode(
        &test_config(&database, &mut topics).await?,
        DeliveryMode::ExactlyOnce,
    );
    Ok((server, database, topics, config))
}

/// Item 3, the issue's sketch: exactly once, heartbeats every 200 ms; one event; a copy of
/// the data folder; heartbeats go on (heartbeat-only Kafka transactions move the position
/// past the copy's WAL end); the copy restored; written until its WAL passes the position.
/// Neither `Ahead` nor the outbox check (its newest event is in the copy) can tell: the
/// heartbeat count does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_database_restored_from_a_copy_is_refused() -> anyhow::Result<()> {
    let (server, database, topics, config) = exactly_once_on_a_private_server().await?;
    let mut collector = Collector::new(&topics)?;
    let relay = RunningRelay::start(config.clone());
    let first: HashSet<String> = insert_backlog(&database.connect().await?, 1, 1, 32)
        .await?
        .into_iter()
        .collect();
    assert!(collector.until_all(Duration::from_secs(60), &first).await);
    relay.stop().await?;
    server.stop_and_wait()?;
    let copy = server.clone_to(&server.data_dir.with_file_name("copy"))?;
    server.start()?;
    let relay = RunningRelay::start(config.clone());
    tokio::time::sleep(Duration::from_secs(5)).await;
    relay.stop().await?;
    let client = database.connect().await?;
    let position: String = client
        .query_one(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&config.slot],
        )
        .await?
        .get(0);
    drop(client);
    // The copy in place of the server.
    server.stop_and_wait()?;
    std::fs::remove_dir_all(&server.data_dir)?;
    std::fs::rename(&copy.data_dir, &server.data_dir)?;
    server.start()?;
    let client = database.connect().await?;
    let mut skipped = Vec::new();
    while client
        .query_one(
            "SELECT pg_current_wal_lsn() <= $1::text::pg_lsn",
            &[&position],
        )
        .await?
        .get::<_, bool>(0)
    {
        skipped.extend(insert_backlog(&client, 20, 2, 256).await?);
    }
    let error = RunningRelay::start(config.clone())
        .refusal(Duration::from_secs(60))
        .await?;
    assert!(
        matches!(error, RelayError::History(HistoryError::Restored { .. })),
        "{error}"
    );
    assert!(
        error.to_string().contains("ledger relay recover"),
        "{error}"
    );
    recover(&config, &RecoverOptions::default()).await?;
    let relay = RunningRelay::start(config.clone());
    let later = insert_backlog(&client, 2, 1, 32).await?;
    let expected: HashSet<String> = skipped.into_iter().chain(later).collect();
    let all = collector
        .until_all(Duration::from_secs(90), &expected)
        .await;
    relay.stop().await?;
    assert!(
        all,
        "{:?}",
        Tally::of("after the restore", &expected, &collector.received)
    );
    Ok(())
}

/// Item 7: a clone of the cluster (a file-system copy: the same system identifier, so the
/// same transactional id) behind the real one, and an exactly-once relay pointed at it with
/// the real one's slot name and topics. It must refuse before it fences: fencing first
/// aborted the real relay's Kafka transaction and ended its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exactly_once_relay_pointed_at_a_clone_checks_before_it_fences() -> anyhow::Result<()> {
    let (server, database, topics, config) = exactly_once_on_a_private_server().await?;
    server.stop_and_wait()?;
    let clone = server.clone_to(&server.data_dir.with_file_name("clone"))?;
    server.start()?;
    clone.start()?;
    let mut collector = Collector::new(&topics)?;
    let real = RunningRelay::start(config.clone());
    let writer = OpenEndedWriter::spawn(&database, 1, 5, Duration::from_millis(20)).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let clone_url = config
        .database_url
        .expose()
        .replace(&format!(":{}/", server.port), &format!(":{}/", clone.port));
    anyhow::ensure!(
        clone_url != config.database_url.expose(),
        "the URL names no port"
    );
    let pointed_at_clone = RelayConfig {
        database_url: clone_url.as_str().into(),
        ..config.clone()
    };
    let error = RunningRelay::start(pointed_at_clone)
        .refusal(Duration::from_secs(60))
        .await?;
    assert!(
        matches!(error, RelayError::History(HistoryError::Ahead { .. })),
        "{error}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let written: HashSet<String> = writer.finish().await?.into_iter().collect();
    let all = collector.until_all(Duration::from_secs(60), &written).await;
    let rendered = real.metrics.render();
    real.stop().await?;
    let tally = Tally::of("beside a relay on a clone", &written, &collector.received);
    assert!(all, "{tally:?}");
    assert_eq!(
        metric(&rendered, ra_ledger_cdc::metrics::SESSIONS.name),
        1,
        "the real relay's session was ended: fenced by the relay on the clone"
    );
    assert_eq!(
        metric(&rendered, ra_ledger_cdc::metrics::TRANSACTIONS_ABORTED.name),
        0
    );
    assert_eq!(tally.duplicates, 0, "{tally:?}");
    drop(clone);
    Ok(())
}
