//! `ledger serve`: the ledger HTTP service.

use anyhow::Context;
use ra_ledger::api::{self, AppState};
use ra_ledger::commands::Ledger;
use ra_ledger::config::ServeConfig;
use ra_ledger::{db, health, migrate, retention};
use tokio_util::sync::CancellationToken;

use super::DatabaseUrl;

/// Arguments of `ledger serve`; each overrides the config file and the environment.
/// Secrets have no flags (a command line is visible to every user of the machine): tokens,
/// the cursor key and the database password come from the config file, the environment,
/// or files (`tokens_file`, `cursor_key_file`, `database_password_file`).
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
    /// Longest a command waits for a lock another transaction holds before it answers
    /// 409 conflict, in milliseconds [default: 5000].
    #[arg(long, env = "LEDGER_LOCK_TIMEOUT_MS")]
    lock_timeout_ms: Option<u64>,
    /// How often outbox rows the relay's slot confirmed are removed, in milliseconds; 0
    /// turns retention off [default: 10000].
    #[arg(long, env = "LEDGER_OUTBOX_RETENTION_INTERVAL_MS")]
    outbox_retention_interval_ms: Option<u64>,
}

pub async fn run(database: &DatabaseUrl, args: ServeArgs) -> anyhow::Result<()> {
    let mut config = ServeConfig::load(args.config.as_deref())?;
    if database.explicit {
        config.database_url = database.url.clone();
    }
    config.listen = args.listen.unwrap_or(config.listen);
    config.pool_size = args.pool_size.unwrap_or(config.pool_size);
    config.lock_timeout_ms = args.lock_timeout_ms.unwrap_or(config.lock_timeout_ms);
    config.outbox_retention_interval_ms = args
        .outbox_retention_interval_ms
        .unwrap_or(config.outbox_retention_interval_ms);
    let service = config.validate()?;
    if !service.cursor_key_configured {
        tracing::warn!(
            "no cursor key (cursor_key_file, LEDGER_CURSOR_KEY_FILE); history cursors will not survive a restart"
        );
    }
    if !service.session_key_configured {
        tracing::warn!(
            "no session key (session_key_file, LEDGER_SESSION_KEY_FILE); console sessions will not survive a restart"
        );
    }
    migrate::prepare_service(&service.database_url).await?;
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
    // The digest builder's tree, shared with the proofs.
    let digest_tree = ra_ledger::digest::build::TreeCache::default();
    let state = AppState {
        digest_tree: digest_tree.clone(),
        ledger: Ledger::new(pool.clone()),
        tokens: service.tokens,
        cursor_key: service.cursor_key,
        session_keys: service.session_keys,
        digest_public_key: service
            .digests
            .as_ref()
            .map(|digests| digests.key.public_pem()),
        secure_cookies: service.tls.is_some(),
        relay_slot: config.relay_slot.clone(),
    };
    let shutdown = CancellationToken::new();
    ra_ledger_cdc::infra::runtime::cancel_on_signal(shutdown.clone());
    let retention = service.retention.map(|settings| {
        tracing::info!(
            slot = %settings.slot,
            every = ?settings.interval,
            "outbox retention on: rows are removed once the relay's slot confirmed them"
        );
        // Its own small pool: a long delete never takes a connection from the API.
        let pool = db::pool(&service.database_url, "ledger-retention", 1)?;
        anyhow::Ok(tokio::spawn(retention::run(
            pool,
            settings.slot,
            settings.interval,
            settings.batch,
            shutdown.clone(),
        )))
    });
    let retention = retention.transpose()?;
    let digest_pool = db::pool(&service.database_url, "ledger-digest", 1)?;
    let digests = Some(match service.digests {
        Some(settings) => {
            tracing::info!(every = ?settings.interval, "signed digests on");
            tokio::spawn(ra_ledger::digest::build::run(
                digest_pool,
                settings.key,
                settings.interval,
                digest_tree,
                shutdown.clone(),
            ))
        }
        // Off: the marks appends leave for the builder are cleared, so they never pile up.
        None => tokio::spawn(ra_ledger::digest::build::clear_marks_until(
            digest_pool,
            std::time::Duration::from_secs(60),
            shutdown.clone(),
        )),
    });
    let app = api::router(state.clone())
        .merge(ra_ledger::console::router(state))
        .merge(health::router(pool));
    let limits = service.limits;
    tracing::info!(
        body_read_timeout_ms = limits.body_read_timeout.as_millis() as u64,
        max_connections = limits.max_connections,
        "slow clients are bounded"
    );
    let stats = std::sync::Arc::default();
    match service.tls {
        Some(tls) => {
            tracing::info!(%listen, "ledger serving HTTPS");
            let stop = shutdown.clone().cancelled_owned();
            api::serve_tls(listener, app, tls, limits, stats, stop).await?;
        }
        None => {
            if !listen.ip().is_loopback() {
                tracing::warn!(%listen,
                    "serving plain HTTP on a non-loopback address: bearer tokens cross the \
                     network in the clear; set tls_cert_file and tls_key_file, or put a TLS \
                     terminator in front");
            }
            tracing::info!(%listen, "ledger serving");
            let stop = shutdown.clone().cancelled_owned();
            api::serve(listener, app, limits, stats, stop).await?;
        }
    }
    shutdown.cancel();
    for task in [retention, digests].into_iter().flatten() {
        let _ = task.await;
    }
    tracing::info!("ledger stopped");
    Ok(())
}
