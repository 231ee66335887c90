//! Outbox retention against the real relay, slot and broker: rows go only once the relay
//! recorded that Kafka holds them, across a relay kill -9 and a long open transaction;
//! parked rows stay. (What it did wrong before, trusting the slot: `retention_loss`.)

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use ra_ledger::retention;
use ra_ledger_tests::relay::{Collector, insert_backlog, parse_lsn as lsn, test_config};
use ra_ledger_tests::{TestDatabase, TestTopics};
use tokio_postgres::Client;

use crate::relay_faults::spawn_relay;

/// Records every removed outbox row with the relay's record of what Kafka holds at that
/// moment (`relay_slots.published_lsn`).
async fn watch_removals(client: &Client, slot: &str) -> anyhow::Result<()> {
    client
        .batch_execute(&format!(
            "CREATE TABLE removed_rows (event_id text, txid xid8, confirmed pg_lsn);
             CREATE FUNCTION note_removed() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 INSERT INTO removed_rows
                 SELECT OLD.event_id::text, OLD.txid, published_lsn
                 FROM relay_slots WHERE slot_name = '{slot}';
                 RETURN OLD;
             END $$;
             CREATE TRIGGER note_removed AFTER DELETE ON outbox
                 FOR EACH ROW EXECUTE FUNCTION note_removed();"
        ))
        .await?;
    Ok(())
}

/// What the relay does once Kafka acknowledged everything: records it (and confirms its
/// slot, which retention no longer reads). Returns the LSN recorded.
async fn record_all_published(client: &Client, slot: &str) -> anyhow::Result<String> {
    Ok(client
        .query_one(
            "WITH advanced AS (
                 SELECT end_lsn FROM pg_replication_slot_advance($1, pg_current_wal_lsn())
             )
             INSERT INTO relay_slots (slot_name, registered_by, ready, published_lsn,
                                      published_system_id)
             SELECT $1, 'test', true, end_lsn,
                    (SELECT system_identifier::text FROM pg_control_system())
             FROM advanced
             ON CONFLICT (slot_name) DO UPDATE
             SET published_lsn = EXCLUDED.published_lsn,
                 published_system_id = EXCLUDED.published_system_id
             RETURNING published_lsn::text",
            &[&slot],
        )
        .await?
        .get(0))
}

async fn outbox_rows(client: &Client) -> anyhow::Result<i64> {
    Ok(client
        .query_one("SELECT count(*) FROM outbox", &[])
        .await?
        .get(0))
}

