//! The Prometheus text exposition format, for every process's `/metrics`: counters and
//! gauges, and histograms with fixed buckets.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the commit→ack histogram buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Upper bounds of the messages-per-transaction histogram buckets. The sum is rendered
/// the way seconds are: it is a plain count here.
const COUNT_BUCKETS: [f64; 14] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0,
    50_000.0,
];

/// A Prometheus histogram with fixed buckets: by default of seconds, from 1 ms to 30 s.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::with_bounds(&BUCKETS)
    }
}

impl Histogram {
    /// A histogram with these bucket bounds (as many as the seconds one has).
    fn with_bounds(bounds: &'static [f64; BUCKETS.len()]) -> Self {
        Self {
            bounds,
            buckets: Default::default(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    /// A histogram of counts (messages per transaction), from 1 to 50,000.
    pub fn of_counts() -> Self {
        Self::with_bounds(&COUNT_BUCKETS)
    }

    /// Records one observation.
    pub fn observe(&self, seconds: f64) {
        for (bucket, bound) in self.buckets.iter().zip(self.bounds) {
            let bound = *bound;
            if seconds <= bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add((seconds.max(0.0) * 1e6) as u64, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Appends the histogram in the text exposition format.
    pub fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (bucket, bound) in self.buckets.iter().zip(self.bounds) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{bound}\"}} {}",
                bucket.load(Ordering::Relaxed)
            );
        }
        let count = self.count();
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(
            out,
            "{name}_sum {:.6}",
            self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "{name}_count {count}");
    }
}

/// Appends one gauge or counter in the text exposition format.
pub fn render_value(
    out: &mut String,
    name: &str,
    help: &str,
    kind: &str,
    value: impl std::fmt::Display,
) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
    );
}
