//! `ledger serve` assembled: the state, the routers, the tasks beside the API (outbox
//! retention, signed digests, the gauges on `/metrics`) and the HTTP/1.1 serve loop. The
//! CLI runs it whole with [`run`]; the test harness builds the same [`app`] and [`serve`]s
//! it.
//!
//! The serve loop is every server's ([`ra_ledger_cdc::infra::server`]), which bounds what
//! slow clients can hold ([`Limits`]): a head must arrive within 30 s, a body within the
//! body-read timeout (answered 408, see [`deadline`], the one bound of the service's own),
//! an answer the client reads none of within the write-stall timeout closes the connection,
//! and at most so many connections are open at once. A head over [`MAX_HEAD_BYTES`] or
//! [`MAX_HEADERS`] lines is refused by hyper with a bare `431`, and a head it cannot parse
//! with a bare `400`; both close the connection before any handler runs. They are the one
//! exception to the API's JSON error shape: hyper offers no hook to shape them, and no
//! conforming client sends such a head.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use deadpool_postgres::Pool;
use ra_ledger_cdc::infra::entry::Entry;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::{AppState, ConsoleState};
use crate::commands::Ledger;
use crate::db::{self, DbError};
use crate::digest::log::TreeCache;
use crate::migrate::{self, MigrateError};
use crate::{api, console, digest, gauges, health, retention};

mod deadline;
mod limits;
pub mod settings;

pub use limits::{
    DEFAULT_BODY_READ_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_WRITE_STALL_TIMEOUT, Limits,
};
pub use ra_ledger_cdc::infra::server::{ConnectionStats, MAX_HEAD_BYTES, MAX_HEADERS};
pub use settings::{Digests, Retention, Service};

/// Why `ledger serve` could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The schema could not be brought up to date.
    #[error(transparent)]
    Migrate(#[from] MigrateError),
    /// A pool could not be made.
    #[error(transparent)]
    Database(#[from] DbError),
    /// The address is taken or not ours.
    #[error("cannot listen on {listen}: {cause}; is another ledger running?")]
    Listen {
        /// The address.
        listen: SocketAddr,
        /// Why.
        cause: io::Error,
    },
}

impl ServeError {
    /// Whether only an operator can mend it, so that starting again would only repeat it:
    /// migrations this role may not apply (`ledger migrate` as the owner first). A database
    /// not reachable yet, or an address another process still holds, may pass. Pure.
    pub fn refused(&self) -> bool {
        matches!(self, Self::Migrate(MigrateError::NotOwner(_)))
    }
}

/// Runs `ledger serve` with `service` until `shutdown`: the schema migrated, the API, the
/// console and the health endpoints served, outbox retention and the digest builder
/// beside them. Returns once every task stopped.
#[inline(never)]
pub fn run(
    service: Service,
    shutdown: CancellationToken,
) -> Entry<'static, Result<(), ServeError>> {
    Box::pin(run_inner(service, shutdown))
}

async fn run_inner(service: Service, shutdown: CancellationToken) -> Result<(), ServeError> {
    warn_of_random_keys(&service);
    migrate::prepare_service(&service.database_url).await?;
    let pool = db::command_pool(
        &service.database_url,
        "ledger-api",
        service.pool_size,
        service.lock_timeout,
    )?;
    let listen = service.listen;
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|cause| ServeError::Listen { listen, cause })?;
    // The digest builder's tree, shared with the proofs.
    let digest_tree = service
        .digests
        .as_ref()
        .map_or_else(TreeCache::default, |digests| {
            TreeCache::with_origin(&digests.origin)
        });
    let (gauges, service_metrics) = spawn_gauges(&service, &shutdown).await?;
    let mut tasks = vec![gauges];
    tasks.extend(spawn_retention(&service, &shutdown)?);
    tasks.extend(spawn_watcher(&service, &service_metrics, &shutdown)?);
    tasks.extend(spawn_cosigning(
        &service,
        &service_metrics,
        &digest_tree,
        &shutdown,
    )?);
    let state = AppState {
        digest_tree: digest_tree.clone(),
        ledger: Ledger::new(pool.clone()),
        tokens: service.tokens,
        cursor_key: service.cursor_key,
        digest_public_key: service
            .digests
            .as_ref()
            .map(|digests| digests.key.public_pem()),
        console: ConsoleState {
            session_keys: service.session_keys,
            secure_cookies: service.secure_cookies,
            relay_slot: service.relay_slot,
            witnessing: witnessing(service.digests.as_ref()),
        },
    };
    let digest_pool = db::pool(&service.database_url, "ledger-digest", 1)?;
    tasks.push(spawn_digests(
        digest_pool,
        service.digests,
        digest_tree,
        &shutdown,
    ));
    let limits = service.limits;
    log_listening(listen, service.tls.is_some(), &limits);
    let stop = shutdown.clone().cancelled_owned();
    serve(
        listener,
        app(state, pool),
        service.tls,
        limits,
        Arc::default(),
        stop,
    )
    .await;
    shutdown.cancel();
    for task in tasks {
        let _ = task.await;
    }
    tracing::info!("ledger stopped");
    Ok(())
}

