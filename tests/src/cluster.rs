//! A cluster of three Apache Kafka nodes for the tests of broker faults: leaders that move,
//! in-sync replicas that shrink and grow, transaction coordinators that fail over.
//!
//! Every node is a broker and a voter of the KRaft quorum, or the brokers leave the quorum
//! to a controller of its own ([`QuorumLayout`]); topics get three copies with `min.insync.replicas=2` (the internal ones too), unclean
//! leader election stays off. Failure detection is shortened for test speed
//! ([`crate::broker::cluster_timing`]).
//!
//! The cluster answers what a fault test needs to aim and to wait: which node leads a
//! partition, whether every partition is back in sync, which node coordinates a
//! transactional id. Nothing here touches the relay: a test that waits for the cluster
//! waits for Kafka, not for the system under test.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::metadata::Metadata;

pub use crate::broker::QuorumLayout;
use crate::broker::{BrokerServer, kafka_libs};

/// How long the whole cluster may take to start: three JVMs on two cores.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Whether a cluster of this test process runs, and its waiters' bell.
///
/// One cluster at a time: three JVMs and two relays under load fill two cores, and two
/// such clusters side by side (the test harness runs tests in parallel) starved each
/// other's restarted nodes past their start timeout. The other tests still run beside it.
static CLUSTER_RUNS: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

/// A cluster's turn: taken when it starts (waiting while another cluster of the process
/// runs), given back when it is dropped.
struct Turn;

impl Turn {
    fn take() -> Self {
        let (runs, bell) = &CLUSTER_RUNS;
        let mut runs = bell
            .wait_while(runs.lock().unwrap_or_else(|e| e.into_inner()), |runs| *runs)
            .unwrap_or_else(|e| e.into_inner());
        *runs = true;
        Self
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let (runs, bell) = &CLUSTER_RUNS;
        *runs.lock().unwrap_or_else(|e| e.into_inner()) = false;
        bell.notify_one();
    }
}

/// Nodes of an Apache Kafka cluster started by the harness.
pub struct BrokerCluster {
    /// Its brokers, `node_id` 1, 2, 3 in this order.
    pub nodes: Vec<BrokerServer>,
    /// The controller-only node, with [`QuorumLayout::OwnController`].
    pub controller: Option<BrokerServer>,
    /// A client for metadata requests, bootstrapped from every node.
    probe: BaseConsumer,
    /// Its turn, given back after its nodes were killed (the field is dropped after
    /// [`BrokerCluster::drop`] ran).
    _turn: Turn,
}

impl std::fmt::Debug for BrokerCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BrokerCluster({})", self.brokers())
    }
}

impl BrokerCluster {
    /// Starts `size` brokers (and their controller, by `layout`) in `dir` together and
    /// waits until the metadata lists every broker; first waits until no other cluster of
    /// the test process runs.
    pub fn start(dir: &Path, size: usize, layout: QuorumLayout) -> anyhow::Result<Self> {
        let turn = Turn::take();
        let mut nodes = BrokerServer::members(dir, size, layout)?;
        // Formatted and spawned side by side: a format is a JVM run of its own, seconds on
        // a busy machine, and no node is ready before a majority of its quorum runs.
        let pids = std::thread::scope(|scope| {
            let spawning: Vec<_> = nodes
                .iter()
                .map(|node| scope.spawn(|| node.spawn()))
                .collect();
            spawning
                .into_iter()
                .map(|thread| thread.join().expect("a spawning thread panicked"))
                .collect::<anyhow::Result<Vec<u32>>>()
        })?;
        for (node, pid) in nodes.iter().zip(pids) {
            node.wait_until_ready(pid)?;
        }
        let controller = match layout {
            QuorumLayout::OnTheBrokers => None,
            QuorumLayout::OwnController => nodes.pop(),
        };
        let probe = ClientConfig::new()
            .set("bootstrap.servers", brokers_of(&nodes))
            .set("log_level", "0")
            .create()?;
        let cluster = Self {
            nodes,
            controller,
            probe,
            _turn: turn,
        };
        cluster.wait_for(START_TIMEOUT, "every broker in the metadata", |metadata| {
            metadata.brokers().len() == size
        })?;
        Ok(cluster)
    }

    /// Starts the brokers `node_ids` again (after a kill or a stop) side by side, and waits
    /// until each is ready.
    pub fn start_nodes(&self, node_ids: &[i32]) -> anyhow::Result<()> {
        let pids = node_ids
            .iter()
            .map(|&id| self.node(id).spawn())
            .collect::<anyhow::Result<Vec<u32>>>()?;
        for (&id, pid) in node_ids.iter().zip(pids) {
            self.node(id).wait_until_ready(pid)?;
        }
        Ok(())
    }

    /// Bootstrap servers: every node's client listener.
    pub fn brokers(&self) -> String {
        brokers_of(&self.nodes)
    }

    /// The node of `node_id`.
    ///
    /// # Panics
    /// When the cluster has no such node.
    pub fn node(&self, node_id: i32) -> &BrokerServer {
        self.nodes
            .iter()
            .find(|node| node.node_id == node_id)
            .unwrap_or_else(|| panic!("no node {node_id} in {self:?}"))
    }

    /// The cluster's metadata, as a live node answers it now.
    pub fn metadata(&self) -> anyhow::Result<Metadata> {
        Ok(self.probe.fetch_metadata(None, Duration::from_secs(5))?)
    }

