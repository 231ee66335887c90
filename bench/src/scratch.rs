//! What a run makes and drops: scratch databases next to the configured one, and topics
//! under a prefix of their own, all dropped when the run ends, however it ends.

use ra_ledger_testing::ScratchDatabase;

/// Prefix of the scratch databases' names.
const SCRATCH_PREFIX: &str = "ledger_bench";

/// The scratch databases made by this run: each benchmark drops its own when it ends
/// well; these are dropped again (a no-op for those) whatever way it ended.
static MADE: std::sync::Mutex<Vec<ScratchDatabase>> = std::sync::Mutex::new(Vec::new());

/// The prefixes this run's benchmarks named their topics with, each with its brokers: the
/// topics are deleted, with their data, however the run ended.
static TOPICS: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

/// A new prefix for a benchmark's topics on `brokers`, `bench<label><uuid>.`: every topic
/// whose name starts with it is deleted when the run ends ([`TOPICS`]).
pub fn topic_prefix(brokers: &str, label: &str) -> String {
    let prefix = format!("bench{label}{}.", uuid::Uuid::new_v4().simple());
    TOPICS
        .lock()
        .unwrap_or_else(|poison| poison.into_inner())
        .push((brokers.to_owned(), prefix.clone()));
    prefix
}

/// Drops what [`MADE`] holds, its slots first, and deletes the topics of [`TOPICS`]; a
/// failure is said, not raised, so that it does not hide the benchmark's own outcome.
pub async fn drop_leftovers() {
    let made = std::mem::take(&mut *MADE.lock().unwrap_or_else(|poison| poison.into_inner()));
    for database in made {
        let name = database.name.clone();
        if let Err(error) = database.drop().await {
            eprintln!("cannot drop the scratch database {name}: {error}");
        }
    }
    let topics = std::mem::take(&mut *TOPICS.lock().unwrap_or_else(|poison| poison.into_inner()));
    for (brokers, prefix) in topics {
        if let Err(error) = ra_ledger_testing::delete_topics(&brokers, &prefix).await {
            eprintln!("cannot delete the topics {prefix}*: {error}");
        }
    }
}

/// A scratch database next to `database_url`, dropped when the run ends ([`MADE`]) if
/// the benchmark has not dropped it.
pub async fn database(database_url: &str) -> anyhow::Result<ScratchDatabase> {
    let database = ScratchDatabase::create(database_url, SCRATCH_PREFIX).await?;
    MADE.lock()
        .unwrap_or_else(|poison| poison.into_inner())
        .push(database.clone());
    Ok(database)
}
