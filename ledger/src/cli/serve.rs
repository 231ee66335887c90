//! `ledger serve`: the ledger HTTP service.

use ra_ledger::config::ServeConfig;
use ra_ledger::service;
use ra_ledger_cdc::infra::settings::env;
use tokio_util::sync::CancellationToken;

use super::{DatabaseArg, refused};

/// Arguments of `ledger serve`; each overrides the config file and the environment
/// variable of the same setting ([`ra_ledger::config::SERVE_ENV`]), which the config reads.
/// Secrets have no flags (a command line is visible to every user of the machine): tokens,
/// the cursor key and the database password come from the config file, the environment,
/// or files (`tokens_file`, `cursor_key_file`, `database_password_file`).
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// TOML file with the service's settings; the environment and these flags override it.
    #[arg(long, env = env::SERVE_CONFIG)]
    config: Option<String>,
    /// Address to listen on [default: 127.0.0.1:18080].
    #[arg(long)]
    listen: Option<String>,
    /// Maximum PostgreSQL connections in the pool [default: 16].
    #[arg(long)]
    pool_size: Option<usize>,
    /// Longest a command waits for a lock another transaction holds before it answers
    /// 409 conflict, in milliseconds [default: 5000].
    #[arg(long)]
    lock_timeout_ms: Option<u64>,
    /// How often outbox rows the relay's slot confirmed are removed, in milliseconds; 0
    /// turns retention off [default: 10000].
    #[arg(long)]
    outbox_retention_interval_ms: Option<u64>,
}

/// Runs `ledger serve`. A configuration that cannot work, and what the service refuses to
/// start on ([`service::ServeError::refused`]), are [`refused`]; any other error (the
/// database or the address not there yet) is worth a restart.
pub async fn run(database: &DatabaseArg, args: ServeArgs) -> anyhow::Result<()> {
    let mut config = ServeConfig::load(args.config.as_deref()).map_err(refused)?;
    if database.explicit {
        config.database_url = database.url.as_str().into();
    }
    config.listen = args.listen.unwrap_or(config.listen);
    config.pool_size = args.pool_size.unwrap_or(config.pool_size);
    config.lock_timeout_ms = args.lock_timeout_ms.unwrap_or(config.lock_timeout_ms);
    config.outbox_retention_interval_ms = args
        .outbox_retention_interval_ms
        .unwrap_or(config.outbox_retention_interval_ms);
    let service = config.validate().map_err(refused)?;
    let shutdown = CancellationToken::new();
    ra_ledger_cdc::infra::runtime::cancel_on_signal(shutdown.clone());
    service::run(service, shutdown).await.map_err(|error| {
        if error.refused() {
            refused(error)
        } else {
            error.into()
        }
    })
}