    /// The leader of `topic`'s `partition`, when it has one.
    pub fn leader(&self, topic: &str, partition: i32) -> anyhow::Result<Option<i32>> {
        let metadata = self.metadata()?;
        let found = partition_of(&metadata, topic, partition)
            .with_context(|| format!("{topic}/{partition} is not in the metadata"))?;
        Ok(found.0)
    }

    /// The in-sync replicas of `topic`'s `partition`.
    pub fn in_sync(&self, topic: &str, partition: i32) -> anyhow::Result<Vec<i32>> {
        let metadata = self.metadata()?;
        let found = partition_of(&metadata, topic, partition)
            .with_context(|| format!("{topic}/{partition} is not in the metadata"))?;
        Ok(found.2)
    }

    /// The replicas of every partition of `topic`.
    pub fn replicas(&self, topic: &str) -> anyhow::Result<Vec<Vec<i32>>> {
        let metadata = self.metadata()?;
        let found = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .with_context(|| format!("{topic} is not in the metadata"))?;
        Ok(found
            .partitions()
            .iter()
            .map(|p| p.replicas().to_vec())
            .collect())
    }

    /// Waits until `done(metadata)` holds, at most `timeout`; `what` names it in the error.
    pub fn wait_for(
        &self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&Metadata) -> bool,
    ) -> anyhow::Result<Duration> {
        let started = Instant::now();
        loop {
            if let Ok(metadata) = self.metadata()
                && done(&metadata)
            {
                return Ok(started.elapsed());
            }
            if started.elapsed() > timeout {
                bail!("{self:?}: not {what} within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until every broker is in the metadata and every partition of every topic
    /// (the internal ones included) has a leader and all its replicas in sync: the cluster
    /// healed. Returns how long that took.
    pub fn wait_until_in_sync(&self, timeout: Duration) -> anyhow::Result<Duration> {
        let size = self.nodes.len();
        self.wait_for(timeout, "every partition in sync", |metadata| {
            metadata.brokers().len() == size
                && metadata.topics().iter().all(|topic| {
                    topic.partitions().iter().all(|p| {
                        p.leader() >= 0
                            && p.error().is_none()
                            && p.isr().len() == p.replicas().len()
                    })
                })
        })
    }

    /// The node that coordinates `transactional_id`, as Kafka's own tool reports it
    /// (`kafka-transactions describe`, `org.apache.kafka.tools.TransactionsCommand`).
    pub fn transaction_coordinator(&self, transactional_id: &str) -> anyhow::Result<i32> {
        let libs = kafka_libs()?;
        let output = Command::new("java")
            .args(crate::broker::TEST_JVM)
            .arg("-Xmx256m")
            .arg("-cp")
            .arg(format!("{}/*", libs.display()))
            .arg("-Dlog4j2.level=error")
            .arg("org.apache.kafka.tools.TransactionsCommand")
            .args(["--bootstrap-server", &self.brokers()])
            .args(["describe", "--transactional-id", transactional_id])
            .stdin(Stdio::null())
            .output()
            .context("running java (TransactionsCommand)")?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            bail!(
                "kafka-transactions describe {transactional_id}: {stdout}{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        coordinator_of(&stdout)
            .with_context(|| format!("no coordinator in kafka-transactions' answer: {stdout}"))
    }
}

impl Drop for BrokerCluster {
    /// Kills every node still running: a cluster lives as long as its test, not as long as
    /// the test binary (the keeper would otherwise hold its JVMs until the run ends). Then
    /// the next cluster may start (its turn, a field, is dropped after this).
    fn drop(&mut self) {
        for node in self.nodes.iter().chain(&self.controller) {
            if node.running()
                && let Err(error) = node.kill()
            {
                eprintln!(
                    "killing the Kafka node in {}: {error:#}",
                    node.dir.display()
                );
            }
        }
    }
}

/// The `CoordinatorId` column of `kafka-transactions describe`'s table (a header line,
/// then one line per transactional id).
fn coordinator_of(table: &str) -> Option<i32> {
    let mut lines = table.lines().filter(|line| !line.trim().is_empty());
    let header: Vec<&str> = lines.next()?.split_whitespace().collect();
    let column = header.iter().position(|name| *name == "CoordinatorId")?;
    lines.next()?.split_whitespace().nth(column)?.parse().ok()
}

/// `(leader, replicas, in-sync replicas)` of `topic`'s `partition`; the leader is `None`
/// while the partition has none.
fn partition_of(
    metadata: &Metadata,
    topic: &str,
    partition: i32,
) -> Option<(Option<i32>, Vec<i32>, Vec<i32>)> {
    let found = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)?
        .partitions()
        .iter()
        .find(|p| p.id() == partition)?;
    let leader = (found.leader() >= 0).then_some(found.leader());
    Some((leader, found.replicas().to_vec(), found.isr().to_vec()))
}

fn brokers_of(nodes: &[BrokerServer]) -> String {
    nodes
        .iter()
        .map(BrokerServer::brokers)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coordinator_column_is_read_from_the_tools_table() {
        let table = "CoordinatorId\tTransactionalId\tProducerId\tProducerEpoch\tTransactionState\n\
                     2\tra-ledger-relay-7-slot\t0\t3\tOngoing\n";
        assert_eq!(coordinator_of(table), Some(2));
        assert_eq!(coordinator_of("CoordinatorId\n"), None);
        assert_eq!(coordinator_of(""), None);
    }
}
