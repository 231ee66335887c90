//! One running watcher: its lock, its consumer, its memory, and a round (the steps of the
//! module's doc, in order).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use tokio_postgres::types::ToSql;

use super::kafka::{self, Listed, Read, WatchConsumer};
use super::losses::{self, Rescan, Tracked};
use super::metrics::WatcherGauges;
use super::window::{Loaded, Seen, Window};
use super::{Settings, WatchError};
use crate::reconcile::EVENT_AGGREGATES;

/// Longest a round reads records.
const READ_BUDGET: Duration = Duration::from_secs(5);

/// The watcher's lock: a connection of its own that is closed, never returned to the pool
/// (where it would go on holding the lock), when the watcher stops.
struct Lock(Option<Object>);

impl Drop for Lock {
    fn drop(&mut self) {
        if let Some(object) = self.0.take() {
            drop(Object::take(object));
        }
    }
}

/// A watcher holding the lock.
pub(super) struct Watcher {
    _lock: Lock,
    pool: Pool,
    consumer: Arc<WatchConsumer>,
    topics: Vec<String>,
    lag_bound: f64,
    window: Window,
    tracked: Vec<Tracked>,
    /// Where each tracked partition's read stands.
    positions: Vec<i64>,
    /// The last position handed out and the fence taken after it, until it closes.
    fence: Option<(i64, String)>,
    /// Every position at or below this is committed or never will be.
    closed: i64,
    rescans: i64,
    rescan: Option<String>,
    missing: i64,
    /// The partitions as last saved, with their resume offsets: unchanged, not saved again.
    saved: Option<(Vec<Tracked>, Vec<i64>)>,
}

impl Watcher {
    /// Takes the lock and the progress saved; `None` when another replica holds the lock.
    pub(super) async fn start(
        pool: &Pool,
        settings: &Settings,
    ) -> Result<Option<Self>, WatchError> {
        let lock = pool.get().await?;
        let held: bool = lock
            .query_one(include_str!("../sql/watcher/lock.sql"), &[])
            .await?
            .get(0);
        if !held {
            return Ok(None);
        }
        let lock = Lock(Some(lock));
        let client = pool.get().await?;
        let (watermark, rescans) = match client
            .query_opt(include_str!("../sql/watcher/state.sql"), &[])
            .await?
        {
            Some(row) => (row.get(0), row.get(1)),
            None => (0, 0),
        };
        let tracked: Vec<Tracked> = client
            .query(include_str!("../sql/watcher/partitions.sql"), &[])
            .await?
            .iter()
            .map(|row| Tracked {
                topic: row.get(0),
                partition: row.get(1),
                first: row.get(2),
                resume: row.get(3),
                read_to: row.get(4),
            })
            .collect();
        let config = settings.relay.consumer_settings().client_config()?;
        Ok(Some(Self {
            _lock: lock,
            pool: pool.clone(),
            consumer: Arc::new(kafka::consumer(config)?),
            topics: EVENT_AGGREGATES
                .iter()
                .map(|aggregate| settings.relay.topic(aggregate))
                .collect(),
            lag_bound: settings.lag_bound.as_secs_f64(),
            window: Window::new(watermark, settings.window).with_grace(super::COMMIT_GRACE),
            positions: tracked.iter().map(|t| t.resume).collect(),
            tracked,
            fence: None,
            closed: watermark,
            rescans,
            rescan: None,
            // Unknown until the first round saves: assume some, so that it looks.
            missing: 1,
            saved: None,
        }))
    }

    /// The watermark.
    pub(super) fn watermark(&self) -> i64 {
        self.window.watermark()
    }

    /// One round.
    pub(super) async fn round(&mut self) -> Result<WatcherGauges, WatchError> {
        self.close().await?;
        let consumer = Arc::clone(&self.consumer);
        let topics = self.topics.clone();
        let listed = blocking(move || kafka::list(&consumer, &topics)).await?;
        let ends = self.follow(&listed);
        self.load().await?;
        let read = self.read(ends).await?;
        for &(partition, offset, id) in &read.records {
            self.window.read(id, Seen { partition, offset });
        }
        for (i, tracked) in self.tracked.iter_mut().enumerate() {
            tracked.read_to = tracked.read_to.max(read.positions[i]);
        }
        self.positions = read.positions;
        self.prune().await?;
        let parked = self.parked(read.reached).await?;
        let settled = self.window.settle(self.closed, read.reached, &parked);
        for (partition, offset) in self.window.take_rewinds() {
            if let Some(position) = self.positions.get_mut(partition) {
                *position = (*position).min(offset);
            }
        }
        if !settled.missing.is_empty() {
            tracing::error!(
                missing = settled.missing.len(),
                first = %uuid::Uuid::from_u128(settled.missing[0].1),
                position = settled.missing[0].0,
                "committed events older than the lag bound are not on Kafka"
            );
        }
        self.save(&settled.missing, &settled.found).await
    }

