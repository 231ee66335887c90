//! The console's pictures: SVG drawn by the server, inline in the page, with `maud` (escaped
//! like the rest of the markup). Nothing is fetched and nothing runs in the browser, so the
//! strict CSP holds: no `style` attribute and no `<style>` element anywhere (the look comes
//! from classes in `console.css`), geometry as plain attributes. Every mark carries `data-`
//! attributes naming what it stands for, which the browser tests read back.
//!
//! - [`timeline`]: a business's RA timeline, a lane per jurisdiction.
//! - [`chart`]: a line over time (the lag history) and bars (a run's pages).
//! - [`progress`]: a replay's published events against the selected ones.
//!
//! Geometry is pure and small ([`Scale`], [`time_ticks`]); the functions here take data, never
//! a database.

pub(super) mod chart;
pub(super) mod progress;
pub(super) mod timeline;

use chrono::{DateTime, Duration, DurationRound, Utc};

/// Width of every picture, in SVG units (the page scales it to the column).
pub(super) const WIDTH: f64 = 960.0;

/// A linear map from a domain to pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Scale {
    from: (f64, f64),
    to: (f64, f64),
}

impl Scale {
    /// Maps `from` onto `to`; an empty domain maps everything to the middle.
    pub(super) fn new(from: (f64, f64), to: (f64, f64)) -> Self {
        Self { from, to }
    }

    /// Where `value` lands.
    pub(super) fn at(&self, value: f64) -> f64 {
        let (d0, d1) = self.from;
        let (r0, r1) = self.to;
        if d1 - d0 == 0.0 {
            return (r0 + r1) / 2.0;
        }
        r0 + (value - d0) / (d1 - d0) * (r1 - r0)
    }
}

/// Seconds since the Unix epoch, with microseconds: a time on a [`Scale`].
pub(super) fn seconds(time: DateTime<Utc>) -> f64 {
    time.timestamp_micros() as f64 / 1e6
}

/// Ticks for a time axis over `[start, end]`: about six round instants (the step from 1 s to a
/// year), each with its label (a clock time within a day, else a date).
pub(super) fn time_ticks(start: DateTime<Utc>, end: DateTime<Utc>) -> Vec<(DateTime<Utc>, String)> {
    const STEPS: [i64; 16] = [
        1,
        5,
        15,
        60,
        300,
        900,
        1_800,
        3_600,
        3 * 3_600,
        6 * 3_600,
        12 * 3_600,
        86_400,
        7 * 86_400,
        30 * 86_400,
        91 * 86_400,
        365 * 86_400,
    ];
    let span = (end - start).num_seconds().max(1);
    let step = STEPS
        .iter()
        .copied()
        .find(|step| span / step <= 6)
        .unwrap_or(span / 6);
    let step = Duration::seconds(step.max(1));
    let format = if step < Duration::days(1) {
        if step < Duration::minutes(1) {
            "%H:%M:%S"
        } else {
            "%H:%M"
        }
    } else {
        "%Y-%m-%d"
    };
    let mut tick = start.duration_trunc(step).unwrap_or(start);
    if tick < start {
        tick += step;
    }
    let mut ticks = Vec::new();
    while tick <= end && ticks.len() < 12 {
        ticks.push((tick, tick.format(format).to_string()));
        tick += step;
    }
    ticks
}

/// A number for an axis: 1.2k, 3.4M; seconds and bytes read the same way.
pub(super) fn short(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 1e9 {
        format!("{:.1}G", value / 1e9)
    } else if magnitude >= 1e6 {
        format!("{:.1}M", value / 1e6)
    } else if magnitude >= 1e3 {
        format!("{:.1}k", value / 1e3)
    } else if magnitude >= 10.0 || magnitude == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

/// A text cut to about `width` units (7 per character at the console's size), `None` when
/// not even three characters fit.
pub(super) fn fitted(text: &str, width: f64) -> Option<String> {
    let fits = ((width - 8.0) / 7.0).floor();
    if fits < 3.0 {
        return None;
    }
    let fits = fits as usize;
    if text.chars().count() <= fits {
        return Some(text.to_owned());
    }
    let cut: String = text.chars().take(fits - 1).collect();
    Some(format!("{}…", cut.trim_end()))
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn a_scale_maps_its_ends_and_an_empty_domain_to_the_middle() {
        let scale = Scale::new((10.0, 20.0), (0.0, 100.0));
        assert_eq!(scale.at(10.0), 0.0);
        assert_eq!(scale.at(15.0), 50.0);
        assert_eq!(scale.at(20.0), 100.0);
        assert_eq!(Scale::new((5.0, 5.0), (0.0, 100.0)).at(5.0), 50.0);
    }

    #[test]
    fn time_ticks_are_round_and_inside_the_span() {
        let start = Utc.with_ymd_and_hms(2026, 3, 1, 11, 2, 7).unwrap();
        let ticks = time_ticks(start, start + Duration::hours(1));
        let labels: Vec<&str> = ticks.iter().map(|(_, label)| label.as_str()).collect();
        assert_eq!(labels, ["11:15", "11:30", "11:45", "12:00"]);
        let days = time_ticks(start, start + Duration::days(20));
        assert!(
            days.iter()
                .all(|(at, label)| *at >= start && label.len() == 10),
            "{days:?}"
        );
    }

    #[test]
    fn labels_are_cut_to_their_band() {
        assert_eq!(
            fitted("Congress Avenue Office", 400.0).as_deref(),
            Some("Congress Avenue Office")
        );
        assert_eq!(
            fitted("Congress Avenue Office", 80.0).as_deref(),
            Some("Congress…")
        );
        assert_eq!(fitted("Congress Avenue Office", 20.0), None);
        assert_eq!(short(1_234.0), "1.2k");
        assert_eq!(short(0.5), "0.5");
    }
}
