//! The `ledger` command: migrations and the ledger service.

use std::io::IsTerminal;
use std::net::SocketAddr;

use anyhow::Context;
use clap::{Parser, Subcommand};
use ra_ledger::{db, health, migrate};

/// Default database of the local stack (`deploy/stack up`).
const DEFAULT_DATABASE_URL: &str = "postgres://ledger:ledger@127.0.0.1:54329/ledger";

#[derive(Debug, Parser)]
#[command(
    name = "ledger",
    version,
    about = "RA Ledger: registered-agent contacts and assignments as an append-only ledger"
)]
struct Cli {
    /// PostgreSQL URL of the ledger database.
    #[arg(long, env = "LEDGER_DATABASE_URL", default_value = DEFAULT_DATABASE_URL, global = true, hide_env_values = true)]
    database_url: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply pending schema migrations (safe to run twice, and from two processes at once).
    Migrate {
        /// Only list the migrations embedded in this binary.
        #[arg(long)]
        list: bool,
    },
    /// Run the ledger HTTP service; applies migrations first.
    Serve {
        /// Address to listen on.
        #[arg(long, env = "LEDGER_LISTEN", default_value = "127.0.0.1:18080")]
        listen: SocketAddr,
        /// Maximum PostgreSQL connections in the pool.
        #[arg(long, env = "LEDGER_POOL_SIZE", default_value_t = 16)]
        pool_size: usize,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Migrate { list: true } => {
            for name in migrate::embedded() {
                println!("{name}");
            }
            Ok(())
        }
        Command::Migrate { list: false } => migrate_database(&cli.database_url).await,
        Command::Serve { listen, pool_size } => serve(&cli.database_url, listen, pool_size).await,
    }
}

async fn migrate_database(database_url: &str) -> anyhow::Result<()> {
    let mut client = db::connect(database_url, "ledger-migrate").await?;
    let report = migrate::run(&mut client).await?;
    if report.applied.is_empty() {
        tracing::info!("schema is up to date");
    }
    for name in report.applied {
        tracing::info!(migration = %name, "applied");
    }
    Ok(())
}

async fn serve(database_url: &str, listen: SocketAddr, pool_size: usize) -> anyhow::Result<()> {
    migrate_database(database_url).await?;
    let pool = db::pool(database_url, "ledger-api", pool_size)?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}; is another ledger running?"))?;
    tracing::info!(%listen, "ledger serving");
    axum::serve(listener, health::router(pool))
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    tracing::info!("ledger stopped");
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler cannot fail on Unix");
    tokio::select! {
        _ = terminate.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("Ctrl-C received, shutting down"),
    }
}
