//! Kill -9 of the partition leader, five times in `deploy/test-cluster` (twice in
//! `deploy/test`, for CI time), following the leader as Kafka's `replication_test` does (its
//! hard bounce): the node is restarted once the controller had time to notice it gone
//! (`broker.session.timeout.ms` + 5 s), and the next kill waits until every partition is in
//! sync again.

use std::time::Duration;

use anyhow::Context as _;

use ra_ledger_tests::broker::cluster_timing::BROKER_SESSION_TIMEOUT_MS;
use ra_ledger_tests::cluster::QuorumLayout;
use ra_ledger_tests::stack::private_cluster;

use super::*;

/// Kills (`LEDGER_CLUSTER_KILLS`): Kafka's test makes five, as `deploy/test-cluster` does;
/// the everyday suite makes two, each a minute of a busy cluster, to keep it under its time
/// budget.
fn kills() -> usize {
    ra_ledger_tests::repetitions("LEDGER_CLUSTER_KILLS", 2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_partition_leader_killed_again_and_again_loses_nothing_in_either_mode()
-> anyhow::Result<()> {
    let kills_asked = kills();
    let label = format!("leader kill -9 x{kills_asked}");
    let cluster = blocking(|| private_cluster(3, QuorumLayout::OnTheBrokers))?;
    let mut scenario = Scenario::start(&label, &cluster, &MODES, |_| {}).await?;
    let followed = scenario.lanes[0].topic("assignment");
    let mut kills = Vec::new();
    for kill in 1..=kills_asked {
        let leader = blocking(|| scenario.cluster.leader(&followed, 0))?
            .with_context(|| format!("{followed}/0 has no leader before kill {kill}"))?;
        scenario.fault_begins(format!("kill {kill} of node {leader}"));
        blocking(|| scenario.cluster.node(leader).kill())?;
        let moved = blocking(|| {
            scenario
                .cluster
                .wait_for(Duration::from_secs(60), "a new leader", |metadata| {
                    partition_leader(metadata, &followed).is_some_and(|now| now != leader)
                })
        })?;
        tokio::time::sleep(
            Duration::from_millis(BROKER_SESSION_TIMEOUT_MS + 5_000).saturating_sub(moved),
        )
        .await;
        blocking(|| scenario.cluster.node(leader).start())?;
        let in_sync = scenario.wait_until_healed()?;
        scenario.fault_healed()?;
        kills.push(format!(
            "node {leader}: new leader after {:.1} s, back in sync {:.1} s after its restart",
            moved.as_secs_f64(),
            in_sync.as_secs_f64()
        ));
    }
    println!("{label} of {followed}/0: {kills:?}");
    for outcome in scenario.finish().await? {
        outcome.assert_clean();
    }
    Ok(())
}

/// The leader of `topic`'s partition 0 in `metadata`.
fn partition_leader(metadata: &rdkafka::metadata::Metadata, topic: &str) -> Option<i32> {
    let partition = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)?
        .partitions()
        .iter()
        .find(|p| p.id() == 0)?;
    (partition.leader() >= 0).then_some(partition.leader())
}
