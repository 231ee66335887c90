//! The relay under faults: kill -9 at random moments, a frozen broker, a restarted
//! PostgreSQL, SIGTERM. "Lost" means an outbox event id missing from Kafka.

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ra_ledger_cdc::config::RelayConfig;
use ra_ledger_tests::relay::{
    Collector, RunningRelay, insert_backlog, on_private_broker, test_config,
};
use ra_ledger_tests::stack::private_postgres;
use ra_ledger_tests::{TestDatabase, TestTopics};
use rand::Rng;

/// Starts the relay as a process; it dies with this test's thread if the test fails.
pub(crate) fn spawn_relay(config: &RelayConfig) -> anyhow::Result<Child> {
    spawn_relay_with(config, &[])
}

/// [`spawn_relay`] with more environment variables (`LEDGER_RELAY_DELIVERY`,
/// `LEDGER_RELAY_CONFIG`).
pub(crate) fn spawn_relay_with(
    config: &RelayConfig,
    env: &[(&str, &str)],
) -> anyhow::Result<Child> {
    Ok(relay_command(config, env).spawn()?)
}

/// The command [`spawn_relay_with`] runs, for a test that wants more of it (its log in a
/// file).
pub(crate) fn relay_command(config: &RelayConfig, env: &[(&str, &str)]) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args([
            "--pdeathsig",
            "SIGKILL",
            "--",
            env!("CARGO_BIN_EXE_relay-under-test"),
        ])
        .env("LEDGER_DATABASE_URL", &config.database_url)
        .env("LEDGER_RELAY_SLOT", &config.slot)
        .env("LEDGER_KAFKA_BROKERS", &config.kafka["bootstrap.servers"])
        .env("LEDGER_TOPIC_PREFIX", &config.topic_prefix)
        .env("LEDGER_METRICS_LISTEN", "")
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    command
}

fn report(name: &str, expected: &HashSet<String>, collector: &Collector) -> usize {
    let received = collector.distinct_ids();
    let lost = expected.difference(&received).count();
    let duplicates = collector.received.len() - received.len();
    println!(
        "{name}: {} events, {lost} lost, {duplicates} duplicates delivered",
        expected.len()
    );
    lost
}

// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_minus_nine_at_random_moments_loses_nothing() -> anyhow::Result<()> {
    // A broker of its own: reading 100,000+ messages back should not queue behind the
    // other tests' traffic.
    let (broker, database, topics, mut config) = on_private_broker().await?;
    // A short pipeline slows the drain, so kills land while the backlog drains.
    config.max_in_flight = 100;
    let client = database.connect().await?;
    let mut expected: HashSet<String> = HashSet::new();
    // Read while the relays write, as a live consumer would.
    let mut collector = Collector::on(&topics, &broker.brokers())?;

    // Ten kills must land while the slot is behind the backlog. How fast a relay drains
    // depends on the machine, so whenever one has confirmed all of it, more backlog goes
    // in before the next relay starts, and a kill that lands on a drained slot does not
    // count (it is still a kill, and nothing may be lost for it).
    const MID_STREAM_KILLS: usize = 10;
    let mut mid_stream_kills = 0;
    let mut backlog_end = String::from("0/0");
    let mut kill = 0;
    while mid_stream_kills < MID_STREAM_KILLS && kill < 3 * MID_STREAM_KILLS {
        if slot_reached(&client, &config.slot, &backlog_end).await? {
            let top_up = if expected.is_empty() { 1_000 } else { 300 };
            expected.extend(insert_backlog(&client, top_up, 100, 64).await?);
            backlog_end = client
                .query_one("SELECT pg_current_wal_lsn()::text", &[])
                .await?
                .get(0);
        }
        kill += 1;
        let mut relay = spawn_relay(&config)?;
        let pause = rand::rng().random_range(300..1_500);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        relay.kill()?; // SIGKILL: no drain, no goodbye
        relay.wait()?;
        let confirmed: String = client
            .query_one(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&config.slot],
            )
            .await?
            .get(0);
        // Killed before the slot confirmed the whole backlog: the drain was interrupted.
        let draining = !slot_reached(&client, &config.slot, &backlog_end).await?;
        if draining {
            mid_stream_kills += 1;
        }
        collector.until(Duration::from_millis(300), |_| false).await;
        let read = collector.distinct_ids().len();
        println!(
            "kill {kill} after {pause} ms: slot confirmed {confirmed} (backlog ends {backlog_end}, {} events), {read} distinct read{}",
            expected.len(),
            if draining {
                ""
            } else {
                "; the backlog had drained"
            }
        );
    }
    // The last relay runs until the slot confirms the whole backlog: by then Kafka has
    // acknowledged every event, and reading them back can take its time.
    let mut relay = spawn_relay(&config)?;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if slot_reached(&client, &config.slot, &backlog_end).await? {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the relay did not drain the backlog within 180 s"
        );
        collector.until(Duration::from_millis(200), |_| false).await;
    }
    relay.kill()?;
    relay.wait()?;
    let done = collector
        .until_all(Duration::from_secs(300), &expected)
        .await;
    let lost = report(&format!("kill -9 x{kill}"), &expected, &collector);
    assert!(
        done && lost == 0,
        "{lost} events missing after reading {} messages",
        collector.received.len()
    );
    assert!(
        mid_stream_kills >= MID_STREAM_KILLS,
        "only {mid_stream_kills} of {kill} kills landed before the slot confirmed the backlog"
    );
    Ok(())
}

