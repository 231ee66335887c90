//! `ledger worker`: the reassignment page handler.

use ra_ledger::config::WorkerConfig;
use ra_ledger_cdc::infra::kafka::BOOTSTRAP_SERVERS;
use ra_ledger_cdc::infra::settings::{env, listen_address};

use super::{DatabaseArg, parse_key_value, refused};

/// Arguments of `ledger worker`; each overrides the config file and the environment
/// variable of the same setting ([`ra_ledger::config::WORKER_ENV`]), which the config reads.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// TOML file with the worker's settings; the environment and these flags override it.
    #[arg(long, env = env::WORKER_CONFIG)]
    config: Option<String>,
    /// Kafka bootstrap servers [default: 127.0.0.1:19092].
    #[arg(long)]
    brokers: Option<String>,
    /// The reassignment topic [default: outbox.event.reassignment].
    #[arg(long)]
    topic: Option<String>,
    /// Consumer group shared by every worker [default: ra-ledger-reassignment].
    #[arg(long)]
    group: Option<String>,
    /// Whole-page attempts before a failing page runs row by row [default: 3].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    max_attempts: Option<u32>,
    /// This worker's stable, unique identity in the group (static membership): restarted
    /// within its session, it takes its partitions back at once; a worker that does not
    /// come back gives them up when its session times out [default: none, dynamic
    /// membership].
    #[arg(long)]
    instance_id: Option<String>,
    /// Milliseconds a run may go without progress before its page request is raised again;
    /// 0 never [default: 60000].
    #[arg(long)]
    stall_after_ms: Option<u64>,
    /// Where to serve /metrics; empty to disable [default: 127.0.0.1:19101].
    #[arg(long)]
    metrics_listen: Option<String>,
    /// Other librdkafka consumer settings, `key=value`; repeatable.
    #[arg(long = "kafka", value_parser = parse_key_value)]
    kafka: Vec<(String, String)>,
}

/// Runs `ledger worker`. Every error it returns is [`refused`]: a configuration that cannot
/// work, or one the worker found before it started ([`ra_ledger::worker::WorkerError`]: a
/// pool it cannot build, a consumer librdkafka refuses, a secret file gone). Once started it
/// rides out every database and Kafka failure itself.
pub async fn run(database: &DatabaseArg, args: WorkerArgs) -> anyhow::Result<()> {
    let mut config = WorkerConfig::load(args.config.as_deref()).map_err(refused)?;
    if database.explicit {
        config.database_url = database.url.as_str().into();
    }
    if let Some(brokers) = args.brokers {
        config.kafka.insert(BOOTSTRAP_SERVERS.into(), brokers);
    }
    config.topic = args.topic.unwrap_or(config.topic);
    config.group_id = args.group.unwrap_or(config.group_id);
    config.max_attempts = args.max_attempts.unwrap_or(config.max_attempts);
    config.instance_id = args.instance_id.or(config.instance_id);
    config.stall_after_ms = args.stall_after_ms.unwrap_or(config.stall_after_ms);
    if let Some(listen) = args.metrics_listen {
        config.metrics_listen = listen_address("--metrics-listen", &listen).map_err(refused)?;
    }
    config.kafka.extend(args.kafka);
    config.resolve_secrets().map_err(refused)?;
    config.validate().map_err(refused)?;
    ra_ledger::worker::run_process(config)
        .await
        .map_err(refused)
}