// Longer than our usual function on purpose: one scenario, read top to bottom.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_rows_are_removed_and_never_before_the_relay_recorded_them() -> anyhow::Result<()>
{
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let client = database.connect().await?;
    watch_removals(&client, &config.slot).await?;
    client
        .execute(
            "INSERT INTO outbox_parked (event_id, aggregate_type, aggregate_id, event_type, \
             topic, payload, headers, commit_lsn, error) \
             VALUES (gen_random_uuid(), 'contact', 'k', 'TestEvent', 't', '\\x00', '{}', '0/0', \
             'test')",
            &[],
        )
        .await?;
    let pool = ra_ledger::db::pool(&database.url, "test-retention", 1)?;
    let prune = || retention::prune(&pool, &config.slot, 500);

    // No relay yet: it recorded nothing, so nothing goes.
    let mut expected: HashSet<String> = insert_backlog(&client, 20, 100, 32)
        .await?
        .into_iter()
        .collect();
    for _ in 0..3 {
        assert_eq!(prune().await?.removed, 0);
    }
    assert_eq!(outbox_rows(&client).await?, 2_000);

    // The relay publishes, retention follows; the relay dies mid-stream (kill -9: its record
    // stays where it last wrote it) and retention goes no further than that.
    let mut collector = Collector::new(&topics)?;
    let mut relay = spawn_relay(&config)?;
    let mut removed_while_down = 0;
    for round in 0..4 {
        expected.extend(insert_backlog(&client, 5, 100, 32).await?);
        if round == 2 {
            relay.kill()?;
            relay.wait()?;
            for _ in 0..3 {
                removed_while_down += prune().await?.removed;
            }
            relay = spawn_relay(&config)?;
        }
        prune().await?;
        collector.until(Duration::from_millis(500), |_| false).await;
    }

    // A transaction stays open while more is written and published.
    let mut long_client = database.connect().await?;
    let long = long_client.transaction().await?;
    let long_row = long
        .query_one(
            "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES (gen_random_uuid(), 'contact', 'long', 'TestEvent', '\\x01') \
             RETURNING event_id::text, txid::text",
            &[],
        )
        .await?;
    let (long_id, long_txid): (String, String) = (long_row.get(0), long_row.get(1));
    expected.insert(long_id);
    for _ in 0..3 {
        expected.extend(insert_backlog(&client, 5, 100, 32).await?);
        prune().await?;
        collector.until(Duration::from_millis(500), |_| false).await;
    }
    // Marks name the oldest transaction running, so while the long one is open no row of
    // a younger transaction is removed: retention errs on the side of keeping.
    let younger: i64 = client
        .query_one(
            "SELECT count(*) FROM removed_rows WHERE txid > $1::text::xid8",
            &[&long_txid],
        )
        .await?
        .get(0);
    assert_eq!(
        younger, 0,
        "rows younger than an open transaction were removed"
    );
    long.commit().await?;

    // Everything drains: the relay publishes, records, retention removes.
    let deadline = Instant::now() + Duration::from_secs(120);
    while outbox_rows(&client).await? > 0 {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} outbox rows left after 120 s",
            outbox_rows(&client).await?
        );
        // Heartbeats move the record past the last mark even when nothing else is written.
        prune().await?;
        collector.until(Duration::from_millis(500), |_| false).await;
    }
    relay.kill()?;
    relay.wait()?;
    assert!(
        collector
            .until_all(Duration::from_secs(120), &expected)
            .await,
        "not every event reached Kafka"
    );

    // Each removed row had been published, at a commit below the relay's record.
    let commit_lsns: HashMap<&str, u64> = collector
        .received
        .iter()
        .map(|m| (m.id(), lsn(&m.headers["commit_lsn"])))
        .collect();
    let removed = client
        .query("SELECT event_id, confirmed::text FROM removed_rows", &[])
        .await?;
    assert_eq!(
        removed.len(),
        expected.len(),
        "each row removed exactly once"
    );
    for row in &removed {
        let (id, confirmed): (String, Option<String>) = (row.get(0), row.get(1));
        let commit = commit_lsns[id.as_str()];
        let confirmed = lsn(&confirmed.expect("the relay had recorded something"));
        assert!(
            commit < confirmed,
            "{id} removed with the relay's record at {confirmed:X}, before its commit at {commit:X}"
        );
    }
    let parked: i64 = client
        .query_one("SELECT count(*) FROM outbox_parked", &[])
        .await?
        .get(0);
    assert_eq!(parked, 1, "parked rows are never removed");
    let status = retention::status(&pool).await?;
    println!(
        "retention: {} rows published and removed ({removed_while_down} while the relay was down), \
         {} left, {} marks pending",
        removed.len(),
        status.rows,
        status.marks
    );
    Ok(())
}

/// The console's lag in time reads the newest retention mark the relay recorded. Retention
/// used to forget that mark with the rows under it, so the page said "unknown" from one
/// round to the next; it keeps it now, until the relay records a newer one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newest_confirmed_mark_outlives_a_prune_for_the_lag_in_time() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let client = database.connect().await?;
    let slot = format!("lag_{}", ra_ledger_tests::random_suffix());
    client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await?;
    let pool = ra_ledger::db::pool(&database.url, "test-retention", 1)?;
    let published_before = async || -> anyhow::Result<Option<chrono::DateTime<chrono::Utc>>> {
        // What the console reads.
        let progress = ra_ledger::lag::slot_progress(&pool.get().await?, &slot).await?;
        Ok(progress.and_then(|progress| progress.published_before))
    };
    insert_backlog(&client, 2, 10, 8).await?;
    retention::prune(&pool, &slot, 500).await?;
    assert_eq!(
        published_before().await?,
        None,
        "the relay recorded no mark yet"
    );
    // What a relay does once Kafka acknowledged everything.
    record_all_published(&client, &slot).await?;
    // The rows go in the rounds whose marks the relay recorded, as it keeps recording: a mark covers only rows of transactions older than the oldest one running
    // when it was taken, and the cluster is shared with other tests, whose long
    // transactions can hold that back for a while. After every round, the console still has
    // a confirmed mark to read.
    let mut removed = 0;
    let started = Instant::now();
    for round in 0.. {
        let pruned = retention::prune(&pool, &slot, 500).await?;
        removed += pruned.removed;
        assert!(
            published_before().await?.is_some(),
            "round {round}: no confirmed mark left for the console's lag in time ({pruned:?})"
        );
        if removed >= 20 {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "{removed} of 20 rows removed after {round} rounds"
        );
        record_all_published(&client, &slot).await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(removed, 20, "every row under a confirmed mark is gone");
    client
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await?;
    Ok(())
}

