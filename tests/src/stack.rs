//! One PostgreSQL and one Apache Kafka broker per test run.
//!
//! The first test that asks for [`stack`] starts both, on free loopback ports, in a private
//! temporary folder; every later test reuses them. When `LEDGER_TEST_DATABASE_URL` and/or
//! `LEDGER_TEST_KAFKA_BROKERS` are set, the harness uses those servers instead (for example
//! a managed Kafka elsewhere) and starts nothing for them.
//!
//! Nothing outlives the run: every server is started through `setpriv --pdeathsig` from a
//! keeper thread ([`crate::process`]) that lives as long as the test process, so the kernel
//! signals the servers the moment the process ends, whether the tests passed, panicked or
//! were killed. Folders of earlier runs whose process is gone are removed at the next start.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::Context;

use crate::broker::{BrokerServer, Security};
use crate::cluster::{BrokerCluster, QuorumLayout};
pub use crate::postgres::PostgresServer;

/// Prefix of the per-run folders under the system temporary folder.
const RUN_DIR_PREFIX: &str = "ra-ledger-test-";

/// The servers of this test run.
#[derive(Debug)]
pub struct Stack {
    /// URL of a PostgreSQL role that may create databases, roles and replication slots,
    /// connected to its maintenance database.
    pub admin_url: String,
    /// Kafka bootstrap servers.
    pub kafka_brokers: String,
    /// Our own PostgreSQL, when the harness started one (restart tests need it).
    pub postgres: Option<PostgresServer>,
    /// Our own broker, when the harness started one (outage tests need it).
    pub broker: Option<BrokerServer>,
}

/// The stack of this test run, started on first use.
///
/// # Panics
/// When a server cannot be started; the message says what to install or set.
pub fn stack() -> &'static Stack {
    static STACK: OnceLock<Stack> = OnceLock::new();
    STACK.get_or_init(|| match start() {
        Ok(stack) => stack,
        Err(error) => panic!("cannot start the test stack: {error:#}"),
    })
}

/// The folder of this run's servers.
pub fn run_dir() -> PathBuf {
    std::env::temp_dir().join(format!("{RUN_DIR_PREFIX}{}", std::process::id()))
}

fn start() -> anyhow::Result<Stack> {
    let run_dir = run_dir();
    remove_stale_run_dirs();
    let _ = std::fs::remove_dir_all(&run_dir);
    std::fs::create_dir_all(&run_dir).with_context(|| format!("creating {}", run_dir.display()))?;

    let (admin_url, postgres) = match std::env::var("LEDGER_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => (url, None),
        _ => {
            let server = PostgresServer::init(&run_dir.join("postgres"))?;
            server.start()?;
            (server.admin_url(), Some(server))
        }
    };
    let (kafka_brokers, broker) = match std::env::var("LEDGER_TEST_KAFKA_BROKERS") {
        Ok(brokers) if !brokers.is_empty() => (brokers, None),
        _ => {
            let server = BrokerServer::new(&run_dir.join("kafka"), Security::Plaintext)?;
            server.start()?;
            (server.brokers(), Some(server))
        }
    };
    Ok(Stack {
        admin_url,
        kafka_brokers,
        postgres,
        broker,
    })
}

/// A PostgreSQL cluster of its own, for tests that restart it: stopping the shared one
/// would break the tests running beside them.
pub fn private_postgres() -> anyhow::Result<PostgresServer> {
    let server = unstarted_postgres()?;
    server.start()?;
    Ok(server)
}

/// Like [`private_postgres`], to be changed before it starts.
pub fn unstarted_postgres() -> anyhow::Result<PostgresServer> {
    // The shared stack clears the run folder when it starts: start it first.
    stack();
    PostgresServer::init(&run_dir().join(format!("postgres-{}", crate::random_suffix())))
}

/// Like [`unstarted_postgres`], on binaries built with OpenSSL
/// ([`crate::postgres::bindir::tls_bindir`]), for tests of TLS: the run's PostgreSQL 18 has
/// none, so this is Debian's then.
pub fn unstarted_tls_postgres() -> anyhow::Result<PostgresServer> {
    stack();
    PostgresServer::init_in(
        &run_dir().join(format!("postgres-tls-{}", crate::random_suffix())),
        crate::postgres::bindir::tls_bindir()?,
    )
}

/// A plaintext broker of its own, for tests that pause, kill or restart it.
pub fn private_broker() -> anyhow::Result<BrokerServer> {
    private_broker_with(Security::Plaintext)
}

/// A broker of its own whose client listener asks for `security`.
pub fn private_broker_with(security: Security) -> anyhow::Result<BrokerServer> {
    // The shared stack clears the run folder when it starts: start it first.
    stack();
    let dir = run_dir().join(format!("kafka-{}", crate::random_suffix()));
    let server = BrokerServer::new(&dir, security)?;
    server.start()?;
    Ok(server)
}

/// A cluster of `size` brokers of its own ([`BrokerCluster`]), its quorum as `layout`
/// says, for tests of broker faults.
pub fn private_cluster(size: usize, layout: QuorumLayout) -> anyhow::Result<BrokerCluster> {
    // The shared stack clears the run folder when it starts: start it first.
    stack();
    BrokerCluster::start(
        &run_dir().join(format!("cluster-{}", crate::random_suffix())),
        size,
        layout,
    )
}

/// Removes folders of earlier runs whose test process is gone.
fn remove_stale_run_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix(RUN_DIR_PREFIX))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
