//! The replicated harness itself ([`ra_ledger_tests::replicated`]), on real servers: a
//! failover slot that survives two failovers with its position, the gate that holds logical
//! decoding back while the standby lags (and its absence), and the orphaned slot a
//! switchover leaves on the demoted primary.

use std::time::{Duration, Instant};

use ra_ledger_tests::replicated::{ReplicatedPostgres, ReplicationOptions};
use tokio_postgres::Client;

/// How long a failover slot's copy may take to be ready: slot sync naps up to 30 s.
const SYNC_TIMEOUT: Duration = Duration::from_secs(40);

/// A failover slot (pgoutput), made on the primary.
async fn create_failover_slot(client: &Client, slot: &str, plugin: &str) -> anyhow::Result<()> {
    client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, $2, false, false, true)",
            &[&slot, &plugin],
        )
        .await?;
    Ok(())
}

/// Writes a row, then moves `slot` past it, as a consumer that read all would; returns
/// where the slot's `confirmed_flush_lsn` is then. The standby snapshot after the row lets
/// the slot's catalog horizon move too: a synced copy stays temporary until it passes the
/// standby's. With the gate on, an advance stops where the standby has confirmed: it is
/// repeated until the slot is past the snapshot.
async fn consume_all(client: &Client, slot: &str) -> anyhow::Result<String> {
    client
        .execute("INSERT INTO failover_probe DEFAULT VALUES", &[])
        .await?;
    let snapshot: String = client
        .query_one("SELECT pg_log_standby_snapshot()::text", &[])
        .await?
        .get(0);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let past: bool = client
            .query_one(
                "SELECT end_lsn >= $2::text::pg_lsn \
                   FROM pg_replication_slot_advance($1, pg_current_wal_lsn())",
                &[&slot, &snapshot],
            )
            .await?
            .get(0);
        if past {
            return confirmed_flush(client, slot).await;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "slot {slot} did not pass {snapshot} in 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The slot's confirmed position, as text.
pub(crate) async fn confirmed_flush(client: &Client, slot: &str) -> anyhow::Result<String> {
    Ok(client
        .query_one(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?
        .get(0))
}

/// Consumes until the standby's copy of `slot` is ready at the primary's position; returns
/// that position. A copy made before the last consume may need one more to leave its
/// temporary state.
async fn make_failover_ready(
    pair: &ReplicatedPostgres,
    client: &Client,
    slot: &str,
) -> anyhow::Result<String> {
    let deadline = Instant::now() + SYNC_TIMEOUT;
    loop {
        let lsn = consume_all(client, slot).await?;
        match pair
            .wait_failover_ready_at(slot, &lsn, Duration::from_secs(5))
            .await
        {
            Ok(_) => return Ok(lsn),
            Err(error) if Instant::now() > deadline => return Err(error),
            Err(_) => {}
        }
    }
}

async fn probe_table(client: &Client) -> anyhow::Result<()> {
    client
        .batch_execute("CREATE TABLE failover_probe (id bigint GENERATED ALWAYS AS IDENTITY)")
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_slot_survives_two_failovers_with_its_position() -> anyhow::Result<()> {
    let mut pair = ReplicatedPostgres::start().await?;
    let database = pair.create_database().await?;
    let slot = format!("{}_failover", database.name);
    let mut client = database.connect().await?;
    probe_table(&client).await?;
    create_failover_slot(&client, &slot, "pgoutput").await?;
    let identity = pair.primary().identify_system()?;
    assert_eq!(identity.timeline, 1);
    assert_eq!(pair.standby_timeline()?, 1);

    for failover in 1..=2u32 {
        let lsn = make_failover_ready(&pair, &client, &slot).await?;
        let rows_before: i64 = client
            .query_one("SELECT count(*) FROM failover_probe", &[])
            .await?
            .get(0);
        pair.kill_primary()?;
        pair.promote().await?;
        assert!(pair.standby().is_none());
        assert_eq!(pair.primary_timeline()?, 1 + failover);

        // The database's multi-host URL finds the new primary; the slot is there, where its
        // consumer left it, and writes go on.
        client = database.connect().await?;
        let kept = confirmed_flush(&client, &slot).await?;
        assert_eq!(kept, lsn, "failover {failover}");
        client
            .execute("INSERT INTO failover_probe DEFAULT VALUES", &[])
            .await?;
        let rows: i64 = client
            .query_one("SELECT count(*) FROM failover_probe", &[])
            .await?
            .get(0);
        assert_eq!(rows, rows_before + 1);
        let promoted = pair.primary().identify_system()?;
        assert_eq!(promoted.system_id, identity.system_id);

        pair.rebuild_standby().await?;
        assert_eq!(pair.standby_timeline()?, 1 + failover);
    }
    Ok(())
}

/// With the gate on, a failover slot's decoding waits for the standby: a transaction the
/// paused standby has not received is not decoded until it resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_standby_holds_back_the_decoding_of_a_failover_slot() -> anyhow::Result<()> {
    let mut pair = ReplicatedPostgres::start().await?;
    let database = pair.create_database().await?;
    let slot = format!("{}_gate", database.name);
    let client = database.connect().await?;
    probe_table(&client).await?;
    create_failover_slot(&client, &slot, "test_decoding").await?;

    pair.pause_wal_receiver().await?;
    client
        .execute("INSERT INTO failover_probe DEFAULT VALUES", &[])
        .await?;
    let reader = database.connect().await?;
    let decoding = tokio::spawn({
        let slot = slot.clone();
        async move { peek(&reader, &slot).await }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    if decoding.is_finished() {
        anyhow::bail!(
            "decoded while the standby was paused: {:?}",
            decoding.await?
        );
    }

    pair.resume_wal_receiver()?;
    let changes = tokio::time::timeout(Duration::from_secs(30), decoding).await???;
    assert!(
        changes.iter().any(|change| change.contains("INSERT")),
        "{changes:?}"
    );
    Ok(())
}

/// With `synchronized_standby_slots` unset, nothing waits for the standby: the slot decodes
/// what the paused standby lacks, which a promotion would lose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_gate_a_failover_slot_decodes_what_the_standby_lacks() -> anyhow::Result<()> {
    let mut pair = ReplicatedPostgres::start_with(ReplicationOptions {
        synchronized_standby_slots: false,
        ..ReplicationOptions::default()
    })
    .await?;
    let database = pair.create_database().await?;
    let slot = format!("{}_nogate", database.name);
    let client = database.connect().await?;
    probe_table(&client).await?;
    create_failover_slot(&client, &slot, "test_decoding").await?;

    pair.pause_wal_receiver().await?;
    client
        .execute("INSERT INTO failover_probe DEFAULT VALUES", &[])
        .await?;
    let changes = tokio::time::timeout(Duration::from_secs(10), peek(&client, &slot)).await??;
    assert!(
        changes.iter().any(|change| change.contains("INSERT")),
        "{changes:?}"
    );
    pair.resume_wal_receiver()?;
    Ok(())
}

/// After a switchover the demoted primary keeps the failover slot it had as a primary: a
/// non-synced slot with the name of the new primary's, which stops slot sync on it until it
/// is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switchover_leaves_an_orphaned_failover_slot_on_the_old_primary() -> anyhow::Result<()> {
    let mut pair = ReplicatedPostgres::start().await?;
    let database = pair.create_database().await?;
    let slot = format!("{}_switch", database.name);
    let client = database.connect().await?;
    probe_table(&client).await?;
    create_failover_slot(&client, &slot, "pgoutput").await?;
    make_failover_ready(&pair, &client, &slot).await?;
    let (first, second) = (pair.primary().port, pair.standby().expect("a standby").port);

    pair.switchover().await?;
    assert_eq!(pair.primary().port, second);
    assert_eq!(pair.standby().expect("the old primary, back").port, first);
    assert_eq!(pair.primary_timeline()?, 2);
    assert_eq!(pair.standby_timeline()?, 2);
    assert_eq!(pair.orphaned_failover_slots().await?, vec![slot.clone()]);

    // Slot sync is stuck: the standby says why, and moving the slot changes nothing there.
    let client = database.connect().await?;
    let log = pair.standby().expect("a standby").log_path();
    let deadline = Instant::now() + SYNC_TIMEOUT;
    while !std::fs::read_to_string(&log)?.contains("already exists on the standby") {
        assert!(
            Instant::now() < deadline,
            "no word of the orphan in {}",
            log.display()
        );
        consume_all(&client, &slot).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let orphan = pair.standby_slot(&slot).await?.expect("the orphan");
    assert!(!orphan.synced, "{orphan:?}");

    assert_eq!(
        pair.drop_orphaned_failover_slots().await?,
        vec![slot.clone()]
    );
    assert!(pair.orphaned_failover_slots().await?.is_empty());
    make_failover_ready(&pair, &client, &slot).await?;
    Ok(())
}

/// What test_decoding has for `slot`, left in the slot.
async fn peek(client: &Client, slot: &str) -> anyhow::Result<Vec<String>> {
    let rows = client
        .query(
            "SELECT data FROM pg_logical_slot_peek_changes($1, NULL, NULL)",
            &[&slot],
        )
        .await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}
