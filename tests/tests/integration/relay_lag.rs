//! The relay's age gauge, `ra_relay_oldest_unconfirmed_commit_age_seconds`, tells idle from
//! stuck: near 0 on an idle outbox (its heartbeats come back at once), and growing while the
//! server is still decoding a large transaction, which the relay cannot see (protocol v1
//! sends a transaction only once it is decoded whole). It used to read 0 then.

use std::time::{Duration, Instant};

use ra_ledger_tests::relay::{RunningRelay, test_config};
use ra_ledger_tests::{TestDatabase, TestTopics};

/// The gauge's value now.
fn age(relay: &RunningRelay) -> f64 {
    let text = relay.metrics.render();
    text.lines()
        .find_map(|line| {
            line.strip_prefix(ra_ledger_cdc::metrics::OLDEST_UNCONFIRMED_COMMIT_AGE.name)?
                .strip_prefix(' ')
        })
        .and_then(|value| value.parse().ok())
        .unwrap_or(f64::NAN)
}

/// The largest value of the gauge over `span`, sampled every 50 ms.
async fn largest_age(relay: &RunningRelay, span: Duration) -> f64 {
    let deadline = Instant::now() + span;
    let mut largest: f64 = 0.0;
    while Instant::now() < deadline {
        largest = largest.max(age(relay));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    largest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_age_gauge_is_near_zero_when_idle_and_grows_while_the_server_decodes()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let config = test_config(&database, &mut topics).await?;
    let client = database.connect().await?;
    client
        .batch_execute("CREATE TABLE bulk (n int, padding text)")
        .await?;
    let relay = RunningRelay::start(config);
    // Streaming, its first heartbeats confirmed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = largest_age(&relay, Duration::from_secs(3)).await;

    // A large transaction on another table: the server decodes all of it before anything
    // after it can be sent, and the relay receives nothing meanwhile.
    let started = Instant::now();
    client
        .execute(
            "INSERT INTO bulk SELECT n, repeat('x', 200) FROM generate_series(1, 1500000) n",
            &[],
        )
        .await?;
    let inserted = started.elapsed();
    let decoding = largest_age(&relay, Duration::from_secs(20)).await;
    let after = largest_age(&relay, Duration::from_secs(2)).await;
    println!(
        "age gauge: at most {idle:.3} s idle; at most {decoding:.3} s while the server decoded a \
         1,500,000-row transaction (inserted in {:.1} s); {after:.3} s after",
        inserted.as_secs_f64()
    );
    relay.stop().await?;
    assert!(idle < 1.0, "idle: {idle} s");
    assert!(
        decoding >= 0.5,
        "the gauge stayed at {decoding} s while the server decoded"
    );
    assert!(after < 1.0, "once decoded: {after} s");
    Ok(())
}
