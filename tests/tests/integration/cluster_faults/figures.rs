//! The figures a fault test prints beside `ledger reconcile`'s counts, from what its
//! consumer received: each event's latency from its commit (the `commit_timestamp` header)
//! to its first receipt, split by whether it committed during a fault, and how long after
//! each fault the lag was under 1 s again. Pure: the consumer's records in, numbers out.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use ra_ledger_tests::relay::Received;

/// The lag a consumer counts as caught up under.
pub(super) const CAUGHT_UP: Duration = Duration::from_secs(1);

/// A fault's span: from the moment it was made to the moment Kafka had healed (a node
/// back and every partition in sync).
#[derive(Debug, Clone)]
pub(super) struct Window {
    /// When the fault was made.
    pub(super) began: DateTime<Utc>,
    /// When Kafka had healed.
    pub(super) healed: DateTime<Utc>,
}

impl Window {
    /// Its length.
    pub(super) fn seconds(&self) -> f64 {
        (self.healed - self.began).as_seconds_f64()
    }

    fn holds(&self, at: DateTime<Utc>) -> bool {
        self.began <= at && at <= self.healed
    }
}

/// Commit → receipt of one event's first copy.
#[derive(Debug, Clone, Copy)]
struct Sample {
    committed: DateTime<Utc>,
    received: DateTime<Utc>,
}

impl Sample {
    fn latency(&self) -> Duration {
        (self.received - self.committed)
            .to_std()
            .unwrap_or_default()
    }
}

/// The figures of one lane.
#[derive(Debug, Clone)]
pub(super) struct Figures {
    /// p99 (and count) of the events committed during a fault.
    pub(super) during: Option<(Duration, usize)>,
    /// p99 (and count) of the others.
    pub(super) outside: Option<(Duration, usize)>,
    /// The slowest event.
    pub(super) max: Duration,
    /// Per fault: from its heal until every later receipt (up to the next fault) had a lag
    /// under [`CAUGHT_UP`]; zero when it was under 1 s already at the heal.
    pub(super) recovery_after_heal: Vec<Duration>,
    /// Per fault: the same from the moment the fault was made.
    pub(super) recovery_after_fault: Vec<Duration>,
}

impl Figures {
    /// The figures of the events of `expected` among `received`, for faults `windows`
    /// (in the order they were made, not overlapping).
    pub(super) fn of(
        received: &[Received],
        expected: &HashSet<String>,
        windows: &[Window],
    ) -> Self {
        let mut first: HashMap<&str, Sample> = HashMap::new();
        for record in received {
            let (id, Some(committed)) = (record.id(), record.committed_at()) else {
                continue;
            };
            if !expected.contains(id) {
                continue;
            }
            let sample = Sample {
                committed,
                received: record.received_at,
            };
            first
                .entry(id)
                .and_modify(|kept| {
                    if sample.received < kept.received {
                        *kept = sample;
                    }
                })
                .or_insert(sample);
        }
        let samples: Vec<Sample> = first.into_values().collect();
        let (during, outside): (Vec<Sample>, Vec<Sample>) = samples
            .iter()
            .partition(|s| windows.iter().any(|w| w.holds(s.committed)));
        let mut recovery_after_heal = Vec::new();
        let mut recovery_after_fault = Vec::new();
        for (index, window) in windows.iter().enumerate() {
            let until = windows.get(index + 1).map(|next| next.began);
            let last_late = samples
                .iter()
                .filter(|s| s.received >= window.began && until.is_none_or(|end| s.received < end))
                .filter(|s| s.latency() >= CAUGHT_UP)
                .map(|s| s.received)
                .max();
            let after = |from: DateTime<Utc>| {
                last_late
                    .and_then(|late| (late - from).to_std().ok())
                    .unwrap_or_default()
            };
            recovery_after_heal.push(after(window.healed));
            recovery_after_fault.push(after(window.began));
        }
        Self {
            during: p99(&during),
            outside: p99(&outside),
            max: samples
                .iter()
                .map(Sample::latency)
                .max()
                .unwrap_or_default(),
            recovery_after_heal,
            recovery_after_fault,
        }
    }
}

/// The 99th percentile of the samples' latencies, and how many there were.
fn p99(samples: &[Sample]) -> Option<(Duration, usize)> {
    let mut latencies: Vec<Duration> = samples.iter().map(Sample::latency).collect();
    latencies.sort();
    let index = ((latencies.len() as f64 * 0.99) as usize).min(latencies.len().checked_sub(1)?);
    Some((latencies[index], latencies.len()))
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p99 = |figure: Option<(Duration, usize)>| match figure {
            Some((p99, n)) => format!("{:.0} ms (n={n})", p99.as_secs_f64() * 1e3),
            None => "none".to_owned(),
        };
        let seconds = |list: &[Duration]| {
            list.iter()
                .map(|d| format!("{:.1}", d.as_secs_f64()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        write!(
            f,
            "commit -> receipt p99 {} committed during the faults, {} outside, max {:.0} ms; \
             lag under 1 s again [{}] s after each heal ([{}] s after each fault began)",
            p99(self.during),
            p99(self.outside),
            self.max.as_secs_f64() * 1e3,
            seconds(&self.recovery_after_heal),
            seconds(&self.recovery_after_fault),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: f64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + (seconds * 1e3) as i64).unwrap()
    }

    fn record(id: &str, committed: f64, received: f64) -> Received {
        Received {
            topic: "t".into(),
            partition: 0,
            offset: 0,
            key: "k".into(),
            payload: Vec::new(),
            headers: HashMap::from([
                ("id".to_owned(), id.to_owned()),
                (
                    "commit_timestamp".to_owned(),
                    at(committed).to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                ),
            ]),
            received_at: at(received),
        }
    }

    #[test]
    fn latencies_split_by_commit_time_and_recovery_counts_from_the_last_late_receipt() {
        let received = vec![
            record("a", 1.0, 1.01),
            // Committed in the fault, held 6 s, received after the heal at 12.
            record("b", 10.5, 16.5),
            record("c", 11.0, 16.6),
            // A second copy, later: only the first receipt counts.
            record("c", 11.0, 30.0),
            record("d", 17.0, 17.02),
            // Not an event of the ledger (a page request): left out.
            record("x", 11.0, 40.0),
        ];
        let expected: HashSet<String> = ["a", "b", "c", "d"].map(str::to_owned).into();
        let windows = [Window {
            began: at(10.0),
            healed: at(12.0),
        }];
        let figures = Figures::of(&received, &expected, &windows);
        assert_eq!(figures.during.map(|(_, n)| n), Some(2));
        assert_eq!(figures.outside.map(|(_, n)| n), Some(2));
        assert_eq!(figures.during.unwrap().0, Duration::from_secs(6));
        assert_eq!(figures.max, Duration::from_secs(6));
        assert_eq!(figures.recovery_after_heal, [Duration::from_millis(4_600)]);
        assert_eq!(figures.recovery_after_fault, [Duration::from_millis(6_600)]);

        // Under 1 s all along: nothing to recover from.
        let calm = Figures::of(&received[..1], &expected, &windows);
        assert_eq!(calm.recovery_after_heal, [Duration::ZERO]);
        assert_eq!(calm.during, None);
    }
}
