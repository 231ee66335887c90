//! The figures the benchmarks print: latency distributions, and how a relay delivered.

use std::time::Duration;

use ra_ledger_cdc::config::DeliveryMode;
use ra_ledger_cdc::metrics::{RelayMetrics, TRANSACTION_COMMIT, TRANSACTION_MESSAGES};

/// How a relay in `delivery` mode delivered, from its metrics: an at-least-once relay's
/// flushes when the stream went idle, or an exactly-once relay's Kafka transactions (how
/// many, their size and their commit time: mean, and p50/p99 as the bucket bounds that hold
/// them).
pub fn delivery_summary(delivery: DeliveryMode, metrics: &RelayMetrics) -> String {
    if delivery == DeliveryMode::AtLeastOnce {
        return format!(
            "{} flushes when the stream went idle (flush_when_idle)",
            metrics.idle_flushes_total()
        );
    }
    let text = metrics.render();
    let histogram = |name: &str| -> (f64, f64, Vec<(f64, f64)>) {
        let (sum_key, count_key) = (format!("{name}_sum"), format!("{name}_count"));
        let bucket_prefix = format!("{name}_bucket{{le=\"");
        let mut sum = 0.0;
        let mut count = 0.0;
        let mut buckets = Vec::new();
        for line in text.lines() {
            let Some((key, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let value: f64 = value.parse().unwrap_or(0.0);
            if key == sum_key {
                sum = value;
            } else if key == count_key {
                count = value;
            } else if let Some(bound) = key
                .strip_prefix(bucket_prefix.as_str())
                .and_then(|rest| rest.strip_suffix("\"}"))
            {
                buckets.push((bound.parse().unwrap_or(f64::INFINITY), value));
            }
        }
        (sum, count, buckets)
    };
    let quantile = |buckets: &[(f64, f64)], count: f64, q: f64| {
        buckets
            .iter()
            .find(|(_, cumulative)| *cumulative >= count * q)
            .map_or(f64::INFINITY, |(bound, _)| *bound)
    };
    let (messages, transactions, size_buckets) = histogram(TRANSACTION_MESSAGES.name);
    let (seconds, _, time_buckets) = histogram(TRANSACTION_COMMIT.name);
    if transactions == 0.0 {
        return "no Kafka transaction committed".to_owned();
    }
    format!(
        "{transactions:.0} Kafka transactions, {:.1} messages each on average (p50 <= {}, p99 <= {}); commit_transaction {:.2} ms on average (p50 <= {} ms, p99 <= {} ms)",
        messages / transactions,
        quantile(&size_buckets, transactions, 0.5),
        quantile(&size_buckets, transactions, 0.99),
        seconds / transactions * 1e3,
        quantile(&time_buckets, transactions, 0.5) * 1e3,
        quantile(&time_buckets, transactions, 0.99) * 1e3,
    )
}

/// The distribution of a set of measured durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latencies {
    /// How many were measured.
    pub count: usize,
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Slowest.
    pub max: Duration,
}

impl Latencies {
    /// Summarizes `samples`; `None` when there are none.
    pub fn from_samples(mut samples: Vec<Duration>) -> Option<Self> {
        samples.sort();
        let last = *samples.last()?;
        let percentile =
            |p: f64| samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)];
        Some(Self {
            count: samples.len(),
            p50: percentile(0.50),
            p99: percentile(0.99),
            max: last,
        })
    }
}

impl std::fmt::Display for Latencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(
            f,
            "p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
            ms(self.p50),
            ms(self.p99),
            ms(self.max)
        )
    }
}
