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
    /// The most events appended per second between two samples in the bucket (the
    /// day's buckets keep a burst's peak); `None` without a sample before.
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
                &progress.map(|slot| slot.lag().seconds(now)),
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
    Ok(rows
        .iter()
        .map(|row| Point {
            at: row.get("bucket"),
            lag_bytes: row.get("lag_bytes"),
            retained_bytes: row.get("retained_bytes"),
            waited_seconds: row.get("waited_seconds"),
            events_per_second: row.get("events_per_second"),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_named_in_links_and_anything_else_is_the_hour() {
        assert_eq!(Window::parse(Window::Day.as_str()), Window::Day);
        assert_eq!(Window::parse("week"), Window::Hour);
        assert_eq!(Window::Hour.length().as_secs() / u64::from(POINTS), 5);
        assert_eq!(Window::Day.length().as_secs() / u64::from(POINTS), 120);
    }
}
