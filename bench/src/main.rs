//! `ledger-bench`: the benchmarks and the demo of RA Ledger, beside the product's `ledger`
//! binary, which carries none of them (as supabase/etl keeps `etl-benchmarks` apart). Every
//! figure of `docs/benchmarks.md` is printed by one of its subcommands, never asserted.
//!
//! Each benchmark works in a scratch database it creates next to the configured one (the
//! role needs CREATEDB) and drops afterwards, so the ledger's own data is never touched.
//! Afterwards means whatever way the benchmark ends: a failure, SIGTERM or Ctrl-C included.
//! A scratch database's replication slots pin WAL for the whole server, so one left behind
//! fills the disk in the end. The scratch databases, topics and seeding are
//! `ra_ledger_testing`'s, which the integration tests use too.
//!
//! A map:
//! - [`command`]: the benchmarks' flags, and one run that drops what it made.
//! - [`scratch`]: the scratch databases and topic prefixes of a run.
//! - [`seed`]: a Texas contact through the ledger, and the one-transaction REPLACE.
//! - [`figures`]: latency distributions, and how a relay delivered.
//! - the benchmarks, one module each: [`write`](mod@write), [`import`], [`as_of`], [`digest`],
//!   [`witness`], [`reassign`], [`relay`], [`latency`], [`replay`], [`outbox`],
//!   [`rebuild`], [`kills`], [`peers`], [`watcher`], [`soak`].
//! - [`demo`]: the whole supersede flow on the local stack, with visible progress.

// `outln!` and `out!` (`ra_ledger::command_line::out`), for every module of the binary.
#[macro_use]
extern crate ra_ledger;

mod as_of;
mod command;
mod cpu;
mod demo;
mod digest;
mod figures;
mod import;
mod kills;
mod latency;
mod outbox;
mod peers;
mod reassign;
mod rebuild;
mod relay;
mod replay;
mod scratch;
mod seed;
mod soak;
mod watcher;
mod witness;
mod write;

use clap::Parser;
use ra_ledger_cdc::infra::settings::{DatabaseUrl, env, local};

/// The allocator of `ledger`, so that a relay the benchmarks run in this process allocates
/// as the product's does (`ledger/src/main.rs` says what it changed).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "ledger-bench",
    version,
    about = "RA Ledger's benchmarks (figures measured in scratch databases) and its demo"
)]
struct Cli {
    /// PostgreSQL URL of the ledger database; the benchmarks create their scratch databases
    /// beside it (the role needs CREATEDB). Keep passwords out of it: use
    /// LEDGER_DATABASE_PASSWORD_FILE.
    #[arg(long, env = env::DATABASE_URL, default_value = local::DATABASE_URL, global = true, hide_env_values = true)]
    database_url: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Walk through a supersede on the local stack: seed, supersede, watch, audit, Kafka.
    Demo(demo::DemoOptions),
    #[command(flatten)]
    Bench(command::BenchCommand),
}

/// Exits 0, or prints the error with its causes and exits 1.
#[tokio::main]
async fn main() -> std::process::ExitCode {
    ra_ledger::command_line::init_logging();
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("Error: {error:?}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let password_file = env::read_path(env::DATABASE_PASSWORD_FILE);
    let url = DatabaseUrl::from(cli.database_url)
        .with_password_file(password_file.as_deref())?
        .expose()
        .to_owned();
    match cli.command {
        Command::Demo(options) => demo::run(&url, options).await,
        Command::Bench(benchmark) => command::run(&url, benchmark).await,
    }
}
