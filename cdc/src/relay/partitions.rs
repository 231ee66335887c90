//! Beside a streaming session: the partition count of each event topic, as Kafka's metadata
//! says, read at the session's start and every `health_check_interval_ms` (one metadata
//! request per topic, of that topic alone), on the gauge `ra_relay_topic_partitions{topic}`.
//! A count that changed under the process is logged at `error`, naming the topic, both
//! counts and what it means; the alert `RaTopicPartitionsChanged` pages on the gauge, across
//! restarts of the relay too.
//!
//! What partitions added to an event topic do (issue 55, item 8): the producer places a
//! message by its key's hash modulo the partition count, so once librdkafka reads the new
//! count (at its next metadata refresh, or the next session's producer) the keys that hash
//! elsewhere go to another partition than their earlier events. Nothing is lost: every
//! message is acknowledged on some partition, and the relay confirms as before. But Kafka
//! orders only within a partition, so a consumer may read a key's newer event, on the new
//! partition, before its older ones still waiting on the old: per-key order across the
//! change is not kept.
//!
//! Why the relay pages and goes on rather than refuse. Kafka cannot take partitions away,
//! so a refusal could not be mended by undoing the change: the only ways on would be to
//! start the relay again as it is, or to move the topic's events to a topic created anew
//! with the old count, both operator work while every consumer's feed stands still. And by
//! the time any reader of metadata sees the change, librdkafka may already have placed
//! messages by it. What order needs is in every message: `commit_lsn` and `ordinal` give
//! the ledger's total order, so a consumer that must not apply a key's events out of order
//! across the change can drain the old partitions first or order by those headers
//! (docs/operators.md, "Partitions added to an event topic"). Paging tells the teams to do
//! so now; refusing would add an outage to the same work.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::BaseConsumer;
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use crate::config::RelayConfig;
use crate::metrics::RelayMetrics;
use crate::value_format::ENVELOPE_AGGREGATES;

/// How long one metadata request may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// One topic's partition count, as it changed between two readings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionChange {
    /// The topic.
    pub topic: String,
    /// Its count at the earlier reading.
    pub before: i32,
    /// Its count now.
    pub now: i32,
}

impl std::fmt::Display for PartitionChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "topic {} has {} partitions, {} when last read: keys that now hash to another \
             partition have their newer events there, and a consumer may read them before \
             older ones of the same key still on the old partition. Nothing is lost; per-key \
             order across the change is not kept. Consumers that need it must finish the old \
             partitions first or order by the commit_lsn and ordinal headers \
             (docs/operators.md, \"Partitions added to an event topic\")",
            self.topic, self.now, self.before
        )
    }
}

/// The changes between the counts `known` and those just `read`. Pure. A topic read for
/// the first time is no change, and one missing from `read` (its metadata unreadable this
/// time) keeps its known count: only two readings of a topic can disagree.
pub fn changes(
    known: &BTreeMap<String, i32>,
    read: &BTreeMap<String, i32>,
) -> Vec<PartitionChange> {
    read.iter()
        .filter_map(|(topic, &now)| {
            let &before = known.get(topic)?;
            (before != now).then(|| PartitionChange {
                topic: topic.clone(),
                before,
                now,
            })
        })
        .collect()
}

/// Records the counts just `read` on `metrics` and returns what changed since the
/// counts it knew.
pub fn record(metrics: &RelayMetrics, read: &BTreeMap<String, i32>) -> Vec<PartitionChange> {
    changes(&metrics.topic_partitions.record(read), read)
}

/// Reads the event topics' partition counts now and every `health_check_interval_ms`
/// until `stop`, recording them on `metrics` and logging each change at `error`.
pub(super) async fn watch(
    config: RelayConfig,
    metrics: Arc<RelayMetrics>,
    stop: CancellationToken,
) {
    let created = config
        .consumer_settings()
        .client_config()
        .map_err(|error| error.to_string())
        .and_then(|settings| settings.create::<BaseConsumer>().map_err(|e| e.to_string()));
    let client = match created {
        Ok(client) => Arc::new(client),
        Err(error) => {
            warn!(%error, "cannot read the event topics' partition counts");
            return;
        }
    };
    let topics: Vec<String> = ENVELOPE_AGGREGATES
        .iter()
        .map(|a| config.topic(a))
        .collect();
    let interval = Duration::from_millis(config.health_check_interval_ms);
    loop {
        let reader = Arc::clone(&client);
        let wanted = topics.clone();
        if let Ok(read) = tokio::task::spawn_blocking(move || read_counts(&reader, &wanted)).await {
            for change in record(&metrics, &read) {
                error!(
                    topic = %change.topic,
                    before = change.before,
                    now = change.now,
                    "{change}"
                );
            }
        }
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// The partition count of each of `topics` that Kafka's metadata describes; a topic it
/// does not (missing, not authorized, the broker not answering) is left out. Blocking.
fn read_counts(client: &BaseConsumer, topics: &[String]) -> BTreeMap<String, i32> {
    use rdkafka::consumer::Consumer as _;
    let mut counts = BTreeMap::new();
    for topic in topics {
        let Ok(metadata) = client.fetch_metadata(Some(topic), METADATA_TIMEOUT) else {
            continue;
        };
        for described in metadata.topics() {
            if described.name() == topic
                && described.error().is_none()
                && !described.partitions().is_empty()
            {
                let count = i32::try_from(described.partitions().len()).unwrap_or(i32::MAX);
                counts.insert(topic.clone(), count);
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::TOPIC_PARTITIONS;

    fn counts(pairs: &[(&str, i32)]) -> BTreeMap<String, i32> {
        pairs.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect()
    }

    #[test]
    fn only_a_count_read_twice_and_different_is_a_change() {
        let known = counts(&[("a", 3), ("b", 3)]);
        assert!(
            changes(&BTreeMap::new(), &known).is_empty(),
            "a first reading"
        );
        assert!(changes(&known, &known).is_empty());
        // b unreadable this time: no change; c new: none either.
        assert!(changes(&known, &counts(&[("a", 3), ("c", 6)])).is_empty());
        assert_eq!(
            changes(&known, &counts(&[("a", 6), ("b", 3)])),
            [PartitionChange {
                topic: "a".into(),
                before: 3,
                now: 6
            }]
        );
    }

    #[test]
    fn the_gauge_keeps_the_newest_count_of_each_topic_read() {
        let metrics = RelayMetrics::default();
        assert!(record(&metrics, &counts(&[("t.a", 3), ("t.b", 3)])).is_empty());
        let changed = record(&metrics, &counts(&[("t.a", 6)]));
        assert_eq!(changed.len(), 1);
        assert!(
            changed[0]
                .to_string()
                .contains("topic t.a has 6 partitions, 3 when last read"),
            "{}",
            changed[0]
        );
        let mut out = String::new();
        metrics.topic_partitions.render(&mut out, &TOPIC_PARTITIONS);
        assert!(
            out.contains("ra_relay_topic_partitions{topic=\"t.a\"} 6\n"),
            "{out}"
        );
        assert!(
            out.contains("ra_relay_topic_partitions{topic=\"t.b\"} 3\n"),
            "{out}"
        );
        // The next change is against the newest count, not the first.
        assert!(record(&metrics, &counts(&[("t.a", 6)])).is_empty());
    }
}