/// The routers one service serves: the API, the console, the health endpoints and the
/// verdict (`/status`).
pub fn app(state: AppState, pool: Pool) -> Router {
    let slot = state.console.relay_slot.clone();
    let witnessing = state.console.witnessing.clone();
    let tokens = state.tokens.clone();
    api::router(state.clone())
        .merge(console::router(state))
        .merge(health::router(pool.clone()))
        .merge(crate::verdict::router(pool, slot, witnessing, tokens))
}

/// A key left out of the config is random for this process: what it signs dies with it.
fn warn_of_random_keys(service: &Service) {
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
}

/// What the console says of the witnesses, when checkpoints are cosigned.
fn witnessing(digests: Option<&Digests>) -> Option<crate::tlog::policy::Witnessing> {
    let digests = digests?;
    let cosigning = digests.cosigning.as_ref()?;
    Some(crate::tlog::policy::Witnessing::new(
        Arc::clone(&cosigning.policy),
        digests.interval,
        cosigning.interval,
    ))
}

/// Outbox retention's task, when it is on.
fn spawn_retention(
    service: &Service,
    shutdown: &CancellationToken,
) -> Result<Option<JoinHandle<()>>, ServeError> {
    let Some(settings) = &service.retention else {
        return Ok(None);
    };
    tracing::info!(
        slot = %settings.slot,
        every = ?settings.interval,
        "outbox retention on: rows are removed once the relay's slot confirmed them"
    );
    // Its own small pool: a long delete never takes a connection from the API.
    let pool = db::pool(&service.database_url, "ledger-retention", 1)?;
    Ok(Some(tokio::spawn(retention::run(
        pool,
        settings.slot.clone(),
        settings.interval,
        settings.batch,
        shutdown.clone(),
    ))))
}

/// The end-to-end watcher's task, when it is on.
fn spawn_watcher(
    service: &Service,
    metrics: &crate::metrics::ServiceMetrics,
    shutdown: &CancellationToken,
) -> Result<Option<JoinHandle<()>>, ServeError> {
    let Some(settings) = &service.watcher else {
        return Ok(None);
    };
    tracing::info!(
        lag_bound = ?settings.lag_bound,
        every = ?settings.interval,
        "the end-to-end watcher is on: committed events are compared with the event topics"
    );
    // Its own pool: the lock's connection, a round's, and nothing of the API's.
    let pool = db::pool(&service.database_url, "ledger-watcher", 3)?;
    Ok(Some(tokio::spawn(crate::watcher::run(
        pool,
        settings.clone(),
        Arc::clone(&metrics.watcher),
        shutdown.clone(),
    ))))
}

/// The task that sends checkpoints to the witnesses, when digests are cosigned.
fn spawn_cosigning(
    service: &Service,
    metrics: &Arc<crate::metrics::ServiceMetrics>,
    tree: &TreeCache,
    shutdown: &CancellationToken,
) -> Result<Option<JoinHandle<()>>, ServeError> {
    let Some(cosigning) = service
        .digests
        .as_ref()
        .and_then(|digests| digests.cosigning.clone())
    else {
        return Ok(None);
    };
    tracing::info!(
        witnesses = cosigning.policy.witnesses.len(),
        quorum = %cosigning.policy.describe(),
        "checkpoints are sent to the witnesses"
    );
    // Its own pool: a slow witness never holds a connection of the API or the builder.
    let pool = db::pool(&service.database_url, "ledger-witness", 1)?;
    let metrics = Arc::clone(metrics);
    let interval = cosigning.interval;
    Ok(Some(tokio::spawn(digest::cosign::run(
        pool,
        cosigning,
        tree.clone(),
        move |ended| metrics.witnessed(ended, interval, chrono::Utc::now()),
        shutdown.clone(),
    ))))
}

