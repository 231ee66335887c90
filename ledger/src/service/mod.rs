//! `ledger serve` assembled: the state, the routers, the tasks beside the API (outbox
//! retention, signed digests, the gauges on `/metrics`) and the HTTP/1.1 serve loop. The
//! CLI runs it whole with [`run`]; the test harness builds the same [`app`] and [`serve`]s
//! it.
//!
//! The serve loop is `axum::serve` with the bounds it does not expose. The server bounds
//! what slow clients can hold ([`Limits`]): a head must arrive within 30 s, a body within
//! the body-read timeout (answered 408, see [`deadline`]), an answer the client reads none
//! of within the write-stall timeout closes the connection, and at most so many connections
//! are open at once. A head over [`MAX_HEAD_BYTES`] or [`MAX_HEADERS`] lines is refused by
//! hyper with a bare `431`, and a head it cannot parse with a bare `400`; both close the
//! connection before any handler runs. They are the one exception to the API's JSON error
//! shape: hyper offers no hook to shape them, and no conforming client sends such a head.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use deadpool_postgres::Pool;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use ra_ledger_cdc::infra::write_stall::WriteStall;

use crate::api::{AppState, ConsoleState};
use crate::commands::Ledger;
use crate::db::{self, DbError};
use crate::digest::build::TreeCache;
use crate::migrate::{self, MigrateError};
use crate::{api, console, digest, gauges, health, retention};

mod deadline;
mod limits;
pub mod settings;

use limits::ConnectionSlots;
pub use limits::{
    ConnectionStats, DEFAULT_BODY_READ_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_WRITE_STALL_TIMEOUT, Limits,
};
pub use settings::{Digests, Retention, Service};

/// Largest request head (request line and headers) accepted.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;
/// Most header lines accepted (hyper's default, written out so the docs can name it).
pub const MAX_HEADERS: usize = 100;

/// How long a draining shutdown waits for requests in progress.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Longest a client may take over its TLS handshake.
const TLS_HANDSHAKE: std::time::Duration = std::time::Duration::from_secs(10);
/// Longest a client may take to send a request head, and most a connection may sit idle
/// between requests (hyper starts this clock as soon as it waits for a head).
const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

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
pub async fn run(service: Service, shutdown: CancellationToken) -> Result<(), ServeError> {
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
    let digest_tree = TreeCache::default();
    let gauges = spawn_gauges(&service, &shutdown).await?;
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
        },
    };
    let mut tasks = vec![gauges];
    if let Some(settings) = service.retention {
        tracing::info!(
            slot = %settings.slot,
            every = ?settings.interval,
            "outbox retention on: rows are removed once the relay's slot confirmed them"
        );
        // Its own small pool: a long delete never takes a connection from the API.
        let pool = db::pool(&service.database_url, "ledger-retention", 1)?;
        tasks.push(tokio::spawn(retention::run(
            pool,
            settings.slot,
            settings.interval,
            settings.batch,
            shutdown.clone(),
        )));
    }
    let digest_pool = db::pool(&service.database_url, "ledger-digest", 1)?;
    tasks.push(spawn_digests(
        digest_pool,
        service.digests,
        digest_tree,
        &shutdown,
    ));
    let limits = service.limits;
    tracing::info!(
        body_read_timeout_ms = limits.body_read_timeout.as_millis() as u64,
        write_stall_timeout_ms = limits.write_stall_timeout.as_millis() as u64,
        max_connections = limits.max_connections,
        "slow clients are bounded"
    );
    match &service.tls {
        Some(_) => tracing::info!(%listen, "ledger serving HTTPS"),
        None => {
            if !listen.ip().is_loopback() {
                tracing::warn!(%listen,
                    "serving plain HTTP on a non-loopback address: bearer tokens cross the \
                     network in the clear; set tls_cert_file and tls_key_file, or put a TLS \
                     terminator in front");
            }
            tracing::info!(%listen, "ledger serving");
        }
    }
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

