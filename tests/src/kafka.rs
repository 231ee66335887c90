//! Topics of their own for each test, on the run's broker.

use std::collections::BTreeMap;

use rdkafka::ClientConfig;

use crate::stack::stack;

/// Partitions of every test topic: more than one, so ordering bugs can show.
pub const TEST_PARTITIONS: i32 = 3;

/// A namespace of topics for one test: `<prefix>.<name>`.
///
/// Topics are never deleted afterwards. tansu 0.6.0 with SQLite storage deletes every topic of
/// the cluster when asked to delete one (its `topic_delete_by.sql` selects by cluster), which
/// would pull the topics out from under every other test still running. The run's own broker
/// is thrown away with its directory; on an external broker the `t<random>.` topics stay.
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
        let topic = format!("{}.{name}", self.prefix);
        ra_ledger::testing::create_topics_with(
            self.client_config(),
            std::slice::from_ref(&topic),
            TEST_PARTITIONS,
        )
        .await?;
        Ok(topic)
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