    /// Step 1: the last fence closes once no transaction below it is in progress; a new
    /// one is taken once it did.
    async fn close(&mut self) -> Result<(), WatchError> {
        let mut client = self.pool.get().await?;
        if let Some((last, fence)) = &self.fence {
            let open = client
                .query(include_str!("../sql/older_in_progress.sql"), &[fence])
                .await?;
            if !open.is_empty() {
                return Ok(());
            }
            self.closed = self.closed.max(*last);
            self.fence = None;
        }
        let transaction = client.transaction().await?;
        let last: i64 = transaction
            .query_one(include_str!("../sql/watcher/last_position.sql"), &[])
            .await?
            .get(0);
        let fence: String = transaction
            .query_one(include_str!("../sql/watcher/fence.sql"), &[])
            .await?
            .get(0);
        transaction.commit().await?;
        self.fence = Some((last, fence));
        Ok(())
    }

    /// Step 2: the partitions to read, and each one's end; a rescan when Kafka lost
    /// records.
    fn follow(&mut self, listed: &[Listed]) -> Vec<i64> {
        match losses::compare(&self.tracked, listed) {
            Ok(next) => {
                self.positions
                    .extend(next[self.tracked.len()..].iter().map(|t| t.resume));
                self.tracked = next;
            }
            Err(Rescan(why)) => {
                tracing::error!(
                    %why,
                    "Kafka lost records the watcher had counted: reading every event topic again from its start"
                );
                self.rescans += 1;
                self.rescan = Some(why);
                self.tracked = listed.iter().map(Tracked::new).collect();
                self.positions = self.tracked.iter().map(|t| t.resume).collect();
                self.window =
                    Window::new(0, self.window.capacity()).with_grace(super::COMMIT_GRACE);
            }
        }
        self.tracked
            .iter()
            .map(|t| {
                listed
                    .iter()
                    .find(|l| l.topic == t.topic && l.partition == t.partition)
                    .map_or(t.read_to, |l| l.high)
            })
            .collect()
    }

    /// Step 3: the window's events: those above where the window's final part ends, and
    /// the age of the young ones below it that no record was read of yet.
    async fn load(&mut self) -> Result<(), WatchError> {
        let client = self.pool.get().await?;
        let limit = self.window.room() as i64;
        let aggregates: Vec<&str> = EVENT_AGGREGATES.to_vec();
        let rows = client
            .query(
                include_str!("../sql/watcher/load.sql"),
                &[
                    &self.window.load_from(),
                    &limit,
                    &aggregates,
                    &self.lag_bound,
                    &self.window.rechecks(),
                ],
            )
            .await?;
        let events: Vec<Loaded> = rows
            .iter()
            .map(|row| Loaded {
                position: row.get(0),
                id: row.get::<_, uuid::Uuid>(1).as_u128(),
                overdue: row.get(2),
            })
            .collect();
        self.window.load_closed(&events, self.closed);
        Ok(())
    }

    /// Step 4: the records, to `ends`.
    async fn read(&self, ends: Vec<i64>) -> Result<Read, WatchError> {
        let consumer = Arc::clone(&self.consumer);
        let partitions: Vec<(String, i32)> = self
            .tracked
            .iter()
            .map(|t| (t.topic.clone(), t.partition))
            .collect();
        let from = self.positions.clone();
        let most = self.window.capacity();
        blocking(move || kafka::read(&consumer, &partitions, &from, &ends, READ_BUDGET, most)).await
    }

    /// The ids read ahead that the database says need no watching are forgotten (and an
    /// event listed missing whose record was read is missing no more).
    async fn prune(&mut self) -> Result<(), WatchError> {
        let unchecked = self.window.unchecked();
        if unchecked.is_empty() {
            return Ok(());
        }
        let client = self.pool.get().await?;
        let ids: Vec<uuid::Uuid> = unchecked
            .iter()
            .map(|id| uuid::Uuid::from_u128(*id))
            .collect();
        let keep: HashSet<u128> = client
            .query(
                include_str!("../sql/watcher/prune_ahead.sql"),
                &[&ids, &self.window.watermark()],
            )
            .await?
            .iter()
            .map(|row| row.get::<_, uuid::Uuid>(0).as_u128())
            .collect();
        let forget: Vec<u128> = unchecked
            .into_iter()
            .filter(|id| !keep.contains(id))
            .collect();
        self.window.forget(&forget);
        Ok(())
    }

