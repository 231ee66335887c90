//! The `ledger` command line: one module per subcommand, each owning its arguments and its
//! output. The library does the work; these modules parse, call and print.

mod audit;
mod bench;
mod demo;
mod migrate;
mod outbox;
mod projections;
mod relay;
mod runs;
mod serve;
mod topics;
mod verify;
mod worker;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use ra_ledger_cdc::config::local;

#[derive(Debug, Parser)]
#[command(
    name = "ledger",
    version,
    about = "RA Ledger: registered-agent contacts and assignments as an append-only ledger"
)]
struct Cli {
    /// PostgreSQL URL of the ledger database.
    #[arg(long, env = "LEDGER_DATABASE_URL", default_value = local::DATABASE_URL, global = true, hide_env_values = true)]
    database_url: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply pending schema migrations (safe to run twice, and from two processes at once).
    Migrate(migrate::MigrateArgs),
    /// Run the ledger HTTP service; applies migrations first.
    Serve(serve::ServeArgs),
    /// Recompute every stream's hash chain; exits 1 and names the first broken link.
    Verify,
    /// Projection maintenance.
    Projections {
        #[command(subcommand)]
        command: projections::ProjectionsCommand,
    },
    /// Run the CDC relay: outbox rows from the WAL to Kafka, in commit order.
    Relay(relay::RelayArgs),
    /// Run the reassignment worker: processes the chained pages of supersede runs.
    Worker(worker::WorkerArgs),
    /// Reassignment runs: progress, live watch, re-runs.
    Runs {
        #[command(subcommand)]
        command: runs::RunsCommand,
    },
    /// Walk through a supersede on the local stack: seed, supersede, watch, audit, Kafka.
    Demo(demo::DemoOptions),
    /// Print throughput and latency figures, measured in a scratch database.
    Bench {
        #[command(subcommand)]
        benchmark: bench::BenchCommand,
    },
    /// The outbox: rows removed once the relay confirmed them, and how big it is.
    Outbox {
        #[command(subcommand)]
        command: outbox::OutboxCommand,
    },
    /// The relay's topics: create the missing ones, with their configs.
    Topics {
        #[command(subcommand)]
        command: topics::TopicsCommand,
    },
    /// Audit questions, answered from the projections.
    Audit {
        #[command(subcommand)]
        question: audit::AuditCommand,
    },
}

/// The database URL, and whether it was given (by flag or environment) rather than the
/// local stack's default: the services' config files may set their own.
#[derive(Debug, Clone)]
pub struct DatabaseUrl {
    /// The URL to use.
    pub url: String,
    /// Given by `--database-url` or `LEDGER_DATABASE_URL`.
    pub explicit: bool,
}

/// Parses the command line and runs the command.
pub async fn run() -> anyhow::Result<()> {
    let matches = Cli::command().get_matches();
    let explicit = matches
        .value_source("database_url")
        .is_some_and(|source| source != clap::parser::ValueSource::DefaultValue);
    let cli = Cli::from_arg_matches(&matches)?;
    let database = DatabaseUrl {
        url: cli.database_url,
        explicit,
    };
    let url = database.url.as_str();
    match cli.command {
        Command::Migrate(args) => migrate::run(url, args).await,
        Command::Serve(args) => serve::run(&database, args).await,
        Command::Verify => verify::run(url).await,
        Command::Projections { command } => projections::run(url, command).await,
        Command::Relay(args) => relay::run(&database, args).await,
        Command::Worker(args) => worker::run(&database, args).await,
        Command::Runs { command } => runs::run(url, command).await,
        Command::Demo(options) => demo::run(url, options).await,
        Command::Bench { benchmark } => bench::run(url, benchmark).await,
        Command::Outbox { command } => outbox::run(url, command).await,
        Command::Topics { command } => topics::run(command).await,
        Command::Audit { question } => audit::run(url, question).await,
    }
}

/// Parses `key=value`.
fn parse_key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(format!("{text:?} is not key=value")),
    }
}