/// Whether the slot has confirmed everything up to `lsn`.
async fn slot_reached(
    client: &tokio_postgres::Client,
    slot: &str,
    lsn: &str,
) -> anyhow::Result<bool> {
    Ok(client
        .query_one(
            "SELECT confirmed_flush_lsn >= $2::text::pg_lsn FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot, &lsn],
        )
        .await?
        .get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_broker_pauses_the_relay_and_it_resumes_without_loss() -> anyhow::Result<()> {
    let (broker, database, topics, config) = on_private_broker().await?;
    let client = database.connect().await?;
    let relay = RunningRelay::start(config.clone());
    let mut collector = Collector::on(&topics, &broker.brokers())?;
    let mut expected: HashSet<String> = insert_backlog(&client, 20, 50, 64)
        .await?
        .into_iter()
        .collect();
    assert!(
        collector
            .until(Duration::from_secs(60), |r| r.len() >= 1_000)
            .await
    );

    broker.signal("STOP")?;
    let frozen_at = Instant::now();
    let mut lag_during = 0u64;
    while frozen_at.elapsed() < Duration::from_secs(30) {
        expected.extend(insert_backlog(&client, 5, 20, 64).await?);
        lag_during = lag_during.max(lag_bytes(&relay));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    broker.signal("CONT")?;
    let done = collector
        .until_all(Duration::from_secs(120), &expected)
        .await;
    // Let the slot catch up, then read the lag again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let lag_after = lag_bytes(&relay);
    relay.stop().await?;
    let lost = report("broker frozen 30 s", &expected, &collector);
    println!("replication lag: {lag_during} bytes during the outage, {lag_after} after");
    assert!(done && lost == 0, "{lost} events lost");
    assert!(
        lag_during > lag_after,
        "lag rose ({lag_during}) during the outage and fell ({lag_after}) after"
    );
    Ok(())
}

fn lag_bytes(relay: &RunningRelay) -> u64 {
    ra_ledger_tests::metric(
        &relay.metrics.render(),
        ra_ledger_cdc::metrics::REPLICATION_LAG_BYTES.name,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgresql_restart_mid_stream_loses_nothing() -> anyhow::Result<()> {
    let postgres = private_postgres()?;
    let database = TestDatabase::on(&postgres.admin_url()).await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let relay = RunningRelay::start(config.clone());
    let mut collector = Collector::new(&topics)?;
    let mut expected: HashSet<String> = {
        let client = database.connect().await?;
        insert_backlog(&client, 40, 50, 64)
            .await?
            .into_iter()
            .collect()
    };
    assert!(
        collector
            .until(Duration::from_secs(60), |r| r.len() >= 200)
            .await
    );
    // Fast shutdown mid-stream, then back up on the same data directory.
    postgres.stop("INT")?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    postgres.start()?;
    let client = database.connect().await?;
    expected.extend(insert_backlog(&client, 20, 50, 64).await?);
    let done = collector
        .until_all(Duration::from_secs(120), &expected)
        .await;
    let sessions = relay.metrics.render();
    relay.stop().await?;
    let lost = report("PostgreSQL restarted", &expected, &collector);
    assert!(done && lost == 0, "{lost} events lost");
    assert!(
        !sessions.contains(&format!("{} 1\n", ra_ledger_cdc::metrics::SESSIONS.name)),
        "the relay reconnected:\n{sessions}"
    );
    drop(client);
    drop(database);
    postgres.stop("INT")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_confirms_and_exits_zero() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let client = database.connect().await?;
    let expected: HashSet<String> = insert_backlog(&client, 50, 100, 64)
        .await?
        .into_iter()
        .collect();
    let mut relay = spawn_relay(&config)?;
    let mut collector = Collector::new(&topics)?;
    assert!(
        collector
            .until(Duration::from_secs(60), |r| r.len() >= 1_000)
            .await
    );
    ra_ledger_tests::process::send_signal(relay.id(), "TERM")?;
    let status = tokio::task::spawn_blocking(move || relay.wait()).await??;
    assert!(status.success(), "exit status {status}");
    // Everything it took from the slot is in Kafka; the slot confirms exactly that. The
    // server releases the slot when its walsender sees the connection end, which on a busy
    // machine can come a moment after the relay's exit: wait for that, at most 10 s.
    let deadline = Instant::now() + Duration::from_secs(10);
    let confirmed_end: bool = loop {
        let released = client
            .query_opt(
                "SELECT confirmed_flush_lsn IS NOT NULL FROM pg_replication_slots WHERE slot_name = $1 AND NOT active",
                &[&config.slot],
            )
            .await?;
        if let Some(row) = released {
            break row.get(0);
        }
        assert!(
            Instant::now() < deadline,
            "the slot is still active 10 s after the relay exited"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(confirmed_end);
    // A new relay finishes the rest; nothing is lost.
    let mut next = spawn_relay(&config)?;
    let done = collector
        .until_all(Duration::from_secs(120), &expected)
        .await;
    next.kill()?;
    next.wait()?;
    let lost = report("SIGTERM then restart", &expected, &collector);
    assert!(done && lost == 0, "{lost} events lost");
    Ok(())
}
