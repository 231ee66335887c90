//! Two of three brokers killed for 30 s. `acks=all` with `min.insync.replicas=2` cannot be
//! met by one broker: produces are refused, and the relay must wait, confirming nothing it
//! has not had acknowledged (neither its slot's position nor its published count moves),
//! then go on by itself when the brokers return.
//!
//! With the quorum on a controller of its own the survivor's in-sync set shrinks to itself
//! and Kafka refuses produces with NOT_ENOUGH_REPLICAS, which a probe producer sees. With
//! the quorum on the brokers, two nodes down is a quorum lost too: nothing moves, the
//! survivor keeps the old in-sync set and produces time out instead. Both are run.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use ra_ledger_tests::cluster::QuorumLayout;
use ra_ledger_tests::stack::private_cluster;
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;

use super::*;

/// How long the two brokers stay down.
const DOWN: Duration = Duration::from_secs(30);
/// From the kill on, nothing can be acknowledged: the samples start after this much (acks
/// of records every replica had before the kill may still land in the first moments).
const SETTLED: Duration = Duration::from_secs(5);

/// What a lane has confirmed: its slot's confirmed position and the events it reports
/// published.
async fn confirmed(lane: &Lane, client: &tokio_postgres::Client) -> anyhow::Result<(String, u64)> {
    let lsn: String = client
        .query_one(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&lane.config.slot],
        )
        .await?
        .get(0);
    Ok((lsn, lane.published()))
}

/// One `acks=all` record to `topic`'s partition 0, without retries (so a refusal is seen
/// as itself, not as a timeout) and without idempotence (which needs retries).
async fn probe(brokers: &str, topic: &str) -> Result<(), KafkaError> {
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("acks", "all")
        .set("enable.idempotence", "false")
        .set("retries", "0")
        .set("message.timeout.ms", "10000")
        .create()?;
    producer
        .send(
            FutureRecord::to(topic)
                .partition(0)
                .key("probe")
                .payload("probe"),
            Duration::from_secs(10),
        )
        .await
        .map(|_| ())
        .map_err(|(error, _)| error)
}

async fn two_of_three_down(layout: QuorumLayout) -> anyhow::Result<()> {
    let cluster = blocking(|| private_cluster(3, layout))?;
    let name = format!("two of three brokers down 30 s ({layout:?})");
    let mut scenario = Scenario::start(&name, &cluster, &MODES, |_| {}).await?;
    let mut probes = TestTopics::on(cluster.brokers());
    let probe_topic = probes.create_with_partitions("probe", 1).await?;
    probe(&cluster.brokers(), &probe_topic).await?;
    // Node 3 survives; the probe partition is led by it once the others are gone.
    let client = scenario.database.connect().await?;
    scenario.fault_begins("nodes 1 and 2 killed");
    let killed = Instant::now();
    blocking(|| cluster.node(1).kill().and_then(|()| cluster.node(2).kill()))?;
    tokio::time::sleep(SETTLED).await;
    let first: Vec<(String, u64)> = {
        let mut first = Vec::new();
        for lane in &scenario.lanes {
            first.push(confirmed(lane, &client).await?);
        }
        first
    };
    let written_at_first = scenario.written();
    let mut refusals = Vec::new();
    let mut moved = Vec::new();
    while killed.elapsed() < DOWN {
        if killed.elapsed() > SETTLED * 3 && refusals.is_empty() {
            match probe(&cluster.brokers(), &probe_topic).await {
                Ok(()) => {
                    anyhow::bail!("an acks=all record was acknowledged with one broker of three up")
                }
                Err(error) => refusals.push(error),
            }
        }
        for (lane, first) in scenario.lanes.iter().zip(&first) {
            let now = confirmed(lane, &client).await?;
            if now != *first {
                moved.push(format!(
                    "{}: {first:?} -> {now:?} at {:.1} s",
                    lane.mode.as_str(),
                    killed.elapsed().as_secs_f64()
                ));
            }
        }
        scenario.ensure_relays_run()?;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let written_meanwhile = scenario.written() - written_at_first;
    let isr = blocking(|| cluster.in_sync(&probe_topic, 0))?;
    blocking(|| cluster.start_nodes(&[1, 2]))?;
    let in_sync = scenario.wait_until_healed()?;
    scenario.fault_healed()?;
    println!(
        "{name}: positions held at {first:?} from {SETTLED:?} after the kill to the restart \
         while {written_meanwhile} events were written; the probe's in-sync set before the \
         restart {isr:?}, its refusal: {refusals:?}; every partition in sync {:.1} s after \
         the restart",
        in_sync.as_secs_f64()
    );
    assert!(
        moved.is_empty(),
        "a relay confirmed while Kafka could not acknowledge: {moved:?}"
    );
    assert!(
        written_meanwhile > 0,
        "nothing was written while the brokers were down"
    );
    let refusal = refusals.first().context("no probe was sent")?;
    if layout == QuorumLayout::OwnController {
        assert_eq!(
            refusal.rdkafka_error_code(),
            Some(RDKafkaErrorCode::NotEnoughReplicas),
            "{refusal}"
        );
        assert_eq!(isr, [3], "the survivor's in-sync set");
    }
    for outcome in scenario.finish().await? {
        outcome.assert_clean();
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "on three brokers: deploy/test-cluster runs it (CI time)"]
async fn two_of_three_brokers_down_are_refused_and_the_relay_waits_then_goes_on()
-> anyhow::Result<()> {
    two_of_three_down(QuorumLayout::OwnController).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "on three brokers: deploy/test-cluster runs it (CI time)"]
async fn two_of_three_nodes_down_with_the_quorum_on_them_time_out_and_the_relay_waits()
-> anyhow::Result<()> {
    two_of_three_down(QuorumLayout::OnTheBrokers).await
}