/// Retention picked its mark by the text of the LSN: once the WAL position grew a digit
/// ('F/FF000028' sorts above '10/0'), the same old mark won every round and nothing was
/// removed again. A cluster of its own whose WAL starts just below 10/0 crosses that line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_goes_on_when_the_wal_position_grows_a_digit() -> anyhow::Result<()> {
    let server = ra_ledger_tests::stack::unstarted_postgres()?;
    server.start_wal_at("000000010000000F000000FF")?;
    server.start()?;
    let database = TestDatabase::on(&server.admin_url()).await?;
    let client = database.connect().await?;
    let slot = format!("digit_{}", ra_ledger_tests::random_suffix());
    client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await?;
    let pool = ra_ledger::db::pool(&database.url, "test-retention", 1)?;
    let confirm_all = async || record_all_published(&client, &slot).await;
    // Prunes, confirming everything between rounds, until the outbox is empty.
    let drain = async |phase: &str| -> anyhow::Result<()> {
        for _ in 0..50 {
            retention::prune(&pool, &slot, 500).await?;
            confirm_all().await?;
            if outbox_rows(&client).await? == 0 {
                return Ok(());
            }
        }
        let status = retention::status(&pool).await?;
        anyhow::bail!(
            "{phase}: {} outbox rows left after 50 rounds, the slot at {}, oldest mark {:?}",
            status.rows,
            confirm_all().await?,
            status.oldest_mark
        )
    };
    insert_backlog(&client, 2, 10, 8).await?;
    let before = confirm_all().await?;
    assert!(before.starts_with("F/FF"), "the WAL starts at {before}");
    drain("below 10/0").await?;
    client.execute("SELECT pg_switch_wal()", &[]).await?;
    insert_backlog(&client, 2, 10, 8).await?;
    let after = confirm_all().await?;
    assert!(after.starts_with("10/"), "the WAL crossed to {after}");
    drain("past 10/0").await?;
    client
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await?;
    Ok(())
}

/// `ledger-bench outbox` (issue 55, speed: retention still keeps the outbox bounded under
/// load, now that it trusts only the relay's record of what Kafka holds): a short run on
/// the run's own servers, its writer paced to 6,000 events a second for 10 s. Retention
/// removes rows while the writer goes on (the largest outbox at a report is below what was
/// written), and the outbox is empty once the relay recorded the drain. The bound itself is a
/// figure the bench prints (docs/benchmarks.md), not an assertion: it is the relay's lag in
/// rows, which a loaded machine stretches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_bench_outbox_removes_rows_while_writes_go_on_and_empties_the_outbox_after_the_drain()
-> anyhow::Result<()> {
    const EVENTS: u64 = 60_000;
    let stdout = ra_ledger_tests::cli::bench(
        "outbox",
        &[
            "--events",
            &EVENTS.to_string(),
            "--per-transaction",
            "100",
            "--max-unpublished",
            "2000",
            "--retention-interval-ms",
            "200",
            "--rate",
            "6000",
        ],
        Duration::from_secs(600),
    )
    .await?;
    let figure = |prefix: &str| {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
    };
    let largest = figure("largest outbox at a report: ")
        .ok_or_else(|| anyhow::anyhow!("no largest outbox in {stdout}"))?;
    assert!(
        largest < EVENTS,
        "retention removed nothing while {EVENTS} events were written:\n{stdout}"
    );
    assert_eq!(figure("after the drain: "), Some(0), "{stdout}");
    Ok(())
}