/// The routers one service serves: the API, the console and the health endpoints.
pub fn app(state: AppState, pool: Pool) -> Router {
    api::router(state.clone())
        .merge(console::router(state))
        .merge(health::router(pool))
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

/// The gauges' task, and their `/metrics` when `metrics_listen` is set. They read the marks
/// retention takes: at its pace when it is on.
async fn spawn_gauges(
    service: &Service,
    shutdown: &CancellationToken,
) -> Result<JoinHandle<()>, ServeError> {
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
        let rendered = metrics.clone();
        ra_ledger_cdc::infra::runtime::serve(
            address,
            ra_ledger_cdc::infra::runtime::text_router(move || rendered.render()),
            shutdown.clone(),
        )
        .await;
    }
    let pool = db::pool(&service.database_url, "ledger-gauges", 1)?;
    Ok(tokio::spawn(gauges::run(
        pool,
        gauges,
        metrics,
        shutdown.clone(),
    )))
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

/// Serves `app` (layered by [`api::layered`]) on `listener` over HTTP/1.1, and over TLS
/// with `tls`, until `shutdown`, each connection held to `limits`, then lets requests in
/// progress finish for up to [`SHUTDOWN_GRACE`]. `stats` counts the connections.
///
/// This is `axum::serve` with settings it does not expose: half-closed connections are
/// allowed, so a client that shuts its side down after its request still gets the answer;
/// request heads must arrive within [`HEADER_READ_TIMEOUT`] and fit in [`MAX_HEAD_BYTES`]
/// and [`MAX_HEADERS`]; bodies must arrive within [`Limits::body_read_timeout`]; a
/// connection whose writes make no progress for [`Limits::write_stall_timeout`] is closed
/// (hyper has no write timeout: the bound wraps the socket, under TLS, so it counts what
/// the client reads, not what rustls buffers); and at most [`Limits::max_connections`] are
/// open at once.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    stats: Arc<ConnectionStats>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let service = api::layered(app).layer(axum::middleware::from_fn_with_state(
        limits.body_read_timeout,
        deadline::body_deadline,
    ));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .half_close(true)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_header_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut slots = ConnectionSlots::new(limits.max_connections, stats);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // Shutdown first; then a place for the connection before accepting it: while none
        // is free, connections wait in the listen backlog (see `Limits::max_connections`).
        let place = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            place = slots.next() => place,
        };
        let (stream, _) = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors and the like: wait, as axum does, not spin.
                Err(error) => {
                    tracing::warn!(%error, "cannot accept a connection; retrying in 1 s");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        let slot = place.occupy();
        // Small JSON answers: send them now rather than wait for more.
        let _ = stream.set_nodelay(true);
        let stream = WriteStall::over_tcp(stream, limits.write_stall_timeout);
        let service = hyper_util::service::TowerToHyperService::new(service.clone());
        match &tls {
            None => {
                let io = hyper_util::rt::TokioIo::new(stream);
                let connection = graceful.watch(builder.serve_connection(io, service));
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "HTTP connection ended with an error");
                    }
                    drop(slot);
                });
            }
            Some(config) => {
                // The handshake runs on the connection's task: a slow client holds up
                // nobody, and one that never finishes is dropped after TLS_HANDSHAKE.
                let acceptor = tokio_rustls::TlsAcceptor::from(config.clone());
                let builder = builder.clone();
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let stream =
                        match tokio::time::timeout(TLS_HANDSHAKE, acceptor.accept(stream)).await {
                            Ok(Ok(stream)) => stream,
                            Ok(Err(error)) => {
                                return tracing::debug!(%error, "TLS handshake failed");
                            }
                            Err(_) => return tracing::debug!("TLS handshake timed out"),
                        };
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let connection = watcher.watch(builder.serve_connection(io, service));
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "HTTPS connection ended with an error");
                    }
                    drop(slot);
                });
            }
        }
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in progress after {SHUTDOWN_GRACE:?}; stopping anyway");
    }
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
