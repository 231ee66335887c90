//! The Prometheus text exposition format, for every process's `/metrics`: counters and
//! gauges, and histograms with fixed buckets. Each metric is declared once, as a [`Metric`]
//! (name, help, type), in its crate's metrics module; rendering takes that declaration, so
//! the `# HELP` and `# TYPE` lines cannot drift from the name.

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

/// What a metric is: its `# TYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (until the process restarts).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations counted into fixed buckets ([`Histogram`]).
    Histogram,
}

impl Kind {
    /// The word of the `# TYPE` line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
        }
    }
}

/// One metric's declaration: its name, help and type, written once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// The metric name (a histogram's series add `_bucket`, `_sum`, `_count`).
    pub name: &'static str,
    /// The `# HELP` text.
    pub help: &'static str,
    /// The `# TYPE`.
    pub kind: Kind,
}

impl Metric {
    /// A counter.
    pub const fn counter(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            kind: Kind::Counter,
        }
    }

    /// A gauge.
    pub const fn gauge(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            kind: Kind::Gauge,
        }
    }

    /// A histogram, rendered by [`Histogram::render`].
    pub const fn histogram(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            kind: Kind::Histogram,
        }
    }

    /// Appends this counter or gauge, with `value`, in the text exposition format.
    pub fn render(&self, out: &mut String, value: impl std::fmt::Display) {
        self.render_head(out);
        let _ = writeln!(out, "{} {value}", self.name);
    }

    /// Appends this gauge as a set of states: one series per state of `states`, labelled
    /// `label="<state>"`, 1 for `current` and 0 for the others (all 0 without one). The
    /// states are the fixed words of a type, so the label's cardinality is theirs; they are
    /// written as they are, so none may hold `"`, `\` or a line break.
    pub fn render_states(
        &self,
        out: &mut String,
        label: &str,
        states: &[&str],
        current: Option<&str>,
    ) {
        self.render_head(out);
        for state in states {
            debug_assert!(!state.contains(['"', '\\', '\n']), "{state:?}");
            let value = u8::from(current == Some(*state));
            let _ = writeln!(out, "{}{{{label}=\"{state}\"}} {value}", self.name);
        }
    }

    /// Appends this gauge as one series per `(label value, value)` of `series`, labelled
    /// `label="<label value>"`; the head alone when there is none. The label values are
    /// written as they are, so none may hold `"`, `\` or a line break (Kafka topic names
    /// cannot).
    pub fn render_labelled<'a, V: std::fmt::Display>(
        &self,
        out: &mut String,
        label: &str,
        series: impl IntoIterator<Item = (&'a str, V)>,
    ) {
        self.render_head(out);
        for (labelled, value) in series {
            debug_assert!(!labelled.contains(['"', '\\', '\n']), "{labelled:?}");
            let _ = writeln!(out, "{}{{{label}=\"{labelled}\"}} {value}", self.name);
        }
    }

    /// The `# HELP` and `# TYPE` lines.
    fn render_head(&self, out: &mut String) {
        let Self { name, help, kind } = self;
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {}", kind.as_str());
    }
}

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

    /// Appends the histogram, declared as `metric`, in the text exposition format.
    pub fn render(&self, out: &mut String, metric: &Metric) {
        metric.render_head(out);
        let name = metric.name;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_of_states_is_one_series_per_state_under_one_head() {
        let status = Metric::gauge("ra_test_status", "The test's status.");
        let mut out = String::new();
        status.render_states(&mut out, "status", &["up", "down"], Some("down"));
        assert_eq!(
            out,
            "# HELP ra_test_status The test's status.\n# TYPE ra_test_status gauge\n\
             ra_test_status{status=\"up\"} 0\nra_test_status{status=\"down\"} 1\n"
        );
        let mut none = String::new();
        status.render_states(&mut none, "status", &["up", "down"], None);
        assert!(none.ends_with("{status=\"up\"} 0\nra_test_status{status=\"down\"} 0\n"));
    }
}
