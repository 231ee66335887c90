//! `ledger serve`: the ledger HTTP service.

use anyhow::Context;
use ra_ledger::api::{self, AppState};
use ra_ledger::commands::Ledger;
use ra_ledger::config::ServeConfig;
use ra_ledger::{db, health, migrate};

use super::DatabaseUrl;

/// Arguments of `ledger serve`; each overrides the config file and the environment.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// TOML file with the service's settings; the environment and these flags override it.
    #[arg(long, env = "LEDGER_SERVE_CONFIG")]
    config: Option<String>,
    /// Address to listen on [default: 127.0.0.1:18080].
    #[arg(long, env = "LEDGER_LISTEN")]
    listen: Option<String>,
    /// Maximum PostgreSQL connections in the pool [default: 16].
    #[arg(long, env = "LEDGER_POOL_SIZE")]
    pool_size: Option<usize>,
    /// Bearer tokens, `role:name:token` separated by commas; role is writer or auditor.
    #[arg(long, env = "LEDGER_TOKENS", hide_env_values = true)]
    tokens: Option<String>,
    /// Secret that signs history cursors; random per process when unset (cursors then
    /// do not survive a restart).
    #[arg(long, env = "LEDGER_CURSOR_KEY", hide_env_values = true)]
    cursor_key: Option<String>,
    /// Longest a command waits for a lock another transaction holds before it answers
    /// 409 conflict, in milliseconds [default: 5000].
    #[arg(long, env = "LEDGER_LOCK_TIMEOUT_MS")]
    lock_timeout_ms: Option<u64>,
}

pub async fn run(database: &DatabaseUrl, args: ServeArgs) -> anyhow::Result<()> {
    let mut config = ServeConfig::load(args.config.as_deref())?;
    if database.explicit {
        config.database_url = database.url.clone();
    }
    config.listen = args.listen.unwrap_or(config.listen);
    config.pool_size = args.pool_size.unwrap_or(config.pool_size);
    config.tokens = args.tokens.unwrap_or(config.tokens);
    config.cursor_key = args.cursor_key.or(config.cursor_key);
    config.lock_timeout_ms = args.lock_timeout_ms.unwrap_or(config.lock_timeout_ms);
    let service = config.validate()?;
    if !service.cursor_key_configured {
        tracing::warn!("LEDGER_CURSOR_KEY is not set; history cursors will not survive a restart");
    }
    migrate::prepare(&service.database_url).await?;
    let pool = db::command_pool(
        &service.database_url,
        "ledger-api",
        service.pool_size,
        service.lock_timeout,
    )?;
    let listen = service.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}; is another ledger running?"))?;
    let state = AppState {
        ledger: Ledger::new(pool.clone()),
        tokens: service.tokens,
        cursor_key: service.cursor_key,
    };
    let app = api::router(state).merge(health::router(pool));
    tracing::info!(%listen, "ledger serving");
    api::serve(listener, app, shutdown_signal()).await?;
    tracing::info!("ledger stopped");
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let shutdown = tokio_util::sync::CancellationToken::new();
    ra_ledger_cdc::runtime::cancel_on_signal(shutdown.clone());
    shutdown.cancelled().await;
}
