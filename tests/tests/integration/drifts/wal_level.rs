//! `wal_level` lowered to `replica` across a restart of PostgreSQL while the relay's logical
//! slot exists. What PostgreSQL 18 does, found here: it refuses to start ("FATAL: logical
//! replication slot … exists, but "wal_level" < "logical"", hint: change it back), so the
//! slot is never invalidated and nothing reaches the relay but refused connections. The
//! relay holds: it reconnects with backoff, neither exits nor confirms; once `wal_level` is
//! `logical` again and the server is up, it goes on from its slot, and nothing is lost.

use std::collections::HashSet;
use std::time::Duration;

use ra_ledger_cdc::metrics::{SESSIONS, STREAMING};
use ra_ledger_tests::relay::{Collector, RunningRelay, insert_backlog, test_config};
use ra_ledger_tests::stack::private_postgres;
use ra_ledger_tests::{TestDatabase, TestTopics, metric, wait_for};

use super::tally_after_all;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_level_lowered_across_a_restart_is_refused_by_postgresql_and_the_relay_holds()
-> anyhow::Result<()> {
    let postgres = private_postgres()?;
    let database = TestDatabase::on(&postgres.admin_url()).await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let relay = RunningRelay::start(config.clone());
    let mut collector = Collector::new(&topics)?;
    let mut expected: HashSet<String> = HashSet::new();
    {
        let client = database.connect().await?;
        expected.extend(insert_backlog(&client, 10, 20, 64).await?);
        anyhow::ensure!(
            collector
                .until(Duration::from_secs(60), |r| r.len() >= 50)
                .await,
            "the relay did not start publishing"
        );
        // Committed, and perhaps not yet published, when the server stops.
        expected.extend(insert_backlog(&client, 10, 20, 64).await?);
    }

    postgres.stop_and_wait()?;
    postgres.configure("wal_level = replica")?;
    let refused = postgres
        .start()
        .expect_err("PostgreSQL started with wal_level = replica and a logical slot");
    let refusal = format!("{refused:#}");
    println!("PostgreSQL with wal_level = replica: {refusal}");
    assert!(
        refusal.contains(&format!(
            "logical replication slot \"{}\" exists, but \"wal_level\" < \"logical\"",
            config.slot
        )),
        "{refusal}"
    );
    // The relay holds: it tries again and again, and neither stops nor streams.
    let sessions = metric(&relay.metrics.render(), SESSIONS.name);
    let watched = &relay;
    wait_for(
        "the relay trying again",
        Duration::from_secs(60),
        move || async move { Ok(metric(&watched.metrics.render(), SESSIONS.name) >= sessions + 2) },
    )
    .await?;
    assert_eq!(metric(&relay.metrics.render(), STREAMING.name), 0);
    assert!(
        !relay.task.is_finished(),
        "the relay stopped while PostgreSQL was down"
    );

    postgres.configure("wal_level = logical")?;
    postgres.start()?;
    let client = database.connect().await?;
    let slot: Option<bool> = client
        .query_opt(
            "SELECT wal_status <> 'lost' FROM pg_replication_slots WHERE slot_name = $1",
            &[&config.slot],
        )
        .await?
        .map(|row| row.get(0));
    assert_eq!(slot, Some(true), "the slot did not survive intact");
    expected.extend(insert_backlog(&client, 5, 20, 64).await?);
    let tally = tally_after_all(&mut collector, &expected, "wal_level lowered, then raised").await;
    assert!(tally.lost == 0, "{} events lost", tally.lost);
    assert!(!relay.task.is_finished(), "the relay stopped");
    relay.stop().await?;
    drop(client);
    drop(database);
    postgres.stop("INT")?;
    Ok(())
}
