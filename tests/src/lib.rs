//! Test harness of RA Ledger: a real PostgreSQL (`wal_level=logical`) and a real
//! Apache Kafka broker per test run, a fresh database and fresh topics per test; brokers
//! and three-node clusters of their own for the tests that break them; a real schema
//! registry (Apicurio) per run for the tests that frame values for registries.

pub mod api;
pub mod background;
pub mod broker;
pub mod browser;
pub mod cli;
pub mod cluster;
pub mod database;
pub mod kafka;
pub mod postgres;
pub mod process;
pub mod registry;
pub mod relay;
pub mod replicated;
pub mod runs;
pub mod stack;
pub mod tls;
pub mod witness;
pub mod worker;

pub use background::Background;
pub use database::TestDatabase;
pub use kafka::TestTopics;
pub use stack::stack;

/// A random lowercase suffix for names that must not collide between tests or runs.
pub fn random_suffix() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..12)
        .map(|_| char::from(b'a' + rng.random_range(0..26u8)))
        .collect()
}

/// How many times a fault test repeats its fault: the environment variable `name` when set
/// (a longer run for the docs' figures), else `default` (the everyday suite's, within its
/// time budget).
///
/// # Panics
/// When `name` is set to anything but a count: a typo must not run the default in silence.
pub fn repetitions(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?}: expected a count")),
        Err(_) => default,
    }
}

/// Waits until `done` holds, checking every 100 ms, for at most `limit`; fails naming
/// `what` when it never did.
pub async fn wait_for<F, Fut>(
    what: &str,
    limit: std::time::Duration,
    mut done: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = std::time::Instant::now() + limit;
    while !done().await? {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "{what}: not after {limit:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The value of an unlabelled metric `name` in a Prometheus text rendering; 0 when absent.
pub fn metric(rendered: &str, name: &str) -> u64 {
    rendered
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}
