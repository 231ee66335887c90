//! SIGSTOP of the broker that coordinates the exactly-once relay's Kafka transactions,
//! while it commits them, for longer than its producer's request timeouts; then SIGCONT.
//! This is the delayed-EndTxn window: a commit the frozen coordinator took in may reach
//! the log after the producer gave up on it, and after the coordinator moved to another
//! node. The at-least-once relay meets the same pause (the node leads a third of every
//! topic's partitions).

use std::time::{Duration, Instant};

use ra_ledger_tests::cluster::QuorumLayout;
use ra_ledger_tests::stack::private_cluster;

use super::*;

/// The relay producers' `socket.timeout.ms` and `request.timeout.ms` in this test (defaults
/// 60 and 30 s): the client-side timeout of a request is the first, the broker's ack
/// timeout the second.
const REQUEST_TIMEOUT_MS: u64 = 10_000;
/// How long the coordinator stays frozen: longer than both.
const PAUSE: Duration = Duration::from_millis(REQUEST_TIMEOUT_MS + 5_000);

/// Commits timed before the pause, for the length of one commit cycle.
const CYCLES_MEASURED: u64 = 10;

/// Commits the exactly-once relay made, from its metrics.
fn commits(lane: &Lane) -> u64 {
    let count = format!("{}_count", metrics::TRANSACTION_COMMIT.name);
    metric(&lane.relay.metrics.render(), &count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_transaction_coordinator_frozen_past_the_request_timeout_loses_and_duplicates_nothing()
-> anyhow::Result<()> {
    let cluster = blocking(|| private_cluster(3, QuorumLayout::OnTheBrokers))?;
    let mut scenario = Scenario::start("coordinator SIGSTOP", &cluster, &MODES, |config| {
        for key in ["socket.timeout.ms", "request.timeout.ms"] {
            config
                .kafka
                .insert(key.into(), REQUEST_TIMEOUT_MS.to_string());
        }
    })
    .await?;
    let system_id: String = scenario
        .database
        .connect()
        .await?
        .query_one(
            "SELECT system_identifier::text FROM pg_control_system()",
            &[],
        )
        .await?
        .get(0);
    let transactional_id = scenario
        .lane(DeliveryMode::ExactlyOnce)
        .config
        .transactional_id(&system_id);
    let coordinator = blocking(|| scenario.cluster.transaction_coordinator(&transactional_id))?;
    // Frozen while committing: the relay commits one Kafka transaction after another under
    // the load; the pause falls at a random point of one such cycle after a commit ended,
    // so it may catch a transaction being filled or its EndTxn on the wire.
    let lane = scenario.lane(DeliveryMode::ExactlyOnce);
    let (before, measuring) = (commits(lane), Instant::now());
    while commits(lane) < before + CYCLES_MEASURED {
        anyhow::ensure!(
            measuring.elapsed() < Duration::from_secs(60),
            "the exactly-once relay committed {} Kafka transactions in 60 s under load",
            commits(lane) - before
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let cycle = measuring.elapsed() / u32::try_from(CYCLES_MEASURED)?;
    let per_second = 1.0 / cycle.as_secs_f64();
    let last = commits(lane);
    while commits(lane) == last {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(cycle.mul_f64(rand::random::<f64>())).await;
    scenario.fault_begins(format!("SIGSTOP of node {coordinator}, {PAUSE:?}"));
    scenario.cluster.node(coordinator).signal("STOP")?;
    let frozen = commits(scenario.lane(DeliveryMode::ExactlyOnce));
    tokio::time::sleep(PAUSE).await;
    let committed_while_frozen = commits(scenario.lane(DeliveryMode::ExactlyOnce)) - frozen;
    scenario.cluster.node(coordinator).signal("CONT")?;
    let in_sync = scenario.wait_until_healed()?;
    scenario.fault_healed()?;
    let after = blocking(|| scenario.cluster.transaction_coordinator(&transactional_id))?;
    println!(
        "coordinator SIGSTOP: {transactional_id} coordinated by node {coordinator} before, \
         node {after} after; {per_second:.1} Kafka transactions a second before the pause, \
         {committed_while_frozen} while it lasted; every partition in sync {:.1} s after \
         SIGCONT",
        in_sync.as_secs_f64()
    );
    for outcome in scenario.finish().await? {
        outcome.assert_clean();
    }
    Ok(())
}
