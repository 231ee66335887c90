//! Charts: a value over time as a line (the lag history, a run's pages over time), and a
//! value per item as bars (a run's rows per second, page by page).

use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::{Scale, WIDTH, seconds, time_ticks};
use crate::console::units::Unit;

const HEIGHT: f64 = 150.0;
const LEFT: f64 = 76.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 22.0;
const BOTTOM: f64 = 24.0;

/// What a chart shows: its title, its class (for the tests and the stylesheet) and unit.
#[derive(Debug, Clone, Copy)]
pub(in crate::console) struct Series<'a> {
    /// The heading inside the picture, e.g. "Slot lag (bytes)".
    pub title: &'a str,
    /// The picture's class beside `chart`, e.g. `lag-bytes`.
    pub class: &'a str,
    /// What the values count: the axis says its top in it (MB, minutes, /s).
    pub unit: Unit,
}

/// The top of a value axis: the largest value, 10% more, at least 1.
fn ceiling(values: impl Iterator<Item = f64>) -> f64 {
    (values.fold(0.0, f64::max) * 1.1).max(1.0)
}

/// The frame: title, value axis (0 and its top) and, when given, a time axis.
fn frame(series: &Series, top: f64, time: Option<(DateTime<Utc>, DateTime<Utc>, Scale)>) -> Markup {
    let baseline = HEIGHT - BOTTOM;
    html! {
        text.title x=(LEFT) y="14" { (series.title) }
        line.axis x1=(LEFT) y1=(baseline) x2=(WIDTH - RIGHT) y2=(baseline) {}
        line.axis x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(baseline) {}
        text.value x=(LEFT - 6.0) y=(baseline) { "0" }
        text.value x=(LEFT - 6.0) y=(TOP + 8.0) { (series.unit.show(top)) }
        @if let Some((start, end, x)) = time {
            @for (tick, label) in time_ticks(start, end) {
                @let at = x.at(seconds(tick));
                line.tick x1=(fmt(at)) y1=(baseline) x2=(fmt(at)) y2=(baseline + 4.0) {}
                text.tick x=(fmt(at)) y=(HEIGHT - 6.0) { (label) }
            }
        }
    }
}

/// Two decimals are plenty for a pixel.
fn fmt(value: f64) -> String {
    format!("{value:.2}")
}

/// `points` over `[start, end]` as a line, broken where a value is missing. Each point is
/// a `circle` too when there are few enough to see one by one.
pub(in crate::console) fn line_over_time(
    series: &Series,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    points: &[(DateTime<Utc>, Option<f64>)],
) -> Markup {
    let top = ceiling(points.iter().filter_map(|(_, value)| *value));
    let x = Scale::new((seconds(start), seconds(end)), (LEFT, WIDTH - RIGHT));
    let y = Scale::new((0.0, top), (HEIGHT - BOTTOM, TOP));
    // Runs of consecutive points with a value: one polyline each.
    let mut segments: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    for (at, value) in points {
        match value {
            Some(value) => segments
                .last_mut()
                .expect("one segment at least")
                .push((x.at(seconds(*at)), y.at(*value))),
            None => segments.push(Vec::new()),
        }
    }
    let shown = points.iter().filter(|(_, value)| value.is_some()).count();
    let newest = points.iter().rev().find_map(|(_, value)| *value);
    let largest = points
        .iter()
        .filter_map(|(_, value)| *value)
        .fold(0.0, f64::max);
    html! {
        svg.picture.chart.(series.class) viewBox={"0 0 " (WIDTH) " " (HEIGHT)} role="img"
            data-points=(shown) data-newest=(newest.map_or(String::new(), |v| format!("{v:.3}")))
            data-largest=(format!("{largest:.3}")) {
            title { (series.title) ", " (shown) " samples" }
            (frame(series, top, Some((start, end, x))))
            @for segment in segments.iter().filter(|segment| !segment.is_empty()) {
                polyline.series points=(segment.iter().map(|(px, py)| format!("{px:.2},{py:.2}")).collect::<Vec<_>>().join(" ")) {}
            }
            @if shown <= 120 {
                @for (px, py) in segments.iter().flatten() {
                    circle.point cx=(fmt(*px)) cy=(fmt(*py)) r="2" {}
                }
            }
            @if shown == 0 {
                text.empty x=(WIDTH / 2.0) y=(HEIGHT / 2.0) { "no samples in this window yet" }
            }
        }
    }
}

/// One bar per item, labelled below every so often.
#[derive(Debug, Clone)]
pub(in crate::console) struct Bar {
    /// Under the bar, e.g. the page number.
    pub label: String,
    /// Its height.
    pub value: f64,
    /// Its tooltip.
    pub title: String,
}

/// `bars` side by side, each a `rect.bar` with `data-value`.
pub(in crate::console) fn bars(series: &Series, bars: &[Bar]) -> Markup {
    let top = ceiling(bars.iter().map(|bar| bar.value));
    let y = Scale::new((0.0, top), (HEIGHT - BOTTOM, TOP));
    let slot = (WIDTH - LEFT - RIGHT) / bars.len().max(1) as f64;
    let every = (bars.len() / 12).max(1);
    html! {
        svg.picture.chart.(series.class) viewBox={"0 0 " (WIDTH) " " (HEIGHT)} role="img" data-bars=(bars.len()) {
            title { (series.title) ", " (bars.len()) " bars" }
            (frame(series, top, None))
            @for (index, bar) in bars.iter().enumerate() {
                @let left = LEFT + slot * index as f64;
                @let height = (HEIGHT - BOTTOM) - y.at(bar.value);
                rect.bar x=(fmt(left + slot * 0.1)) y=(fmt(y.at(bar.value))) width=(fmt(slot * 0.8)) height=(fmt(height.max(0.0)))
                    data-value=(format!("{:.3}", bar.value)) data-label=(bar.label) {
                    title { (bar.title) }
                }
                @if index % every == 0 {
                    text.tick x=(fmt(left + slot / 2.0)) y=(HEIGHT - 6.0) { (bar.label) }
                }
            }
            @if bars.is_empty() {
                text.empty x=(WIDTH / 2.0) y=(HEIGHT / 2.0) { "no page yet" }
            }
        }
    }
}