/// Says where the service listens, how slow clients are bounded, and warns of plain HTTP
/// off the loopback.
fn log_listening(listen: SocketAddr, tls: bool, limits: &Limits) {
    tracing::info!(
        body_read_timeout_ms = limits.body_read_timeout.as_millis() as u64,
        write_stall_timeout_ms = limits.write_stall_timeout.as_millis() as u64,
        max_connections = limits.max_connections,
        "slow clients are bounded"
    );
    if tls {
        tracing::info!(%listen, "ledger serving HTTPS");
        return;
    }
    if !listen.ip().is_loopback() {
        tracing::warn!(%listen,
            "serving plain HTTP on a non-loopback address: bearer tokens cross the \
             network in the clear; set tls_cert_file and tls_key_file, or put a TLS \
             terminator in front");
    }
    tracing::info!(%listen, "ledger serving");
}

/// The gauges' task, and their `/metrics` when `metrics_listen` is set. They read the marks
/// retention takes: at its pace when it is on.
async fn spawn_gauges(
    service: &Service,
    shutdown: &CancellationToken,
) -> Result<(JoinHandle<()>, Arc<crate::metrics::ServiceMetrics>), ServeError> {
    let gauges = gauges::Gauges {
        slot: service.relay_slot.clone(),
        interval: service
            .retention
            .as_ref()
            .map_or(gauges::DEFAULT_INTERVAL, |settings| settings.interval),
        digests: service.digests.is_some(),
    };
    let metrics = Arc::new(crate::metrics::ServiceMetrics::default());
    if let Some(address) = service.metrics_listen {
        let rendered = Arc::clone(&metrics);
        ra_ledger_cdc::infra::runtime::serve(
            address,
            ra_ledger_cdc::infra::runtime::text_router(move || rendered.render()),
            shutdown.clone(),
        )
        .await;
    }
    let pool = db::pool(&service.database_url, "ledger-gauges", 2)?;
    // The relay's report between rounds matters only to a scrape: without `/metrics`, no
    // reads five times a second (the console reads it at each page).
    let follow = service.metrics_listen.is_some().then(|| {
        gauges::follow_relay(
            pool.clone(),
            gauges.slot.clone(),
            Arc::clone(&metrics),
            shutdown.clone(),
        )
    });
    let rounds = gauges::run(pool, gauges, Arc::clone(&metrics), shutdown.clone());
    let task = tokio::spawn(async move {
        match follow {
            Some(follow) => {
                tokio::join!(rounds, follow);
            }
            None => rounds.await,
        }
    });
    Ok((task, metrics))
}

/// The digest builder when a key is configured; without one, the task that clears the
/// marks appends leave for the builder, so they never pile up.
fn spawn_digests(
    pool: Pool,
    digests: Option<Digests>,
    tree: TreeCache,
    shutdown: &CancellationToken,
) -> JoinHandle<()> {
    match digests {
        Some(settings) => {
            tracing::info!(every = ?settings.interval, "signed digests on");
            tokio::spawn(digest::build::run(
                pool,
                settings.key,
                settings.interval,
                tree,
                shutdown.clone(),
            ))
        }
        None => tokio::spawn(digest::build::clear_marks_until(
            pool,
            std::time::Duration::from_secs(60),
            shutdown.clone(),
        )),
    }
}

/// Serves `app` (layered by [`api::layered`], bodies bounded by
/// [`Limits::body_read_timeout`]) on `listener` over HTTP/1.1, and over TLS with `tls`,
/// until `shutdown`, each connection held to `limits` and counted in `stats`: the loop of
/// every server of the project ([`ra_ledger_cdc::infra::server::serve`]).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    stats: Arc<ConnectionStats>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let router = api::layered(app).layer(axum::middleware::from_fn_with_state(
        limits.body_read_timeout,
        deadline::body_deadline,
    ));
    ra_ledger_cdc::infra::server::serve(listener, router, tls, limits.bounds(), stats, shutdown)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_the_role_may_not_apply_are_refused_and_a_taken_address_is_not() {
        let not_owner = ServeError::Migrate(MigrateError::NotOwner(vec!["V13__x".into()]));
        assert!(not_owner.refused());
        let taken = ServeError::Listen {
            listen: "127.0.0.1:18080".parse().unwrap(),
            cause: io::Error::from(io::ErrorKind::AddrInUse),
        };
        assert!(!taken.refused());
    }
}
