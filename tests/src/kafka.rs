//! Topics of their own for each test, on the run's broker.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::stack::stack;

/// Partitions of every test topic: more than one, so ordering bugs can show.
pub const TEST_PARTITIONS: i32 = 3;

/// A namespace of topics for one test: `<prefix>.<name>`.
///
/// Dropped, it deletes every topic of its broker whose name starts with `<prefix>.` (the
/// ones it created and any a test made there, such as replay topics): a long run keeps the
/// broker's partition count small, and an external broker is left clean.
#[derive(Debug)]
pub struct TestTopics {
    /// Unique prefix of this test's topics.
    pub prefix: String,
    /// Bootstrap servers of the broker holding them.
    pub brokers: String,
    /// librdkafka settings every client of these topics needs (TLS, SASL).
    pub client: BTreeMap<String, String>,
}

impl TestTopics {
    /// A fresh, empty namespace on the run's broker.
    pub fn new() -> Self {
        Self::on(stack().kafka_brokers.clone())
    }

    /// A fresh, empty namespace on another broker.
    pub fn on(brokers: String) -> Self {
        Self {
            prefix: format!("t{}", crate::random_suffix()),
            brokers,
            client: BTreeMap::new(),
        }
    }

    /// A client configuration for these topics' broker.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.brokers);
        for (key, value) in &self.client {
            config.set(key, value);
        }
        config
    }

    /// Creates `<prefix>.<name>` with [`TEST_PARTITIONS`] partitions and returns its name.
    pub async fn create(&mut self, name: &str) -> anyhow::Result<String> {
        self.create_with_partitions(name, TEST_PARTITIONS).await
    }

    /// Creates `<prefix>.<name>` with `partitions` partitions and returns its name.
    pub async fn create_with_partitions(
        &mut self,
        name: &str,
        partitions: i32,
    ) -> anyhow::Result<String> {
        let topic = format!("{}.{name}", self.prefix);
        ra_ledger_testing::create_topics_with(
            self.client_config(),
            std::slice::from_ref(&topic),
            partitions,
        )
        .await?;
        Ok(topic)
    }

    /// Writes `value` keyed by `key` to partition 0 of `topic`, outside any transaction (a
    /// position record forged or written ahead by a test).
    pub async fn write_record(&self, topic: &str, key: &str, value: &str) -> anyhow::Result<()> {
        let producer: FutureProducer = self.client_config().create()?;
        producer
            .send(
                FutureRecord::to(topic).partition(0).key(key).payload(value),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(error, _)| error)?;
        Ok(())
    }
}

impl Drop for TestTopics {
    fn drop(&mut self) {
        let config = self.client_config();
        let prefix = format!("{}.", self.prefix);
        // On a thread of its own, joined: a drop may run inside the test's runtime, and a
        // Kafka client still working when the process exits can crash it.
        let deleted = std::thread::Builder::new()
            .name("delete-test-topics".into())
            .spawn(move || {
                futures::executor::block_on(ra_ledger_testing::delete_topics_with(config, &prefix))
            })
            .map(|thread| thread.join());
        match deleted {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => eprintln!("deleting the topics {}.*: {error:#}", self.prefix),
            _ => eprintln!("deleting the topics {}.*: the thread failed", self.prefix),
        }
    }
}

impl Default for TestTopics {
    fn default() -> Self {
        Self::new()
    }
}

/// Client settings for the run's broker.
pub fn client_config() -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &stack().kafka_brokers);
    config
}
