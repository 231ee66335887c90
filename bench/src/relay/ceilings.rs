//! The ceilings a relay drain sits between: PostgreSQL's `pg_recvlogical` reading the
//! slot, and rdkafka alone producing the backlog's messages with the relay's producer
//! settings; alone, and both at once as they share the machine under the relay.

use std::time::Instant;

use ra_ledger_cdc::config::RelayConfig;
use ra_ledger_cdc::infra::pg::ReplicationTarget;
use ra_ledger_cdc::infra::settings::local;
use ra_ledger_testing::ScratchDatabase;
use uuid::Uuid;

use super::sampler::{CpuUse, WalsenderTime};
use super::{Inserted, Pgoutput};

/// `pg_recvlogical` alone draining the slot, for one format. Not PostgreSQL's ceiling by
/// itself: alone on a core of its own, `pg_recvlogical` sleeps as soon as its socket is
/// empty, so the two wake each other every few messages. On 2 cores (2026-12-03) that
/// ping-pong kept the walsender at one core, never waiting for a CPU or for its client, for
/// 120,000-150,000 rows/s at 6.6-7.5 µs a row, while the same slot drained at 187,000 rows/s
/// beside a process that only burned CPU, and the walsender cost 2.8-3.3 µs a row under the
/// relay. The slot's ceiling is the faster of this and the shared drain
/// ([`RelayFigures::slot_ceiling`](super::RelayFigures::slot_ceiling)).
#[derive(Debug, Clone)]
pub(super) struct SlotCeiling {
    pub(super) format: Pgoutput,
    /// Rows/s.
    pub(super) rate: f64,
    pub(super) walsender: WalsenderTime,
}

/// `pg_recvlogical` and rdkafka alone draining at the same time, one format: the two ends
/// sharing the machine, as they do under the relay.
#[derive(Debug, Clone)]
pub(super) struct SharedCeiling {
    pub(super) format: Pgoutput,
    /// `pg_recvlogical`'s rows/s.
    pub(super) slot: f64,
    /// rdkafka's rows/s.
    pub(super) broker: f64,
    pub(super) cpu: CpuUse,
}

impl SharedCeiling {
    /// The lower of the two: what a relay that costs nothing could reach on this machine
    /// (a little above it, as the one that ends first leaves the other the machine).
    pub(super) fn rate(&self) -> f64 {
        self.slot.min(self.broker)
    }
}

/// The broker's ceiling: the same messages (`value` each) produced by rdkafka alone, with
/// the relay's producer settings and in-flight bound, and a producer that does nothing
/// with Kafka's answers but count them. Rows/s.
pub(crate) async fn rdkafka_alone(
    relay_config: &RelayConfig,
    topic: &str,
    keys: &[(Uuid, String)],
    per_transaction: u64,
    value: &[u8],
) -> anyhow::Result<f64> {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{BaseRecord, Producer as _, ThreadedProducer};
    let producer: ThreadedProducer<Counted> = relay_config
        .kafka_settings()
        .client_config()?
        .create_with_context(Counted::default())?;
    let counted = std::sync::Arc::clone(producer.context());
    let started = Instant::now();
    for (index, (event_id, key)) in keys.iter().enumerate() {
        let id = event_id.to_string();
        let ordinal = (index % per_transaction as usize).to_string();
        let header = |key, value: &'static [u8]| Header {
            key,
            value: Some(value),
        };
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "id",
                value: Some(id.as_bytes()),
            })
            .insert(header("event_type", b"AssignmentStarted"))
            .insert(header("commit_lsn", b"0/16B3748"))
            .insert(header("txid", b"742"))
            .insert(header("commit_timestamp", b"2026-11-30T00:00:00.000000Z"))
            .insert(Header {
                key: "ordinal",
                value: Some(ordinal.as_bytes()),
            });
        let record = BaseRecord::to(topic)
            .key(key.as_bytes())
            .payload(value)
            .headers(headers);
        producer.send(record).map_err(|(error, _)| error)?;
        // Same bound as the relay's max_in_flight.
        counted
            .wait_until((index + 1).saturating_sub(relay_config.max_in_flight))
            .await;
    }
    counted.wait_until(keys.len()).await;
    if let Some(error) = counted.failure.lock().expect("not poisoned").take() {
        return Err(error.into());
    }
    Ok(keys.len() as f64 / started.elapsed().as_secs_f64())
}

/// A producer context that counts Kafka's answers and keeps the first failure.
#[derive(Default)]
struct Counted {
    answered: std::sync::atomic::AtomicUsize,
    failure: std::sync::Mutex<Option<rdkafka::error::KafkaError>>,
    arrival: tokio::sync::Notify,
}

impl Counted {
    /// Waits until Kafka answered `count` messages.
    async fn wait_until(&self, count: usize) {
        while self.answered.load(std::sync::atomic::Ordering::Acquire) < count {
            self.arrival.notified().await;
        }
    }
}

impl rdkafka::ClientContext for Counted {}

impl rdkafka::producer::ProducerContext for Counted {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, (): ()) {
        if let Err((error, _)) = result {
            self.failure
                .lock()
                .expect("not poisoned")
                .get_or_insert_with(|| error.clone());
        }
        self.answered
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        self.arrival.notify_one();
    }
}

/// The backlog's event ids and keys, in outbox order, for [`rdkafka_alone`].
pub(crate) async fn backlog_keys(
    client: &tokio_postgres::Client,
) -> anyhow::Result<Vec<(Uuid, String)>> {
    Ok(client
        .query("SELECT event_id, aggregate_id FROM outbox ORDER BY id", &[])
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect())
}

/// The slot's ceiling: `pg_recvlogical` reading the backlog to /dev/null. Rows/s.
pub(super) async fn recvlogical_drain(
    scratch: &ScratchDatabase,
    slot: &str,
    backlog: &Inserted,
    format: Pgoutput,
) -> anyhow::Result<f64> {
    let settings = ra_ledger_cdc::infra::pg::config(&scratch.url, "ledger-bench")?;
    let target = ReplicationTarget::of(&settings);
    let started = Instant::now();
    let status = tokio::process::Command::new(pg_recvlogical()?)
        .args(["-h", &target.host, "-p", &target.port.to_string()])
        .args(["-U", &target.user, "-d", &target.database])
        .args(["--slot", slot, "--start", "--no-loop", "-f", "/dev/null"])
        .args(["-E", &backlog.end_lsn])
        .args(["-o", "proto_version=1", "-o"])
        .arg(format!("publication_names={}", local::PUBLICATION))
        .args(["-o", &format!("binary={}", format.binary())])
        .env("PGPASSWORD", &target.password)
        .status()
        .await?;
    anyhow::ensure!(status.success(), "pg_recvlogical failed: {status}");
    Ok(backlog.rows as f64 / started.elapsed().as_secs_f64())
}

fn pg_recvlogical() -> anyhow::Result<std::path::PathBuf> {
    let mut candidates: Vec<std::path::PathBuf> = std::fs::read_dir("/usr/lib/postgresql")?
        .flatten()
        .map(|entry| entry.path().join("bin/pg_recvlogical"))
        .filter(|path| path.exists())
        .collect();
    candidates.sort();
    candidates
        .pop()
        .ok_or_else(|| anyhow::anyhow!("pg_recvlogical not found under /usr/lib/postgresql"))
}