    /// Which overdue events no record was read of `outbox_parked` holds (asked only when
    /// the read reached every end: else none is due).
    async fn parked(&self, reached: bool) -> Result<HashSet<u128>, WatchError> {
        let unread = self.window.overdue_unread(self.closed);
        if !reached || unread.is_empty() {
            return Ok(HashSet::new());
        }
        let client = self.pool.get().await?;
        let ids: Vec<uuid::Uuid> = unread.iter().map(|id| uuid::Uuid::from_u128(*id)).collect();
        Ok(client
            .query(include_str!("../sql/reconcile/parked_among.sql"), &[&ids])
            .await?
            .iter()
            .map(|row| row.get::<_, uuid::Uuid>(0).as_u128())
            .collect())
    }

    /// Step 6: the round's findings and progress, in one transaction; the gauges.
    async fn save(
        &mut self,
        missing: &[(i64, u128)],
        found: &[u128],
    ) -> Result<WatcherGauges, WatchError> {
        let mut client = self.pool.get().await?;
        let transaction = client.transaction().await?;
        if !missing.is_empty() {
            let ids: Vec<uuid::Uuid> = missing.iter().map(|m| uuid::Uuid::from_u128(m.1)).collect();
            let positions: Vec<i64> = missing.iter().map(|m| m.0).collect();
            transaction
                .execute(
                    include_str!("../sql/watcher/add_missing.sql"),
                    &[&ids, &positions],
                )
                .await?;
        }
        if self.missing > 0 && !found.is_empty() {
            let ids: Vec<uuid::Uuid> = found.iter().map(|id| uuid::Uuid::from_u128(*id)).collect();
            transaction
                .execute(include_str!("../sql/watcher/found.sql"), &[&ids])
                .await?;
        }
        let resume = self.window.checkpoint(&self.positions);
        let params: [&(dyn ToSql + Sync); 4] = [
            &self.window.watermark(),
            &self.lag_bound,
            &self.rescans,
            &self.rescan,
        ];
        transaction
            .execute(include_str!("../sql/watcher/save_progress.sql"), &params)
            .await?;
        let partitions = (self.tracked.clone(), resume);
        if self.saved.as_ref() != Some(&partitions) {
            save_partitions(&transaction, &partitions.0, &partitions.1).await?;
        }
        let row = transaction
            .query_one(include_str!("../sql/watcher/gauges.sql"), &[])
            .await?;
        transaction.commit().await?;
        self.saved = Some(partitions);
        self.rescan = None;
        self.missing = row.get("missing");
        Ok(WatcherGauges {
            missing: self.missing,
            watermark: self.window.watermark(),
            pending: self.window.sizes().0,
            round_at: row.get::<_, Option<f64>>("round_at").unwrap_or(0.0),
            rescans: self.rescans,
            active: true,
        })
    }
}

/// The partitions tracked, with where a restart resumes each.
async fn save_partitions(
    transaction: &deadpool_postgres::Transaction<'_>,
    tracked: &[Tracked],
    resume: &[i64],
) -> Result<(), tokio_postgres::Error> {
    let topics: Vec<&str> = tracked.iter().map(|t| t.topic.as_str()).collect();
    let partitions: Vec<i32> = tracked.iter().map(|t| t.partition).collect();
    let firsts: Vec<i64> = tracked.iter().map(|t| t.first).collect();
    let read_to: Vec<i64> = tracked.iter().map(|t| t.read_to).collect();
    transaction
        .execute(include_str!("../sql/watcher/forget_partitions.sql"), &[])
        .await?;
    transaction
        .execute(
            include_str!("../sql/watcher/save_partitions.sql"),
            &[&topics, &partitions, &firsts, &resume, &read_to],
        )
        .await?;
    Ok(())
}

/// Runs blocking Kafka work on a blocking thread.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, rdkafka::error::KafkaError> + Send + 'static,
) -> Result<T, WatchError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| rdkafka::error::KafkaError::Canceled)?
        .map_err(WatchError::from)
}
