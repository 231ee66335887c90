//! The soak's samples, and whether each series is flat after warm-up: pure functions, so
//! the rule the docs state is the rule the unit tests hold.
//!
//! The rule (docs/benchmarks.md, "An hour under load"): the first [`WARM_UP`] of the run is
//! warm-up and left out. Over the samples after it, a least-squares line gives the rise
//! (its slope times the span of those samples) and the noise (the standard deviation of
//! the samples around the line). A series is **growing** when its rise is more than
//! [`NOISE_MULTIPLE`] times its noise *and* more than [`RELATIVE_FLOOR`] of its mean;
//! otherwise **flat** (a series that falls is flat too). Both bounds are needed: a slow
//! leak with little noise passes the first alone, and a noisy series such as the lag the
//! second alone.

/// The share of the run, from its start, counted as warm-up.
pub const WARM_UP: f64 = 0.2;

/// How many times its noise a series must rise by to be growing.
pub const NOISE_MULTIPLE: f64 = 2.0;

/// The share of its mean a series must rise by to be growing.
pub const RELATIVE_FLOOR: f64 = 0.05;

/// Fewest samples after warm-up that a verdict is given on.
pub const FEWEST: usize = 3;

/// One series the soak samples.
#[derive(Debug, Clone, Copy)]
pub struct Series {
    /// Its CSV column.
    pub key: &'static str,
    /// What it is, for the table's verdicts and the picture.
    pub label: &'static str,
    /// Its unit.
    pub unit: &'static str,
}

/// The series, in the order of [`Sample::values`].
pub const SERIES: [Series; 7] = [
    Series {
        key: "serve_rss_mib",
        label: "ledger serve resident memory",
        unit: "MiB",
    },
    Series {
        key: "relay_rss_mib",
        label: "ledger relay resident memory",
        unit: "MiB",
    },
    Series {
        key: "worker_rss_mib",
        label: "ledger worker resident memory",
        unit: "MiB",
    },
    Series {
        key: "outbox_rows",
        label: "outbox rows",
        unit: "rows",
    },
    Series {
        key: "outbox_mib",
        label: "outbox on disk",
        unit: "MiB",
    },
    Series {
        key: "slot_wal_mib",
        label: "WAL the slot retains",
        unit: "MiB",
    },
    Series {
        key: "lag_seconds",
        label: "relay lag (oldest unconfirmed commit)",
        unit: "s",
    },
];

/// What one sampling read.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Seconds since the load started.
    pub seconds: f64,
    /// Events the load had written by then.
    pub written: u64,
    /// One value per [`SERIES`].
    pub values: [f64; SERIES.len()],
}

/// Flat or growing, by the rule of this module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No growth beyond noise.
    Flat,
    /// Rises by more than its noise and the relative floor.
    Growing,
    /// Fewer than [`FEWEST`] samples after warm-up.
    TooFewSamples,
}

impl Verdict {
    /// How the table and the picture say it.
    pub fn word(self) -> &'static str {
        match self {
            Self::Flat => "flat",
            Self::Growing => "GROWING",
            Self::TooFewSamples => "too few samples",
        }
    }
}

/// A series' trend after warm-up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trend {
    /// Samples after warm-up.
    pub samples: usize,
    /// Their mean.
    pub mean: f64,
    /// The fitted line's change from the first of them to the last.
    pub rise: f64,
    /// Standard deviation of the samples around the line.
    pub noise: f64,
    /// The line's slope per second, and its value at `seconds` = 0 (for the picture).
    pub slope: f64,
    /// The line's value at 0 s.
    pub intercept: f64,
    /// The verdict.
    pub verdict: Verdict,
}

/// The trend of `points` (seconds, value) after `warm_up_until` seconds.
pub fn trend(points: &[(f64, f64)], warm_up_until: f64) -> Trend {
    let after: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|(t, _)| *t >= warm_up_until)
        .collect();
    let n = after.len();
    let mean = after.iter().map(|(_, y)| y).sum::<f64>() / n.max(1) as f64;
    let mean_t = after.iter().map(|(t, _)| t).sum::<f64>() / n.max(1) as f64;
    let spread: f64 = after.iter().map(|(t, _)| (t - mean_t).powi(2)).sum();
    let slope = if spread > 0.0 {
        after
            .iter()
            .map(|(t, y)| (t - mean_t) * (y - mean))
            .sum::<f64>()
            / spread
    } else {
        0.0
    };
    let intercept = mean - slope * mean_t;
    let span = match (after.first(), after.last()) {
        (Some(first), Some(last)) => last.0 - first.0,
        _ => 0.0,
    };
    let squares: f64 = after
        .iter()
        .map(|(t, y)| (y - (intercept + slope * t)).powi(2))
        .sum();
    let noise = if n > 2 {
        (squares / (n - 2) as f64).sqrt()
    } else {
        0.0
    };
    let rise = slope * span;
    Trend {
        samples: n,
        mean,
        rise,
        noise,
        slope,
        intercept,
        verdict: verdict(n, rise, noise, mean),
    }
}

/// The rule itself: growing when the rise exceeds both bounds.
fn verdict(samples: usize, rise: f64, noise: f64, mean: f64) -> Verdict {
    if samples < FEWEST {
        Verdict::TooFewSamples
    } else if rise > NOISE_MULTIPLE * noise && rise > RELATIVE_FLOOR * mean.abs() {
        Verdict::Growing
    } else {
        Verdict::Flat
    }
}

