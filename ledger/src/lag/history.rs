//! The lag history: a sample of the slot and the outbox every round of `ledger serve`'s
//! gauges ([`crate::gauges`]), in table `lag_samples` (migration V16), kept
//! [`KEPT`]; read back in buckets for the console's pictures of the last hour and day.
//!
//! A table, not a buffer in memory: every replica of the service draws the same history,
//! and a restart loses none of it. One row per round's time bucket (several services on one
//! database write one between them), removed a day later by the statement that writes.

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use super::SlotProgress;

/// How long samples are kept.
pub const KEPT: Duration = Duration::from_secs(24 * 3600);

/// Points a picture of the history holds at most: its window is read in this many buckets.
pub const POINTS: u32 = 720;

/// The windows the console draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// The last hour (buckets of 5 s).
    Hour,
    /// The last day (buckets of 2 min).
    Day,
}

impl Window {
    /// Its length.
    pub fn length(self) -> Duration {
        match self {
            Self::Hour => Duration::from_secs(3600),
            Self::Day => KEPT,
        }
    }

    /// The word the console's links carry (`?lag=hour`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hour => "hour",
            Self::Day => "day",
        }
    }

    /// The window a link names; the hour for anything else.
    pub fn parse(text: &str) -> Self {
        if text == "day" { Self::Day } else { Self::Hour }
    }
}

/// One bucket of the history.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// The bucket's start.
    pub at: DateTime<Utc>,
    /// The most WAL bytes the slot had not confirmed in the bucket.
    pub lag_bytes: Option<i64>,
    /// The most WAL bytes the slot kept.
    pub retained_bytes: Option<i64>,
    /// The longest wait of the oldest unpublished commit.
    pub waited_seconds: Option<f64>,
    /// Events appended per second since the bucket before; `None` for the first.
    pub events_per_second: Option<f64>,
}

/// Records one sample of `progress` (`None`: no slot), in buckets of `every`.
pub async fn record(
    client: &impl GenericClient,
    progress: Option<&SlotProgress>,
    every: Duration,
) -> Result<(), tokio_postgres::Error> {
    let now = Utc::now();
    client
        .execute(
            include_str!("../sql/lag/record_sample.sql"),
            &[
                &progress.and_then(|slot| slot.lag_bytes),
                &progress.and_then(|slot| slot.retained_bytes),
                &progress.map(|slot| slot.waited_seconds(now)),
                &every.as_secs_f64(),
                &KEPT.as_secs_f64(),
            ],
        )
        .await?;
    Ok(())
}

/// The history of `window`, oldest first, in [`POINTS`] buckets at most.
pub async fn read(
    client: &impl GenericClient,
    window: Window,
) -> Result<Vec<Point>, tokio_postgres::Error> {
    let length = window.length().as_secs_f64();
    let rows = client
        .query(
            include_str!("../sql/lag/history.sql"),
            &[&length, &(length / f64::from(POINTS))],
        )
        .await?;
    let buckets = rows.iter().map(|row| Bucket {
        at: row.get(0),
        lag_bytes: row.get(1),
        retained_bytes: row.get(2),
        waited_seconds: row.get(3),
        events_position: row.get(4),
    });
    Ok(points(buckets))
}

/// A bucket as the database sums it up.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    at: DateTime<Utc>,
    lag_bytes: Option<i64>,
    retained_bytes: Option<i64>,
    waited_seconds: Option<f64>,
    events_position: Option<i64>,
}

/// The buckets with their rates: events per second between the highest positions of a
/// bucket and of the one before.
fn points(buckets: impl Iterator<Item = Bucket>) -> Vec<Point> {
    let mut before: Option<(DateTime<Utc>, i64)> = None;
    buckets
        .map(|bucket| {
            let events_per_second = match (before, bucket.events_position) {
                (Some((then, from)), Some(to)) => {
                    let seconds = (bucket.at - then).as_seconds_f64();
                    (seconds > 0.0).then(|| (to - from).max(0) as f64 / seconds)
                }
                _ => None,
            };
            if let Some(position) = bucket.events_position {
                before = Some((bucket.at, position));
            }
            Point {
                at: bucket.at,
                lag_bytes: bucket.lag_bytes,
                retained_bytes: bucket.retained_bytes,
                waited_seconds: bucket.waited_seconds,
                events_per_second,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn events_per_second_come_from_the_positions_of_neighbouring_buckets() {
        let start = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
        let bucket = |seconds: i64, position: i64| Bucket {
            at: start + chrono::Duration::seconds(seconds),
            lag_bytes: Some(0),
            retained_bytes: Some(0),
            waited_seconds: Some(0.0),
            events_position: Some(position),
        };
        // A gap (a restart, no samples for 20 s) spreads its events over the gap.
        let points = points([bucket(0, 100), bucket(5, 150), bucket(25, 250)].into_iter());
        let rates: Vec<Option<f64>> = points.iter().map(|p| p.events_per_second).collect();
        assert_eq!(rates, [None, Some(10.0), Some(5.0)]);
    }

    #[test]
    fn a_window_is_named_in_links_and_anything_else_is_the_hour() {
        assert_eq!(Window::parse(Window::Day.as_str()), Window::Day);
        assert_eq!(Window::parse("week"), Window::Hour);
        assert_eq!(Window::Hour.length().as_secs() / u64::from(POINTS), 5);
        assert_eq!(Window::Day.length().as_secs() / u64::from(POINTS), 120);
    }
}
