//! `ledger topics create`: the relay's topics, with their configs, where missing.

use ra_ledger::topics::{self, Outcome, Replication};
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
        /// Copies of each partition. Without it: 3, or one per broker on a cluster of fewer,
        /// counted in the cluster's metadata; a factor larger than that is refused.
        /// `min.insync.replicas` is set beside it (2 for 3 copies) unless `--config` sets it.
        #[arg(long, value_parser = clap::value_parser!(i32).range(1..=32_767))]
        replication_factor: Option<i32>,
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
    if let Some(factor) = replication_factor {
        for spec in &mut specs {
            spec.replication = Replication::Exactly(factor);
        }
    }
    topics::configure(&mut specs, &configs).map_err(|error| anyhow::anyhow!("--config {error}"))?;
    let settings = kafka.into_iter().collect();
    let created = topics::create_missing(&brokers, &settings, &specs).await?;
    outln!("{} broker(s) in the cluster's metadata", created.brokers);
    if replication_factor.is_none() && created.brokers < topics::PREFERRED_REPLICATION {
        outln!(
            "note: fewer than {} brokers, so one copy per broker; a broker that is down is not \
             counted (run this with every broker up, or give --replication-factor)",
            topics::PREFERRED_REPLICATION
        );
    }
    for (spec, outcome) in created.topics {
        let configs = spec
            .configs
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join(", ");
        let replicas = spec.replication_factor().unwrap_or_default();
        match outcome {
            Outcome::Created => outln!("created {} ({replicas} replicas, {configs})", spec.name),
            Outcome::Existed => outln!("exists  {} (left as it is)", spec.name),
        }
    }
    Ok(())
}
