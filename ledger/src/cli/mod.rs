//! The `ledger` command line: one module per subcommand, each owning its arguments and its
//! output. The library does the work; these modules parse, call and print, through
//! [`ra_ledger::command_line::out`]'s `outln!` and `out!`, which end quietly when the reader
//! of stdout went away. The benchmarks and the demo are another binary's, `ledger-bench`
//! (`bench/`).

mod audit;
mod digest;
mod grant;
mod import;
mod migrate;
mod outbox;
mod projections;
mod proof;
mod reconcile;
mod relay;
mod replay;
mod runs;
mod serve;
mod token;
mod topics;
mod verify;
mod worker;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use ra_ledger_cdc::infra::runtime::EXIT_REFUSED;
use ra_ledger_cdc::infra::settings::{env, local};

#[derive(Debug, Parser)]
#[command(
    name = "ledger",
    version,
    about = "RA Ledger: registered-agent contacts and assignments as an append-only ledger"
)]
struct Cli {
    /// PostgreSQL URL of the ledger database. Keep passwords out of it (a command line is
    /// visible to every user of the machine): use LEDGER_DATABASE_PASSWORD_FILE.
    #[arg(long, env = env::DATABASE_URL, default_value = local::DATABASE_URL, global = true, hide_env_values = true)]
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
    /// Recompute every stream's hash chain and, with --digests, check the tables against
    /// the signed digests on Kafka; exits 1 naming the first broken link or disagreeing digest.
    Verify(verify::VerifyArgs),
    /// Projection maintenance.
    Projections {
        #[command(subcommand)]
        command: projections::ProjectionsCommand,
    },
    /// Run the CDC relay: outbox rows from the WAL to Kafka, in commit order.
    Relay(relay::RelayArgs),
    /// Whether the live topics equal the ledger's events: lost, phantom, duplicates, order,
    /// unseen; exits 1 on a loss or a phantom. --every runs it continuously with metrics.
    Reconcile(reconcile::ReconcileArgs),
    /// Republish past events to replay topics, ending with the handoff to the live topics.
    Replay {
        #[command(subcommand)]
        command: replay::ReplayCommand,
    },
    /// Start assignments from a CSV file in batches, with a progress bar; run it again to
    /// resume (what is already assigned is skipped).
    Import(import::ImportArgs),
    /// Run the reassignment worker: processes the chained pages of supersede runs.
    Worker(worker::WorkerArgs),
    /// Reassignment runs: progress, live watch, re-runs.
    Runs {
        #[command(subcommand)]
        command: runs::RunsCommand,
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
    /// Least-privilege roles for the services (run as the owner role, after migrating).
    Grant {
        #[command(subcommand)]
        command: grant::GrantCommand,
    },
    /// An event's inclusion proof against the newest signed digest; or check one offline.
    Proof(proof::ProofArgs),
    /// The signed digests: `monitor` recomputes the heads from the transparency log and
    /// says whether the digest signed them (exit 1 naming the first difference).
    Digest {
        #[command(subcommand)]
        command: digest::DigestCommand,
    },
    /// API bearer tokens: make one, or hash one for the service's configuration.
    Token {
        #[command(subcommand)]
        command: token::TokenCommand,
    },
}

/// The database URL, and whether it was given (by flag or environment) rather than the
/// local stack's default: the services' config files may set their own.
#[derive(Debug, Clone)]
pub struct DatabaseArg {
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
    let on_command_line =
        matches.value_source("database_url") == Some(clap::parser::ValueSource::CommandLine);
    let cli = Cli::from_arg_matches(&matches)?;
    if on_command_line
        && ra_ledger_cdc::infra::pg::config(&cli.database_url, "ledger")
            .is_ok_and(|settings| settings.sql.get_password().is_some())
    {
        tracing::warn!(
            "--database-url carries a password, which other users of this machine can read \
             in the process list; use LEDGER_DATABASE_PASSWORD_FILE"
        );
    }
    // The password from a file, for every command (the services' configs may name their
    // own file too).
    let password_file = env::read_path(env::DATABASE_PASSWORD_FILE);
    let url = ra_ledger_cdc::infra::settings::DatabaseUrl::from(cli.database_url)
        .with_password_file(password_file.as_deref())?
        .expose()
        .to_owned();
    let database = DatabaseArg { url, explicit };
    let url = database.url.as_str();
    match cli.command {
        Command::Migrate(args) => migrate::run(url, args).await,
        Command::Serve(args) => serve::run(&database, args).await,
        Command::Verify(args) => verify::run(url, args).await,
        Command::Projections { command } => projections::run(url, command).await,
        Command::Relay(args) => relay::run(&database, args).await,
        Command::Reconcile(args) => reconcile::run(url, args).await,
        Command::Replay { command } => replay::run(url, command).await,
        Command::Import(args) => import::run(url, args).await,
        Command::Worker(args) => worker::run(&database, args).await,
        Command::Runs { command } => runs::run(url, command).await,
        Command::Outbox { command } => outbox::run(url, command).await,
        Command::Topics { command } => topics::run(command).await,
        Command::Audit { question } => audit::run(url, question).await,
        Command::Token { command } => token::run(command),
        Command::Grant { command } => grant::run(url, command).await,
        Command::Proof(args) => proof::run(url, args).await,
        Command::Digest { command } => digest::run(url, command).await,
    }
}

/// An error no restart mends: the process found what only an operator can put right (a
/// lost slot, a position from another history, a configuration that cannot work, migrations
/// its role may not apply). `ledger` exits [`EXIT_REFUSED`] on it, which the systemd units
/// do not restart; it shows as the error it wraps.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct Refused(anyhow::Error);

/// Marks `error` as a [`Refused`] one.
pub fn refused(error: impl Into<anyhow::Error>) -> anyhow::Error {
    Refused(error.into()).into()
}

/// The exit status of a command that failed: [`EXIT_REFUSED`] for a refusal, else 1, as for
/// any error. Pure.
pub fn exit_status(error: &anyhow::Error) -> u8 {
    if error.is::<Refused>() {
        EXIT_REFUSED
    } else {
        1
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_exits_78_and_any_other_error_1() {
        let slot_lost = anyhow::anyhow!("the replication slot s is missing");
        assert_eq!(exit_status(&refused(slot_lost)), 78);
        let described = refused(anyhow::anyhow!("bad")).context("ledger relay");
        assert_eq!(exit_status(&described), 78, "context keeps the mark");
        assert_eq!(exit_status(&anyhow::anyhow!("database down")), 1);
    }
}
