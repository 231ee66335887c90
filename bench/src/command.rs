//! The benchmarks' command line: each benchmark's flags, turned into its own options, and
//! one run that drops what the benchmark made however it ended.

use std::time::Duration;

use ra_ledger::command_line::{parse_delivery, parse_pause_ratio};
use ra_ledger::reassign::DEFAULT_PAGE_SIZE;
use ra_ledger_cdc::config::DeliveryMode;
use ra_ledger_cdc::infra::settings::{env, local};
use ra_ledger_cdc::value_format::ValueFormat;

use crate::scratch::drop_leftovers;
use crate::{
    as_of, digest, import, kills, latency, outbox, peers, reassign, rebuild, relay, replay, soak,
    watcher, witness, write,
};

/// The benchmarks, one subcommand each; `ledger-bench <name> --help` gives its flags.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Assignments per second through the ledger's write path vs raw INSERTs of the same rows.
    Write {
        /// Assignments per round and path.
        #[arg(long, default_value_t = 5_000)]
        rows: usize,
        /// Concurrent writers.
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
        /// Alternating rounds (ledger, raw, ledger, raw, ...).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// `ledger import` of a generated file vs a raw COPY of the same rows (the ceiling).
    Import {
        /// Assignments in the file.
        #[arg(long, default_value_t = 100_000)]
        rows: usize,
        /// Rows per transaction, for both.
        #[arg(long, default_value_t = ra_ledger::commands::MAX_BATCH)]
        batch_size: usize,
        /// Transactions in flight, for both.
        #[arg(long, default_value_t = 2)]
        concurrency: usize,
        /// Rounds, each in fresh databases.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// The outbox's rows and size on disk while events stream through the relay and
    /// retention removes what the slot confirmed.
    Outbox {
        /// Events written in all.
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        /// Rows per transaction.
        #[arg(long, default_value_t = 100)]
        per_transaction: u64,
        /// Most events written but not yet published (the writer waits above it).
        #[arg(long, default_value_t = 20_000)]
        max_unpublished: u64,
        /// Milliseconds between retention rounds.
        #[arg(long, default_value_t = 1_000)]
        retention_interval_ms: u64,
        /// Events written per second at most; 0: as fast as the relay lets the writer go.
        #[arg(long, default_value_t = 0)]
        rate: u64,
        /// Kafka bootstrap servers.
        #[arg(long, env = env::KAFKA_BROKERS, default_value = local::KAFKA_BROKERS)]
        brokers: String,
    },
    /// What the end-to-end watcher costs the write path and the relay: phases without and
    /// with it, alternating, in one run.
    Watcher {
        /// Assignments written per phase.
        #[arg(long, default_value_t = 20_000)]
        events: usize,
        /// Rows per transaction.
        #[arg(long, default_value_t = 10)]
        per_transaction: usize,
        /// Pairs of phases (without, then with the watcher).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Kafka bootstrap servers.
        #[arg(long, env = env::KAFKA_BROKERS, default_value = local::KAFKA_BROKERS)]
        brokers: String,
    },
    /// Relay throughput draining an outbox backlog, against pg_recvlogical and rdkafka alone.
    Relay {
        /// Outbox rows in the backlog.
        #[arg(long, default_value_t = 1_000_000)]
        rows: u64,
        /// Rows per transaction.
        #[arg(long, default_value_t = 100)]
        per_transaction: u64,
        /// The relay's delivery mode; both, one after the other, when not given.
        #[arg(long, value_parser = parse_delivery)]
        delivery: Option<DeliveryMode>,
        /// The value format of the backlog's topic (`value_formats`): protobuf, json or
        /// confluent_protobuf, or several separated by commas, drained one after the other
        /// in this run (`protobuf,confluent_protobuf`: the registry's framing beside the
        /// bare envelope).
        #[arg(long, default_value = "protobuf", value_parser = relay::parse_value_formats)]
        value_format: std::vec::Vec<ValueFormat>,
        /// The schema registry of a confluent_protobuf topic (its Confluent-compatible API).
        #[arg(long, env = env::SCHEMA_REGISTRY_URL, default_value = local::SCHEMA_REGISTRY_URL)]
        schema_registry_url: String,
        /// How pgoutput sends the columns (`pgoutput_binary`): text, binary, or both, one
        /// after the other, each with its own ceiling.
        #[arg(long, default_value = "binary", value_parser = relay::parse_pgoutput)]
        pgoutput: std::vec::Vec<relay::Pgoutput>,
        /// Kafka bootstrap servers.
        #[arg(long, env = env::KAFKA_BROKERS, default_value = local::KAFKA_BROKERS)]
        brokers: String,
    },
    /// Commit → consumer receipt latency under a steady load through the relay.
    Latency {
        /// Events per second, or several separated by commas (`2000,10000`), each in turn.
        #[arg(long, default_value = "2000", value_parser = latency::parse_rates)]
        rate: std::vec::Vec<u64>,
        /// Duration of each measurement in seconds.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Measurements of each delivery mode at each rate, the modes alternating; with more
        /// than one, the median of the runs' p99 ratios is printed too.
        #[arg(long, default_value_t = 1)]
        runs: usize,
        /// The relay's delivery mode; both, one after the other, when not given.
        #[arg(long, value_parser = parse_delivery)]
        delivery: Option<DeliveryMode>,
        /// `linger.ms` values to measure, e.g. 0,1,2,5,10; the relay's default when not
        /// given.
        #[arg(long, value_parser = latency::parse_lingers)]
        linger_ms: Option<std::vec::Vec<u64>>,
        /// At least once's `flush_when_idle`: on, off, or both; the default when not given.
        #[arg(long, value_parser = latency::parse_flush)]
        flush_when_idle: Option<std::vec::Vec<bool>>,
        /// The topic's value format, or several separated by commas, each measured in turn
        /// (`protobuf,confluent_protobuf`).
        #[arg(long, default_value = "protobuf", value_parser = relay::parse_value_formats)]
        value_format: std::vec::Vec<ValueFormat>,
        /// The schema registry of a confluent_protobuf topic (its Confluent-compatible API).
        #[arg(long, env = env::SCHEMA_REGISTRY_URL, default_value = local::SCHEMA_REGISTRY_URL)]
        schema_registry_url: String,
        /// Kafka bootstrap servers.
        #[arg(long, env = env::KAFKA_BROKERS, default_value = local::KAFKA_BROKERS)]
        brokers: String,
    },
    /// kill -9 of `ledger relay` (a process of its own) under a steady load, restarted at
    /// once each time: the duplicates per kill, and how far the slot's confirmed position
    /// trails what Kafka holds.
    Kills {
        /// Events per second written throughout.
        #[arg(long, default_value_t = 2_000)]
        rate: u64,
        /// Kills, each followed by a restart with the same command.
        #[arg(long, default_value_t = 6)]
        kills: usize,
        /// Mean seconds from a start of the relay to the next kill; each wait is drawn
        /// between half and one and a half times it.
        #[arg(long, default_value_t = 5.0)]
        every: f64,
        /// The relay's `status_interval_ms`; its default when not given.
        #[arg(long)]
        status_interval_ms: Option<u64>,
        /// Kafka bootstrap servers.
        #[arg(long, env = env::KAFKA_BROKERS, default_value = local::KAFKA_BROKERS)]
        brokers: String,
    },
    /// The stack's write path at a steady rate for an hour (or --minutes), with the relay,
    /// the worker, outbox retention and digests on: each process's resident memory, the
    /// outbox, the slot's WAL and the lag sampled, each judged flat or growing after
    /// warm-up, reconcile's check at the end; CSV and an SVG picture to --out.
    Soak {
        /// Events per second, new assignments in batches through the HTTP API.
        #[arg(long, default_value_t = 1_000)]
        rate: u64,
        /// Minutes of load.
        #[arg(long, default_value_t = 60.0)]
        minutes: f64,
        /// Time between samples: 60s, 10s, 1m.
        #[arg(long, default_value = "60s", value_parser = soak::parse_every)]
        every: Duration,
        /// Whether `ledger serve` seals digests (`false`: no digest key, to tell the
        /// digests' share of its memory).
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        digests: bool,
        /// Folder for samples.csv, soak.svg and the processes' logs (made if missing).
        #[arg(long, default_value = "soak")]
        out: std::path::PathBuf,
        /// Kafka bootstrap servers.
        #[arg(long, env = env::KAFKA_BROKERS, default_value = local::KAFKA_BROKERS)]
        brokers: String,
    },
    /// The relay and Debezium side by side, one at a time, with the same load and consumer:
    /// drain rate and CPU, steady-load latency, kill -9 under load (docs/peers.md). Run it
    /// with deploy/peers bench, which fetches Kafka Connect and Debezium.
    Peers(peers::Arguments),
    /// Supersede a contact with many active assignments: chained pages vs one transaction.
    Reassign {
        /// Active assignments to move.
        #[arg(long, default_value_t = 50_000)]
        rows: usize,
        /// Rows per page.
        #[arg(long, default_value_t = DEFAULT_PAGE_SIZE)]
        page_size: u32,
        /// Workers in the consumer group (a run still has one page in flight).
        #[arg(long, default_value_t = 2)]
        workers: usize,
        /// Whether a worker runs each next page at once (`true`, the default) or waits for
        /// its request through the relay and Kafka (`false`, as before).
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        continue_chain: bool,
        /// Kafka bootstrap servers.
        #[arg(long, env = env::KAFKA_BROKERS, default_value = local::KAFKA_BROKERS)]
        brokers: String,
    },
    /// Sealing a signed digest over many streams when few changed since the last one.
    Digest {
        /// Streams in the ledger.
        #[arg(long, default_value_t = 1_000_000)]
        streams: u64,
        /// Streams changed between two digests.
        #[arg(long, default_value_t = 10_000)]
        changed: u64,
        /// Incremental digests to time.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// The Python verifier the complete proof is checked with (skipped when absent).
        #[arg(long, default_value = "tests/verify_digest.py")]
        python_verifier: std::path::PathBuf,
    },
    /// The transparency log at a million events against real witnesses (the stack's): the
    /// cosigning round trip per cosignature, a proof's log part in bytes, its offline check.
    Witness {
        /// The witness policy with URLs (the stack's `.stack/witness-policy.txt`).
        #[arg(long, default_value = ".stack/witness-policy.txt")]
        policy: std::path::PathBuf,
        /// Each witness's litewitness database, in the policy's order (the bench registers
        /// a log of its own with each).
        #[arg(long = "witness-db", default_values = [".stack/witness-a/litewitness.db", ".stack/witness-b/litewitness.db"])]
        witness_dbs: Vec<std::path::PathBuf>,
        /// The `witnessctl` binary.
        #[arg(long, default_value = "witnessctl")]
        witnessctl: std::path::PathBuf,
        /// Leaves (events) in the log.
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        /// Checkpoints sent one leaf apart, each timed.
        #[arg(long, default_value_t = 200)]
        appends: u64,
    },
    /// Write latency before and during an online projection rebuild over many events.
    Rebuild {
        /// Events in the ledger.
        #[arg(long, default_value_t = 1_000_000)]
        events: usize,
        /// Assignments per second the writer commits throughout.
        #[arg(long, default_value_t = 200)]
        rate: u64,
        /// Seconds of writes measured before the rebuild starts.
        #[arg(long, default_value_t = 10)]
        seconds_before: u64,
        /// The rebuild's pause after each chunk, as a multiple of the chunk's time.
        #[arg(long, default_value_t = 1.0, value_parser = parse_pause_ratio)]
        pause_ratio: f64,
    },
    /// Replay rate alone, and the live relay's latency alone and beside a replay.
    Replay {
        /// Events in the ledger to replay.
        #[arg(long, default_value_t = 100_000)]
        events: usize,
        /// The replay's rate beside the live load (events/s).
        #[arg(long, default_value_t = ra_ledger::replay::DEFAULT_RATE)]
        rate: u32,
        /// The live load while latency is measured (events/s).
        #[arg(long, default_value_t = 500)]
        latency_rate: u64,
        /// Seconds of each latency measurement.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        /// Kafka bootstrap servers.
        #[arg(long, env = env::KAFKA_BROKERS, default_value = local::KAFKA_BROKERS)]
        brokers: String,
    },
    /// As-of query latency (p50/p99) over a large assignment history.
    AsOf {
        /// Assignment history rows to seed (five per business, so rows/5 streams).
        #[arg(long, alias = "history-rows", default_value_t = 1_000_000)]
        rows: usize,
        /// Queries to time.
        #[arg(long, default_value_t = 20_000)]
        queries: usize,
    },
}

/// Runs one benchmark: the command line's values turned into the benchmark's own options.
pub async fn run(database_url: &str, benchmark: BenchCommand) -> anyhow::Result<()> {
    let interrupted = tokio_util::sync::CancellationToken::new();
    ra_ledger_cdc::infra::runtime::cancel_on_signal(interrupted.clone());
    let outcome = tokio::select! {
        outcome = dispatch(database_url, benchmark) => outcome,
        () = interrupted.cancelled() => Err(anyhow::anyhow!("interrupted")),
    };
    interrupted.cancel();
    drop_leftovers().await;
    outcome
}

/// Runs `benchmark` on `database_url`.
///
/// Over 80 lines, and left so (issue 58, item 5): one arm per subcommand, each only
/// moving the parsed arguments into its benchmark's options and calling it. It is the
/// table of what `ledger-bench` runs, and spread over functions it would hide that;
/// each benchmark's own work stays in its module.
async fn dispatch(database_url: &str, benchmark: BenchCommand) -> anyhow::Result<()> {
    match benchmark {
        BenchCommand::Write {
            rows,
            concurrency,
            rounds,
        } => write::run(database_url, rows, concurrency, rounds).await,
        BenchCommand::Outbox {
            events,
            per_transaction,
            max_unpublished,
            retention_interval_ms,
            rate,
            brokers,
        } => {
            let options = outbox::Options {
                events,
                per_transaction,
                max_unpublished,
                retention_interval: Duration::from_millis(retention_interval_ms.max(1)),
                rate,
            };
            outbox::run(database_url, &brokers, options).await
        }
        BenchCommand::Watcher {
            events,
            per_transaction,
            rounds,
            brokers,
        } => {
            let options = watcher::Options {
                events,
                per_transaction,
                rounds,
            };
            watcher::run(database_url, &brokers, options).await
        }
        BenchCommand::Relay {
            rows,
            per_transaction,
            delivery,
            value_format,
            schema_registry_url,
            pgoutput,
            brokers,
        } => {
            let backlog = relay::Backlog {
                rows,
                per_transaction,
                value_formats: value_format,
                schema_registry_url,
            };
            relay::run(database_url, &brokers, backlog, modes(delivery), pgoutput).await
        }
        BenchCommand::Latency {
            rate,
            seconds,
            runs,
            delivery,
            linger_ms,
            flush_when_idle,
            value_format,
            schema_registry_url,
            brokers,
        } => {
            let variants = latency::Variant::every(
                modes(delivery),
                linger_ms,
                flush_when_idle,
                &value_format,
                &schema_registry_url,
            );
            let load = latency::Load {
                rates: rate,
                seconds,
                runs,
            };
            latency::run(database_url, &brokers, load, variants).await
        }
        BenchCommand::Kills {
            rate,
            kills,
            every,
            status_interval_ms,
            brokers,
        } => {
            let options = kills::Options {
                rate,
                kills,
                every: Duration::try_from_secs_f64(every)
                    .map_err(|_| anyhow::anyhow!("--every: {every} is not a number of seconds"))?,
                status_interval_ms,
            };
            kills::run(database_url, &brokers, options).await
        }
        BenchCommand::Soak {
            rate,
            minutes,
            every,
            digests,
            out,
            brokers,
        } => {
            let duration = Duration::try_from_secs_f64(minutes * 60.0)
                .map_err(|_| anyhow::anyhow!("--minutes: {minutes} is not a number of minutes"))?;
            let options = soak::Options {
                rate,
                duration,
                every,
                digests,
                out,
            };
            soak::run(database_url, &brokers, options).await
        }
        BenchCommand::Peers(arguments) => {
            let (options, brokers) = arguments.into_options();
            peers::run(database_url, &brokers, options).await
        }
        BenchCommand::Reassign {
            rows,
            page_size,
            workers,
            continue_chain,
            brokers,
        } => {
            let workers = reassign::Workers {
                count: workers,
                continue_chain,
            };
            reassign::run(database_url, &brokers, rows, page_size, workers).await
        }
        BenchCommand::Digest {
            streams,
            changed,
            rounds,
            python_verifier,
        } => digest::run(database_url, streams, changed, rounds, &python_verifier).await,
        BenchCommand::Witness {
            policy,
            witness_dbs,
            witnessctl,
            events,
            appends,
        } => {
            witness::run(witness::WitnessBench {
                policy,
                witness_dbs,
                witnessctl,
                events,
                appends,
            })
            .await
        }
        BenchCommand::Rebuild {
            events,
            rate,
            seconds_before,
            pause_ratio,
        } => {
            let before = Duration::from_secs(seconds_before);
            rebuild::run(database_url, events, rate, before, pause_ratio).await
        }
        BenchCommand::Replay {
            events,
            rate,
            latency_rate,
            seconds,
            brokers,
        } => {
            let options = replay::Options {
                events,
                rate,
                latency_rate,
                seconds,
            };
            replay::run(database_url, &brokers, options).await
        }
        BenchCommand::Import {
            rows,
            batch_size,
            concurrency,
            rounds,
        } => import::run(database_url, rows, batch_size, concurrency, rounds).await,
        BenchCommand::AsOf { rows, queries } => as_of::run(database_url, rows, queries).await,
    }
}

/// The delivery modes to measure: the one asked for, or both (at least once first, the
/// baseline).
fn modes(delivery: Option<DeliveryMode>) -> Vec<DeliveryMode> {
    delivery.map_or_else(
        || vec![DeliveryMode::AtLeastOnce, DeliveryMode::ExactlyOnce],
        |mode| vec![mode],
    )
}
