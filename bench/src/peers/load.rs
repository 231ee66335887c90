//! The load both systems get and the one consumer that measures both: rows with sequence
//! numbers in their payloads, written through the same SQL, read back with the reader of
//! Debezium's Event Router shape ([`ra_ledger_cdc::consumer::event_router`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use ra_ledger_cdc::consumer::event_router;
use rdkafka::consumer::StreamConsumer;

/// Rows of the load: `$1` aggregate type, sequence numbers `$2..=$3`.
const INSERT: &str = include_str!("../sql/peer_rows.sql");

/// Bytes of the payload after the 20-digit sequence number.
const PADDING: usize = 100;

/// Writes sequence numbers `first..first + count` as rows of `aggregate_type`,
/// `per_transaction` per transaction, as fast as PostgreSQL takes them.
pub async fn backlog(
    client: &tokio_postgres::Client,
    aggregate_type: &str,
    first: i64,
    count: u64,
    per_transaction: u64,
) -> anyhow::Result<()> {
    let end = first + count as i64;
    let mut from = first;
    while from < end {
        let to = (from + per_transaction as i64).min(end) - 1;
        client.query(INSERT, &[&aggregate_type, &from, &to]).await?;
        from = to + 1;
    }
    Ok(())
}

/// What a steady writer did: when each event's commit came back to it.
#[derive(Debug, Default)]
pub struct Committed {
    /// Event id -> the moment its transaction's commit returned to the writer.
    pub at: HashMap<String, Instant>,
}

/// `rate` events/s for `duration` (a transaction every 10 ms of rate/100 rows) from
/// sequence number `first`; calls `during` once, `kill_after` into the load, when given.
pub async fn steady<F, Fut>(
    client: &tokio_postgres::Client,
    aggregate_type: &str,
    first: i64,
    rate: u64,
    duration: Duration,
    mut during: Option<(Duration, F)>,
) -> anyhow::Result<Committed>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let per_tick = (rate / 100).max(1) as i64;
    let ticks = (duration.as_millis() / 10) as u64;
    let mut committed = Committed {
        at: HashMap::with_capacity((per_tick as u64 * ticks) as usize),
    };
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    let mut from = first;
    for _ in 0..ticks {
        tick.tick().await;
        let rows = client
            .query(INSERT, &[&aggregate_type, &from, &(from + per_tick - 1)])
            .await?;
        let now = Instant::now();
        committed
            .at
            .extend(rows.iter().map(|row| (row.get::<_, String>(0), now)));
        from += per_tick;
        if let Some((after, _)) = &during
            && started.elapsed() >= *after
            && let Some((_, action)) = during.take()
        {
            action().await?;
        }
    }
    Ok(committed)
}

/// What the consumer saw on one topic.
#[derive(Debug, Default)]
pub struct Delivery {
    /// Event id -> its first receipt.
    pub first_receipt: HashMap<String, Instant>,
    /// Messages received, duplicates included.
    pub messages: u64,
    /// Messages whose event id had been received before.
    pub duplicates: u64,
    /// First receipts of an event whose key had already delivered a later sequence number.
    pub out_of_order: u64,
    /// Messages not in the Event Router's shape, or whose key or payload is not what was
    /// written for their sequence number.
    pub malformed: u64,
    /// The first message's receipt.
    pub first: Option<Instant>,
    /// The last new event's receipt.
    pub last_new: Option<Instant>,
}

impl Delivery {
    /// Events received at least once.
    pub fn unique(&self) -> u64 {
        self.first_receipt.len() as u64
    }
}

/// Reads until `expected` distinct events arrived or none came for `idle`; `progress`
/// counts the distinct events as they come, for whoever waits on them.
pub async fn consume(
    consumer: StreamConsumer,
    expected: u64,
    idle: Duration,
    progress: Arc<AtomicU64>,
) -> Delivery {
    let mut delivery = Delivery {
        first_receipt: HashMap::with_capacity(expected as usize),
        ..Delivery::default()
    };
    let mut highest_by_key: HashMap<String, i64> = HashMap::new();
    let mut stream = consumer.stream();
    while delivery.unique() < expected {
        let Ok(Some(Ok(message))) = tokio::time::timeout(idle, stream.next()).await else {
            break;
        };
        let received = Instant::now();
        delivery.messages += 1;
        delivery.first.get_or_insert(received);
        let Ok(event) = event_router::read(&message) else {
            delivery.malformed += 1;
            continue;
        };
        let Some(sequence) = sequence_of(event.key, event.payload) else {
            delivery.malformed += 1;
            continue;
        };
        if delivery.first_receipt.contains_key(event.id) {
            delivery.duplicates += 1;
            continue;
        }
        delivery.first_receipt.insert(event.id.to_owned(), received);
        delivery.last_new = Some(received);
        progress.store(delivery.unique(), Ordering::Relaxed);
        let highest = highest_by_key.entry(event.key.to_owned()).or_insert(-1);
        if sequence < *highest {
            delivery.out_of_order += 1;
        } else {
            *highest = sequence;
        }
    }
    delivery
}

/// The sequence number of a message whose key and payload are exactly what
/// `peer_rows.sql` wrote for it; `None` otherwise.
fn sequence_of(key: &str, payload: &[u8]) -> Option<i64> {
    let digits = std::str::from_utf8(payload.get(..20)?).ok()?;
    let sequence: i64 = digits.parse().ok()?;
    let padding = &payload[20..];
    let intact = padding.len() == PADDING && padding.iter().all(|byte| *byte == b'x');
    (intact && key == format!("agg-{}", sequence % 1000)).then_some(sequence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_is_its_sequence_number_and_padding() {
        let payload = format!("{:020}{}", 1_234, "x".repeat(PADDING));
        assert_eq!(sequence_of("agg-234", payload.as_bytes()), Some(1_234));
        assert_eq!(sequence_of("agg-235", payload.as_bytes()), None);
        assert_eq!(sequence_of("agg-234", &payload.as_bytes()[..119]), None);
        assert_eq!(sequence_of("agg-234", b"short"), None);
    }
}
