//! Runs that heal themselves: the broker killed mid-chain (on a broker of its own, since the
//! fault would pull the ground from under the other tests), the reassignment topic deleted
//! and recreated mid-run.

use std::process::Child;
use std::time::Instant;

use ra_ledger_tests::stack::private_broker;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;

use super::*;

/// A worker's stall counter, from its metrics.
fn stalls(worker: &RunningWorker) -> u64 {
    ra_ledger_tests::metric(&worker.metrics.render(), ra_ledger::metrics::STALLS.name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_5_000_survives_a_broker_kill_minus_nine_mid_chain() -> anyhow::Result<()> {
    let broker = private_broker()?;
    let (database, _topics, relay, mut config) =
        relayed_on(TestTopics::on(broker.brokers())).await?;
    // Every page through Kafka, so the fault hits the chain's path (a worker running each
    // next page at once would carry the chain past the broker's death on its own).
    config.continue_chain = false;
    let worker = RunningWorker::start(config.clone());
    let seeded = seeded(&database, 5_000).await?;
    let (run_id, new) = supersede(&seeded.api, seeded.contact_id, 100).await;
    let at_kill = wait_for_run(&database, run_id, Duration::from_secs(120), |s| {
        s.pages >= 10
    })
    .await?;
    broker.kill()?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    broker.start()?;
    let restarted = Instant::now();
    // No step by hand: the relay, the worker and the chain pick up where they were.
    let status = wait_for_run(&database, run_id, Duration::from_secs(240), completed).await?;
    println!(
        "broker killed at page {} of 51; completed {:.1} s after its restart, {} stalls noticed",
        at_kill.pages,
        restarted.elapsed().as_secs_f64(),
        stalls(&worker)
    );
    assert_eq!(
        (status.replaced, status.failed, status.pages),
        (5_000, 0, 51),
        "{status:#?}"
    );
    assert_all_moved(&seeded, seeded.contact_id, new).await;
    assert_eq!(max_pages_in_flight(&seeded.client, run_id).await, 1);
    worker.stop().await?;
    relay.stop().await?;
    Ok(())
}

/// Processes kept running the way a supervisor (systemd's `Restart=always`) keeps them:
/// started again whenever they exit. Counts the restarts.
struct Supervised {
    name: &'static str,
    start: Box<dyn Fn() -> anyhow::Result<Child> + Send>,
    child: Child,
    restarts: Vec<String>,
}

impl Supervised {
    fn new(
        name: &'static str,
        start: impl Fn() -> anyhow::Result<Child> + Send + 'static,
    ) -> anyhow::Result<Self> {
        let child = start()?;
        Ok(Self {
            name,
            start: Box::new(start),
            child,
            restarts: Vec::new(),
        })
    }

    /// Restarts the process if it has exited.
    fn tend(&mut self) -> anyhow::Result<()> {
        if let Some(exit) = self.child.try_wait()? {
            eprintln!(
                "{} exited ({exit}); restarting it as a supervisor would",
                self.name
            );
            self.restarts.push(exit.to_string());
            self.child = (self.start)()?;
        }
        Ok(())
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// Longer than our usual function on purpose: one scenario, or one table of cases, read
// top to bottom; split into pieces, the order of its steps would be harder to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_completes_when_its_topic_is_deleted_and_recreated_mid_run() -> anyhow::Result<()> {
    // On the run's broker: Kafka deletes only the topic named, so the other tests' topics
    // are not touched.
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let relay_config = ra_ledger_tests::relay::test_config(&database, &mut topics).await?;
    let mut config = worker::test_config(&database, &topics);
    // A short stall time: the page request in flight when the topic went is gone with it,
    // and only the stall watcher raises it again.
    config.stall_after_ms = 3_000;
    // Every page through Kafka, so the request in flight is the one the topic takes along.
    config.continue_chain = false;
    // Processes under a supervisor, as deployed: librdkafka 2.12 clients sometimes crash
    // (SIGSEGV in their metadata cache) when a topic they use is recreated with a new id.
    let mut relay = Supervised::new("relay", move || {
        crate::relay_faults::spawn_relay(&relay_config)
    })?;
    let worker_config = config.clone();
    let mut worker = Supervised::new("worker", move || {
        worker::spawn(env!("CARGO_BIN_EXE_worker-under-test"), &worker_config)
    })?;
    let seeded = seeded(&database, 2_000).await?;
    let (run_id, new) = supersede(&seeded.api, seeded.contact_id, 100).await;
    let at_delete = wait_for_run(&database, run_id, Duration::from_secs(120), |s| {
        s.pages >= 5
    })
    .await?;

    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &topics.brokers)
        .create()?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin
        .delete_topics(&[config.topic.as_str()], &options)
        .await?
    {
        result.map_err(|(topic, code)| anyhow::anyhow!("cannot delete {topic}: {code}"))?;
    }
    drop(admin);
    // Apache Kafka deletes that one topic; the others and the broker carry on. What the
    // clients then do is what this test reports: the relay's producer and the worker's
    // consumer see the topic vanish, and the test recreates it at once.
    // Kafka deletes a topic in the background: until it is gone, creating it again is
    // refused (TopicAlreadyExists), so try until it is back.
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(error) = ra_ledger_testing::create_topics(
        &topics.brokers,
        std::slice::from_ref(&config.topic),
        ra_ledger_tests::kafka::TEST_PARTITIONS,
    )
    .await
    {
        anyhow::ensure!(
            Instant::now() < deadline,
            "cannot recreate {}: {error}",
            config.topic
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let recreated = Instant::now();

    let status = loop {
        relay.tend()?;
        worker.tend()?;
        let status = wait_for_run(&database, run_id, Duration::ZERO, |_| true).await?;
        if completed(&status) {
            break status;
        }
        anyhow::ensure!(
            recreated.elapsed() < Duration::from_secs(180),
            "the run did not complete within 180 s of the topics' return: {status:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!(
        "topic deleted at page {} of 21; completed {:.1} s after it was recreated; \
         {} stalls raised again; processes restarted: relay {:?}, worker {:?}",
        at_delete.pages,
        recreated.elapsed().as_secs_f64(),
        status.stalls,
        relay.restarts,
        worker.restarts,
    );
    assert_eq!(
        (status.replaced, status.failed, status.pages),
        (2_000, 0, 21),
        "{status:#?}"
    );
    assert_all_moved(&seeded, seeded.contact_id, new).await;
    assert_eq!(max_pages_in_flight(&seeded.client, run_id).await, 1);
    Ok(())
}
