//! Topics of their own for each test, on the run's broker.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::AdminOptions;

use crate::stack::stack;

/// Partitions of every test topic: more than one, so ordering bugs can show.
pub const TEST_PARTITIONS: i32 = 3;

/// A namespace of topics for one test: `<prefix>.<name>`.
#[derive(Debug)]
pub struct TestTopics {
    /// Unique prefix of this test's topics.
    pub prefix: String,
    /// Bootstrap servers of the broker holding them.
    pub brokers: String,
    created: Vec<String>,
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
            created: Vec::new(),
        }
    }

    /// Creates `<prefix>.<name>` with [`TEST_PARTITIONS`] partitions and returns its name.
    pub async fn create(&mut self, name: &str) -> anyhow::Result<String> {
        let topic = format!("{}.{name}", self.prefix);
        ra_ledger::testing::create_topics(
            &self.brokers,
            std::slice::from_ref(&topic),
            TEST_PARTITIONS,
        )
        .await?;
        self.created.push(topic.clone());
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

impl Drop for TestTopics {
    fn drop(&mut self) {
        if self.created.is_empty() {
            return;
        }
        let topics = std::mem::take(&mut self.created);
        let brokers = self.brokers.clone();
        // Best effort: a shared external broker should not fill up with test topics.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                let admin = ra_ledger::testing::admin_client(&brokers).ok()?;
                let names: Vec<&str> = topics.iter().map(String::as_str).collect();
                admin
                    .delete_topics(
                        &names,
                        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(5))),
                    )
                    .await
                    .ok()
            })
        })
        .join();
    }
}
