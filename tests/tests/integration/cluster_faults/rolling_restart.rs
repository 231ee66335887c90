//! A rolling restart of all three brokers, as an operator upgrades a cluster: each in turn
//! stopped cleanly (SIGTERM, a controlled shutdown that hands its leaderships over first),
//! started again, and the next one only once every partition is back in sync.

use std::time::Instant;

use ra_ledger_tests::cluster::QuorumLayout;
use ra_ledger_tests::stack::private_cluster;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "on three brokers: deploy/test-cluster runs it (CI time)"]
async fn a_rolling_restart_of_all_three_brokers_loses_nothing_in_either_mode() -> anyhow::Result<()>
{
    let cluster = blocking(|| private_cluster(3, QuorumLayout::OnTheBrokers))?;
    let mut scenario = Scenario::start("rolling restart", &cluster, &MODES, |_| {}).await?;
    let mut restarts = Vec::new();
    for node in 1..=3 {
        scenario.fault_begins(format!("restart of node {node}"));
        let began = Instant::now();
        blocking(|| cluster.node(node).stop())?;
        let stopped = began.elapsed();
        blocking(|| cluster.node(node).start())?;
        let started = began.elapsed();
        scenario.wait_until_healed()?;
        scenario.fault_healed()?;
        restarts.push(format!(
            "node {node}: stopped after {:.1} s, up after {:.1} s, all in sync after {:.1} s",
            stopped.as_secs_f64(),
            started.as_secs_f64(),
            began.elapsed().as_secs_f64()
        ));
    }
    println!("rolling restart: {restarts:?}");
    for outcome in scenario.finish().await? {
        outcome.assert_clean();
    }
    Ok(())
}
