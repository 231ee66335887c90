//! A leader kill during a supersede of 5,000 assignments in pages of 100, every page
//! request through the relay and Kafka: the leader killed is the one of the partition that
//! carries the run's page requests, once ten pages ran. The chain must complete by itself,
//! each business moved once, one page in flight at a time, and `ledger reconcile` clean.
//! One delivery mode after the other, on the same cluster: each has its own database,
//! relay and worker.

use std::time::Duration;

use anyhow::Context as _;
use ra_ledger_tests::broker::cluster_timing::BROKER_SESSION_TIMEOUT_MS;
use ra_ledger_tests::cluster::QuorumLayout;
use ra_ledger_tests::stack::private_cluster;
use ra_ledger_tests::worker::{self, RunningWorker, wait_for_run};
use rdkafka::Message as _;
use rdkafka::consumer::{Consumer as _, StreamConsumer};

use super::*;
use crate::reassignment::{assert_all_moved, completed, max_pages_in_flight, seeded, supersede};

/// The partition of `topic` (3 partitions) whose records carry `key`, from the first one
/// read back.
async fn partition_of_key(lane: &Lane, topic: &str, key: &str) -> anyhow::Result<i32> {
    let consumer: StreamConsumer = lane
        .topics
        .client_config()
        .set(
            "group.id",
            format!("find-{}", ra_ledger_tests::random_suffix()),
        )
        .create()?;
    let mut assignment = rdkafka::TopicPartitionList::new();
    for partition in 0..ra_ledger_tests::kafka::TEST_PARTITIONS {
        assignment.add_partition_offset(topic, partition, rdkafka::Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(Ok(message)) =
            tokio::time::timeout(Duration::from_millis(500), consumer.recv()).await
            && message.key() == Some(key.as_bytes())
        {
            return Ok(message.partition());
        }
    }
    anyhow::bail!("no record of key {key} on {topic} within 60 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "on three brokers: deploy/test-cluster runs it (CI time)"]
async fn a_5_000_row_supersede_completes_through_a_leader_kill_in_either_mode() -> anyhow::Result<()>
{
    let cluster = blocking(|| private_cluster(3, QuorumLayout::OnTheBrokers))?;
    for mode in MODES {
        let name = format!("leader kill mid-supersede ({})", mode.as_str());
        let mut scenario = Scenario::start(&name, &cluster, &[mode], |_| {}).await?;
        let lane = &scenario.lanes[0];
        let mut config = worker::test_config(&scenario.database, &lane.topics);
        // Every page through Kafka, so the fault hits the chain's path.
        config.continue_chain = false;
        let requests = config.topic.clone();
        let worker = RunningWorker::start(config);
        let seeded = seeded(&scenario.database, 5_000).await?;
        let (run_id, new) = supersede(&seeded.api, seeded.contact_id, 100).await;
        let partition = partition_of_key(lane, &requests, &run_id.to_string()).await?;
        let at_kill = wait_for_run(&scenario.database, run_id, Duration::from_secs(120), |s| {
            s.pages >= 10
        })
        .await?;
        let leader = blocking(|| cluster.leader(&requests, partition))?
            .with_context(|| format!("{requests}/{partition} has no leader"))?;
        scenario.fault_begins(format!(
            "kill of node {leader}, leader of the run's requests"
        ));
        blocking(|| cluster.node(leader).kill())?;
        tokio::time::sleep(Duration::from_millis(BROKER_SESSION_TIMEOUT_MS + 5_000)).await;
        blocking(|| cluster.node(leader).start())?;
        scenario.wait_until_healed()?;
        scenario.fault_healed()?;
        let healed = Instant::now();
        let status = wait_for_run(
            &scenario.database,
            run_id,
            Duration::from_secs(300),
            completed,
        )
        .await?;
        println!(
            "{name}: node {leader} (leader of {requests}/{partition}) killed at page {} of 51; \
             the run completed {:.1} s after the cluster healed, {} stalls raised",
            at_kill.pages,
            healed.elapsed().as_secs_f64(),
            status.stalls
        );
        assert_eq!(
            (status.replaced, status.failed, status.pages),
            (5_000, 0, 51),
            "{status:#?}"
        );
        assert_all_moved(&seeded, seeded.contact_id, new).await;
        assert_eq!(max_pages_in_flight(&seeded.client, run_id).await, 1);
        worker.stop().await?;
        drop(seeded);
        for outcome in scenario.finish().await? {
            outcome.assert_clean();
        }
    }
    Ok(())
}