/// The trend of every series of `samples`, warm-up being the first [`WARM_UP`] of a run of
/// `run_seconds`.
pub fn trends(samples: &[Sample], run_seconds: f64) -> Vec<Trend> {
    (0..SERIES.len())
        .map(|index| trend(&points(samples, index), WARM_UP * run_seconds))
        .collect()
}

/// Series `index` of `samples` as (seconds, value).
pub fn points(samples: &[Sample], index: usize) -> Vec<(f64, f64)> {
    samples
        .iter()
        .map(|sample| (sample.seconds, sample.values[index]))
        .collect()
}

/// The samples as CSV: a header of the columns, then one line per sample.
pub fn csv(samples: &[Sample]) -> String {
    let mut text = String::from("seconds,events_written");
    for series in SERIES {
        text.push(',');
        text.push_str(series.key);
    }
    text.push('\n');
    for sample in samples {
        text.push_str(&format!("{:.1},{}", sample.seconds, sample.written));
        for value in sample.values {
            text.push_str(&format!(",{value:.3}"));
        }
        text.push('\n');
    }
    text
}

/// The table's header.
pub fn table_header() -> String {
    format!(
        "{:>7} {:>9} {:>9} {:>9} {:>10} {:>11} {:>10} {:>8} {:>7}",
        "s",
        "events",
        "serve MiB",
        "relay MiB",
        "worker MiB",
        "outbox rows",
        "outbox MiB",
        "WAL MiB",
        "lag s"
    )
}

/// One line of the table.
pub fn table_row(sample: &Sample) -> String {
    let v = &sample.values;
    format!(
        "{:>7.0} {:>9} {:>9.1} {:>9.1} {:>10.1} {:>11.0} {:>10.2} {:>8.2} {:>7.3}",
        sample.seconds, sample.written, v[0], v[1], v[2], v[3], v[4], v[5], v[6]
    )
}

/// The verdict line of a series.
pub fn verdict_line(series: &Series, trend: &Trend) -> String {
    format!(
        "{:<40} {:<15} mean {:.3} {}, rise {:+.3} against noise {:.3} ({} samples after warm-up)",
        series.label,
        trend.verdict.word(),
        trend.mean,
        series.unit,
        trend.rise,
        trend.noise,
        trend.samples
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(values: &[f64]) -> Vec<(f64, f64)> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| (60.0 * i as f64, *v))
            .collect()
    }

    #[test]
    fn a_steady_series_with_noise_is_flat() {
        let points = line(&[
            90.0, 100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 101.0, 99.0, 100.0,
        ]);
        let trend = trend(&points, 120.0);
        assert_eq!(trend.verdict, Verdict::Flat, "{trend:?}");
        assert_eq!(trend.samples, 8);
    }

    #[test]
    fn a_steady_climb_is_growing_and_warm_up_is_left_out() {
        // Warm-up jumps from 10 to 100; after it, 100 to 114 by 2 a sample.
        let points = line(&[
            10.0, 50.0, 100.0, 102.0, 104.0, 106.0, 108.0, 110.0, 112.0, 114.0,
        ]);
        let trend = trend(&points, 120.0);
        assert_eq!(trend.verdict, Verdict::Growing, "{trend:?}");
        assert!((trend.rise - 14.0).abs() < 1e-9, "{trend:?}");
        assert!(trend.noise < 1e-9);
        // With the warm-up's jump counted, the rise would be far larger.
        assert!(super::trend(&points, 0.0).rise > 50.0);
    }

    #[test]
    fn a_rise_within_the_noise_is_flat() {
        // Rises by 8 over the run (7% of its mean), but jumps by about ±22 from sample to
        // sample.
        let points = line(&[
            100.0, 125.0, 80.0, 127.0, 82.0, 129.0, 84.0, 131.0, 86.0, 133.0,
        ]);
        let trend = trend(&points, 60.0);
        assert!((trend.rise - 8.0).abs() < 1e-9, "{trend:?}");
        assert!(trend.rise > RELATIVE_FLOOR * trend.mean);
        assert_eq!(trend.verdict, Verdict::Flat, "{trend:?}");
    }

    #[test]
    fn a_small_steady_rise_under_the_relative_floor_is_flat() {
        // 1% over the run, with no noise at all.
        let points = line(&[1000.0, 1000.0, 1002.0, 1004.0, 1006.0, 1008.0, 1010.0]);
        let trend = trend(&points, 60.0);
        assert!(trend.rise > NOISE_MULTIPLE * trend.noise);
        assert_eq!(trend.verdict, Verdict::Flat, "{trend:?}");
    }

    #[test]
    fn a_falling_or_zero_series_is_flat_and_two_samples_are_too_few() {
        assert_eq!(
            trend(&line(&[9.0, 8.0, 7.0, 6.0, 5.0]), 0.0).verdict,
            Verdict::Flat
        );
        assert_eq!(trend(&line(&[0.0; 6]), 0.0).verdict, Verdict::Flat);
        assert_eq!(
            trend(&line(&[1.0, 2.0, 3.0]), 60.0).verdict,
            Verdict::TooFewSamples
        );
    }

    #[test]
    fn the_csv_has_a_column_per_series_and_a_line_per_sample() {
        let sample = Sample {
            seconds: 10.0,
            written: 2_000,
            values: [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.25],
        };
        let text = csv(&[sample.clone(), sample]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].split(',').count(), 2 + SERIES.len());
        assert!(lines[0].starts_with("seconds,events_written,serve_rss_mib,"));
        assert_eq!(
            lines[1],
            "10.0,2000,1.000,2.000,3.000,4.000,5.000,6.000,0.250"
        );
    }
}
