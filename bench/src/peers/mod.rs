//! `ledger-bench peers`: the relay and Debezium (Kafka Connect standalone with the
//! PostgreSQL connector and the Outbox Event Router) side by side on one machine, one at a
//! time, each as a process of its own on its own scratch database, slot and topics, with the
//! same load and the same consumer (docs/peers.md): a drain of a backlog written
//! beforehand, steady loads, and a kill -9 under load.

mod load;
mod phases;
pub(super) mod process;
mod report;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ra_ledger::db;
use ra_ledger_cdc::infra::settings::{env, local};
use uuid::Uuid;

use crate::scratch;
use load::Delivery;
use phases::Figures;

/// The systems compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum System {
    /// `ledger relay`.
    Relay,
    /// Debezium on Kafka Connect.
    Debezium,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            Self::Relay => "relay",
            Self::Debezium => "debezium",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Rows of the backlog drained.
    pub rows: u64,
    /// Rows per transaction of the backlog.
    pub per_transaction: u64,
    /// Rates of the steady phases, events/s.
    pub rates: Vec<u64>,
    /// Length of each steady phase.
    pub seconds: u64,
    /// Rate while a system is killed.
    pub kill_rate: u64,
    /// Length of the kill phase (the kill comes a third into it).
    pub kill_seconds: u64,
    /// Which systems, in this order.
    pub systems: Vec<System>,
    /// `deploy/peers`, run as `<it> connect WORKER CONNECTOR`.
    pub connect_command: PathBuf,
    /// Where each system's logs, properties and offsets go.
    pub work_dir: PathBuf,
}

/// `ledger-bench peers`'s command line: the [`Options`] as typed, and the broker.
#[derive(Debug, clap::Args)]
pub struct Arguments {
    /// Outbox rows in the backlog each system drains.
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Rows per transaction of the backlog.
    #[arg(long, default_value_t = 100)]
    per_transaction: u64,
    /// Rates of the steady phases, events/s.
    #[arg(long, value_delimiter = ',', default_value = "2000,10000")]
    rates: Vec<u64>,
    /// Seconds of each steady phase.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Events/s while each system is killed with SIGKILL and restarted.
    #[arg(long, default_value_t = 2_000)]
    kill_rate: u64,
    /// Seconds of the kill phase; the kill comes a third into it.
    #[arg(long, default_value_t = 30)]
    kill_seconds: u64,
    /// Systems to run, one after the other.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "relay,debezium"
    )]
    systems: Vec<System>,
    /// deploy/peers, which `connect WORKER CONNECTOR` execs Kafka Connect.
    #[arg(long, default_value = "deploy/peers")]
    connect_command: PathBuf,
    /// Folder for each system's logs, properties and offsets (default: a new one in the
    /// temporary folder).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Kafka bootstrap servers.
    #[arg(long, env = env::KAFKA_BROKERS, default_value = local::KAFKA_BROKERS)]
    brokers: String,
}

impl Arguments {
    /// The options, with a new folder in the temporary folder when none was given, and the
    /// brokers.
    pub fn into_options(self) -> (Options, String) {
        let work_dir = self.work_dir.unwrap_or_else(|| {
            std::env::temp_dir().join(format!("ledger-bench-peers-{}", Uuid::new_v4().simple()))
        });
        let options = Options {
            rows: self.rows,
            per_transaction: self.per_transaction,
            rates: self.rates,
            seconds: self.seconds,
            kill_rate: self.kill_rate,
            kill_seconds: self.kill_seconds,
            systems: self.systems,
            connect_command: self.connect_command,
            work_dir,
        };
        (options, self.brokers)
    }
}

/// How long the consumer waits for a next event before it calls the rest lost: longer than
/// a JVM's start and the connector's retries of a slot still held by its killed walsender.
const IDLE: Duration = Duration::from_secs(90);

pub async fn run(database_url: &str, brokers: &str, options: Options) -> anyhow::Result<()> {
    if options.rows == 0 || options.per_transaction == 0 || options.seconds == 0 {
        anyhow::bail!("--rows, --per-transaction and --seconds must be at least 1");
    }
    if options.rates.contains(&0) || options.kill_rate == 0 || options.kill_seconds < 3 {
        anyhow::bail!("--rates and --kill-rate must be at least 1, --kill-seconds at least 3");
    }
    std::fs::create_dir_all(&options.work_dir)?;
    report::print_settings(&options);
    let ceiling = ceiling(database_url, brokers, &options).await?;
    outln!(
        "ceiling: rdkafka alone producing {} rows {:.0} rows/s; the consumer alone reading them {:.0} rows/s",
        options.rows,
        ceiling.produce,
        ceiling.consume
    );
    let mut results = Vec::new();
    for system in &options.systems {
        eprintln!("— {} —", system.name());
        let figures = measure(database_url, brokers, *system, &options).await?;
        report::print_figures(*system, &figures, &options);
        results.push((*system, figures));
    }
    report::print_comparison(&results, &options);
    outln!(
        "logs, properties and offsets: {}",
        options.work_dir.display()
    );
    Ok(())
}

