//! Replays' progress: per replay, a bar as long as the events it selected, filled as far as
//! it published.

use maud::{Markup, html};

use super::{Scale, WIDTH, fitted};
use crate::replay::ReplaySummary;

const ROW: f64 = 26.0;
const LEFT: f64 = 300.0;
const RIGHT: f64 = 150.0;

/// The replays' bars, newest first, as the table beside them lists them.
pub(in crate::console) fn replays(replays: &[ReplaySummary]) -> Markup {
    let height = ROW * replays.len() as f64 + 8.0;
    let widest = replays
        .iter()
        .map(|replay| replay.total_events.unwrap_or(0).max(replay.published))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let x = Scale::new((0.0, widest), (LEFT, WIDTH - RIGHT));
    html! {
        svg.picture.replays viewBox={"0 0 " (WIDTH) " " (height)} role="img" data-replays=(replays.len()) {
            title { "Replays: published against selected" }
            @for (index, replay) in replays.iter().enumerate() {
                @let top = 4.0 + ROW * index as f64;
                @let selected = replay.total_events;
                g.replay data-replay-id=(replay.id) data-published=(replay.published)
                    data-selected=(selected.map_or(String::new(), |n| n.to_string())) data-status=(replay.status.as_str()) {
                    title { (replay.id) ": " (replay.published) " published of " (selected.map_or("not yet counted".into(), |n| n.to_string())) " selected (" (replay.status.as_str()) ")" }
                    text.replay-name x="4" y=(top + 15.0) { (fitted(&replay.id.to_string(), LEFT - 8.0).unwrap_or_default()) }
                    @if let Some(selected) = selected {
                        rect.selected x=(LEFT) y=(top) width=(format!("{:.2}", x.at(selected as f64) - LEFT)) height=(ROW - 8.0) {}
                    }
                    rect.published x=(LEFT) y=(top) width=(format!("{:.2}", x.at(replay.published as f64) - LEFT)) height=(ROW - 8.0) {}
                    text.replay-count x=(WIDTH - RIGHT + 6.0) y=(top + 15.0) {
                        (replay.published) " / " (selected.map_or("?".into(), |n| n.to_string()))
                    }
                }
            }
        }
    }
}
