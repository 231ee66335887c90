//! `ledger topics create`: the relay's topics, with their configs, where missing.

use ra_ledger::topics::{self, Outcome};
use ra_ledger_cdc::infra::settings::{env, local};

use super::parse_key_value;

/// Topic maintenance.
#[derive(Debug, clap::Subcommand)]
pub enum TopicsCommand {
    /// Create the relay's topics that do not exist yet: the event topics keep everything,
    /// the reassignment topic deletes page requests after 7 days. Existing ones are left
    /// as they are.
    Create {
        /// Kafka bootstrap servers.
        #[arg(long, env = env::KAFKA_BROKERS, default_value = local::KAFKA_BROKERS)]
        brokers: String,
        /// Topic prefix the relay publishes under.
        #[arg(long, env = env::TOPIC_PREFIX, default_value = local::TOPIC_PREFIX)]
        prefix: String,
        /// Partitions of each topic.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=1000))]
        partitions: i32,
        /// Replicas of each partition; -1 for the cluster's `default.replication.factor`.
        #[arg(long, default_value_t = topics::BROKER_DEFAULT_REPLICATION, allow_negative_numbers = true,
              value_parser = parse_replication_factor)]
        replication_factor: i32,
        /// A topic config, `topic:key=value` (e.g. `assignment:retention.ms=604800000`);
        /// repeatable.
        #[arg(long = "config")]
        configs: Vec<String>,
        /// Other librdkafka settings, `key=value` (TLS, SASL); repeatable.
        #[arg(long = "kafka", value_parser = parse_key_value)]
        kafka: Vec<(String, String)>,
    },
}

pub async fn run(command: TopicsCommand) -> anyhow::Result<()> {
    let TopicsCommand::Create {
        brokers,
        prefix,
        partitions,
        replication_factor,
        configs,
        kafka,
    } = command;
    let mut specs = topics::plan(&prefix, partitions);
    for spec in &mut specs {
        spec.replication_factor = replication_factor;
    }
    topics::configure(&mut specs, &configs).map_err(|error| anyhow::anyhow!("--config {error}"))?;
    let settings = kafka.into_iter().collect();
    for (topic, outcome) in topics::create_missing(&brokers, &settings, &specs).await? {
        let spec = specs.iter().find(|spec| spec.name == topic);
        let configs = spec
            .map(|spec| {
                spec.configs
                    .iter()
                    .map(|(key, value)| format!("{key}={value}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        match outcome {
            Outcome::Created => println!("created {topic} ({configs})"),
            Outcome::Existed => println!("exists  {topic} (left as it is)"),
        }
    }
    Ok(())
}

/// `-1` (the cluster's default) or 1 to 32767 replicas.
fn parse_replication_factor(text: &str) -> Result<i32, String> {
    match text.parse::<i32>() {
        Ok(-1) => Ok(-1),
        Ok(n) if (1..=i32::from(i16::MAX)).contains(&n) => Ok(n),
        _ => Err(format!(
            "{text:?} is not a replication factor: give -1 (the cluster's default) or 1 to 32767"
        )),
    }
}