/// The broker's and the consumer's ceilings, rows/s.
struct Ceiling {
    produce: f64,
    consume: f64,
}

/// rdkafka alone producing the backlog's messages (as `ledger-bench relay` does), then the
/// benchmark's consumer alone reading them back.
async fn ceiling(url: &str, brokers: &str, options: &Options) -> anyhow::Result<Ceiling> {
    let scratch = scratch::database(url).await?;
    let client = db::connect(&scratch.url, "ledger-bench").await?;
    eprintln!("ceiling: {} rows…", options.rows);
    load::backlog(&client, "drain", 0, options.rows, options.per_transaction).await?;
    let topic = format!("{}raw", scratch::topic_prefix(brokers, ""));
    ra_ledger_testing::create_topics(brokers, std::slice::from_ref(&topic), 3).await?;
    let config = scratch.relay_config(String::new(), String::new(), brokers);
    // 120-byte values, as the backlog's payloads are.
    let keys = crate::relay::backlog_keys(&client).await?;
    let produce = crate::relay::rdkafka_alone(
        &config,
        &topic,
        &keys,
        options.per_transaction,
        &[b'x'; 120],
    )
    .await?;
    let consumer = crate::latency::assigned_consumer(brokers, &topic)?;
    let delivery = consume_all(consumer, options.rows).await;
    let (Some(first), Some(last)) = (delivery.first, delivery.last_new) else {
        anyhow::bail!("ceiling: the consumer read nothing back from {topic}");
    };
    // First message to last, as the systems' drains are timed.
    let consume = delivery.messages as f64 / last.duration_since(first).as_secs_f64();
    drop(client);
    scratch.drop().await?;
    Ok(Ceiling { produce, consume })
}

/// Every message of a topic, whatever its shape (the ceiling's payloads carry no sequence
/// number).
async fn consume_all(consumer: rdkafka::consumer::StreamConsumer, expected: u64) -> Delivery {
    use futures::StreamExt as _;
    let mut delivery = Delivery::default();
    let mut stream = consumer.stream();
    while delivery.messages < expected {
        match tokio::time::timeout(Duration::from_secs(30), stream.next()).await {
            Ok(Some(Ok(message))) => {
                if ra_ledger_cdc::consumer::event_router::read(&message).is_ok() {
                    let now = Instant::now();
                    delivery.first.get_or_insert(now);
                    delivery.last_new = Some(now);
                    delivery.messages += 1;
                }
            }
            _ => break,
        }
    }
    delivery
}

/// One system: its own scratch database, slot and topics; the drain, the steady phases and
/// the kill, all on one process (restarted once, by the kill).
async fn measure(
    url: &str,
    brokers: &str,
    system: System,
    options: &Options,
) -> anyhow::Result<Figures> {
    let scratch = scratch::database(url).await?;
    let client = db::connect(&scratch.url, "ledger-bench").await?;
    let slot = scratch.create_slot(&client, system.name()).await?;
    let prefix = format!("{}{}.", scratch::topic_prefix(brokers, ""), system.name());
    let phases = phase_types(options);
    let topics: Vec<String> = phases
        .iter()
        .map(|phase| format!("{prefix}{phase}"))
        .collect();
    ra_ledger_testing::create_topics(brokers, &topics, 3).await?;
    if matches!(system, System::Relay) {
        // The relay writes its position there, in both delivery modes.
        ra_ledger_testing::create_topics(
            brokers,
            &[ra_ledger_cdc::config::position_topic(&prefix)],
            1,
        )
        .await?;
    }
    let dir = options.work_dir.join(system.name());
    std::fs::create_dir_all(&dir)?;
    let launch = match system {
        System::Relay => process::relay_launch(&scratch, &slot, &prefix, brokers, &dir)?,
        System::Debezium => {
            process::debezium_launch(&scratch, &client, &slot, &prefix, brokers, &dir, options)
                .await?
        }
    };
    eprintln!("drain: writing {} rows…", options.rows);
    load::backlog(&client, "drain", 0, options.rows, options.per_transaction).await?;
    let outcome = phases::run_phases(&client, brokers, launch, &prefix, options).await;
    drop(client);
    scratch.drop().await?;
    outcome
}

/// The phases' aggregate types, one topic each: `drain`, `steady_<rate>`..., `kill`.
fn phase_types(options: &Options) -> Vec<String> {
    let mut phases = vec!["drain".to_owned()];
    phases.extend(options.rates.iter().map(|rate| format!("steady_{rate}")));
    phases.push("kill".to_owned());
    phases
}
