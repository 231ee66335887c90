//! Whether Kafka lost records the watcher had counted: pure, from what it tracks of each
//! partition and what Kafka lists now.
//!
//! Three signs, each sound and cheap (two offsets per partition, asked once a round):
//! - a partition tracked is no longer listed: its topic was deleted (or re-created with
//!   fewer partitions);
//! - a partition's end is below the offset the watcher read to: the topic was re-created,
//!   or the partition truncated (an unclean leader election), and what was read is gone;
//! - a partition's log start is past the offset the count began at: records were removed
//!   (`kafka-delete-records`, `AdminClient::delete_records`, or a retention the event
//!   topics should not have).
//!
//! The records removed carried events the watcher settled as held. It does not keep which
//! (that would be a copy of the topics): it forgets what it proved and reads every topic
//! again from its log start ([`Rescan`]). The events no record is found of then are
//! missing. A topic re-created and refilled past the offset read within one round is the
//! one case these signs miss; the relay does not republish into a new topic by itself, so
//! it would take a producer writing to the re-created topic that fast.

use super::kafka::Listed;

/// What the watcher tracks of one partition (a row of `watcher_partitions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracked {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The log start when the count began.
    pub first: i64,
    /// Where a restart reads from.
    pub resume: i64,
    /// The offset read up to.
    pub read_to: i64,
}

impl Tracked {
    /// A partition first met (or met again by a rescan): counted from its log start.
    pub fn new(listed: &Listed) -> Self {
        Self {
            topic: listed.topic.clone(),
            partition: listed.partition,
            first: listed.low,
            resume: listed.low,
            read_to: listed.low,
        }
    }
}

/// Kafka lost records the watcher counted: why, in a sentence naming the partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rescan(pub String);

/// The partitions to track from now on: those tracked, then those new in `listed`, in
/// that order (a partition keeps its index). Or, when Kafka lost records, why.
pub fn compare(tracked: &[Tracked], listed: &[Listed]) -> Result<Vec<Tracked>, Rescan> {
    let find = |topic: &str, partition: i32| {
        listed
            .iter()
            .find(|l| l.topic == topic && l.partition == partition)
    };
    let mut next = Vec::with_capacity(listed.len());
    for tracked in tracked {
        let name = format!("{}/{}", tracked.topic, tracked.partition);
        let Some(now) = find(&tracked.topic, tracked.partition) else {
            return Err(Rescan(format!(
                "partition {name} is gone: its topic was deleted (or re-created with fewer partitions)"
            )));
        };
        if now.high < tracked.read_to {
            return Err(Rescan(format!(
                "partition {name} ends at offset {}, below offset {} the watcher read to: the topic was re-created or the partition truncated",
                now.high, tracked.read_to
            )));
        }
        if now.low > tracked.first {
            return Err(Rescan(format!(
                "partition {name} starts at offset {}, past offset {} the watcher counted from: records were deleted",
                now.low, tracked.first
            )));
        }
        next.push(tracked.clone());
    }
    for new in listed {
        if !tracked
            .iter()
            .any(|t| t.topic == new.topic && t.partition == new.partition)
        {
            next.push(Tracked::new(new));
        }
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(partition: i32, low: i64, high: i64) -> Listed {
        Listed {
            topic: "t".into(),
            partition,
            low,
            high,
        }
    }

    fn tracked(partition: i32, first: i64, read_to: i64) -> Tracked {
        Tracked {
            topic: "t".into(),
            partition,
            first,
            resume: read_to,
            read_to,
        }
    }

    #[test]
    fn a_partition_that_grew_is_kept_and_a_new_one_is_counted_from_its_start() {
        let next = compare(&[tracked(0, 0, 5)], &[listed(0, 0, 9), listed(1, 3, 4)]).unwrap();
        assert_eq!(next, [tracked(0, 0, 5), tracked(1, 3, 3)]);
    }

    #[test]
    fn an_end_below_what_was_read_is_a_loss() {
        let Rescan(why) = compare(&[tracked(0, 0, 5)], &[listed(0, 0, 2)]).unwrap_err();
        assert!(
            why.contains("t/0 ends at offset 2, below offset 5"),
            "{why}"
        );
    }

    #[test]
    fn a_log_start_past_the_count_is_a_loss() {
        let Rescan(why) = compare(&[tracked(0, 0, 5)], &[listed(0, 4, 5)]).unwrap_err();
        assert!(why.contains("starts at offset 4, past offset 0"), "{why}");
        assert!(why.contains("records were deleted"), "{why}");
    }

    #[test]
    fn a_partition_no_longer_listed_is_a_loss() {
        let Rescan(why) = compare(&[tracked(0, 0, 5)], &[]).unwrap_err();
        assert!(why.contains("t/0 is gone"), "{why}");
    }
}
