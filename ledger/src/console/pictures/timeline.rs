//! A business's RA timeline: a lane per jurisdiction, each assignment a band from its
//! `started_at` to its end (or on to the right edge while in force) labelled with its
//! contact; the question's "as of" and "as known at" instants as lines across the lanes.
//!
//! A band whose start or end was recorded after it took effect is drawn hatched: the ledger
//! learned it late, so as known before that record the timeline read otherwise (a backdated
//! end, a backdated start), and one still in force is outlined dashed. The legend says
//! both. A band too short for its contact's name has the name beside it.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use maud::{Markup, html};
use uuid::Uuid;

use super::{Scale, WIDTH, fitted, seconds, time_ticks};
use crate::console::html::time;
use crate::queries::{AssignmentView, ContactView, Timeline};

const LANE: f64 = 34.0;
const BAND: f64 = 24.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 22.0;
const AXIS: f64 = 26.0;
const LEGEND: f64 = 26.0;

/// The question the page asked, when it asked one.
#[derive(Debug, Clone, Copy)]
pub(in crate::console) struct Asked {
    /// "Who was the RA on".
    pub at: DateTime<Utc>,
    /// "As known at", when given.
    pub known_at: Option<DateTime<Utc>>,
}

/// Whether the ledger recorded `assignment`'s start or end after it took effect.
pub(in crate::console) fn corrected(assignment: &AssignmentView) -> bool {
    assignment.recorded_at > assignment.started_at
        || matches!(
            (assignment.ended_at, assignment.ended_recorded_at),
            (Some(ended), Some(recorded)) if recorded > ended
        )
}

/// The picture of `timelines` (by jurisdiction code), at `now`.
pub(in crate::console) fn timeline(
    timelines: &BTreeMap<String, Timeline>,
    contacts: &HashMap<Uuid, ContactView>,
    asked: Option<Asked>,
    now: DateTime<Utc>,
) -> Markup {
    let assignments = || timelines.values().flat_map(|line| &line.assignments);
    let mut instants: Vec<DateTime<Utc>> = assignments()
        .flat_map(|a| [Some(a.started_at), a.ended_at])
        .flatten()
        .chain([now])
        .chain(
            asked
                .iter()
                .flat_map(|asked| [Some(asked.at), asked.known_at])
                .flatten(),
        )
        .collect();
    instants.sort();
    let (first, last) = (instants[0], instants[instants.len() - 1]);
    let pad = (last - first) / 30 + chrono::Duration::seconds(1);
    let (start, end) = (first - pad, last + pad);
    let x = Scale::new((seconds(start), seconds(end)), (LEFT, WIDTH - RIGHT));
    let lanes_bottom = TOP + LANE * timelines.len() as f64;
    let height = lanes_bottom + AXIS + LEGEND;
    let px = |at: DateTime<Utc>| x.at(seconds(at));
    let bands = assignments().count();
    html! {
        svg.picture.timeline viewBox={"0 0 " (WIDTH) " " (height)} role="img" data-bands=(bands) {
            title { "RA timeline: " (bands) " assignments in " (timelines.len()) " jurisdictions" }
            defs {
                pattern #corrected-hatch patternUnits="userSpaceOnUse" width="6" height="6" patternTransform="rotate(45)" {
                    rect.hatch-ground width="6" height="6" {}
                    line.hatch x1="0" y1="0" x2="0" y2="6" {}
                }
            }
            @for (lane, (code, line)) in timelines.iter().enumerate() {
                @let top = TOP + LANE * lane as f64;
                g.lane data-lane=(code) {
                    text.lane-name x="4" y=(top + BAND / 2.0 + 5.0) { (code) }
                    line.lane-rule x1=(LEFT) y1=(top + LANE - 5.0) x2=(WIDTH - RIGHT) y2=(top + LANE - 5.0) {}
                    @for assignment in &line.assignments {
                        (band(assignment, contacts, top, &px, end))
                    }
                }
            }
            @for (tick, label) in time_ticks(start, end) {
                line.tick x1=(format!("{:.2}", px(tick))) y1=(lanes_bottom) x2=(format!("{:.2}", px(tick))) y2=(lanes_bottom + 4.0) {}
                text.tick x=(format!("{:.2}", px(tick))) y=(lanes_bottom + 16.0) { (label) }
            }
            @if let Some(asked) = asked {
                (instant_line("asked-at", "as of", asked.at, px(asked.at), lanes_bottom))
                @if let Some(known) = asked.known_at {
                    (instant_line("asked-known", "as known at", known, px(known), lanes_bottom))
                }
            }
            (legend(lanes_bottom + AXIS))
        }
    }
}

/// One assignment's band, in the lane whose top is `top`.
fn band(
    assignment: &AssignmentView,
    contacts: &HashMap<Uuid, ContactView>,
    top: f64,
    px: &impl Fn(DateTime<Utc>) -> f64,
    end: DateTime<Utc>,
) -> Markup {
    let name = contacts
        .get(&assignment.contact_id)
        .map_or_else(|| assignment.contact_id.to_string(), |c| c.name.clone());
    let left = px(assignment.started_at);
    let right = px(assignment.ended_at.unwrap_or(end));
    // An assignment that ended as it started never served: still a sliver, to be seen.
    let width = (right - left).max(2.0);
    let corrected = corrected(assignment);
    let until = assignment.ended_at.map_or("in force".to_owned(), |ended| {
        format!("until {}", time(ended))
    });
    html! {
        g.band.corrected[corrected].open[assignment.ended_at.is_none()]
            data-assignment-id=(assignment.assignment_id) data-contact-id=(assignment.contact_id)
            data-contact-name=(name) data-from=(assignment.started_at.to_rfc3339())
            data-to=(assignment.ended_at.map_or(String::new(), |t| t.to_rfc3339()))
            data-corrected=(corrected) data-left=(format!("{left:.2}")) data-right=(format!("{:.2}", left + width)) {
            title {
                (name) ": from " (time(assignment.started_at)) ", " (until)
                @if corrected { " (recorded after it took effect)" }
            }
            rect x=(format!("{left:.2}")) y=(top) width=(format!("{width:.2}")) height=(BAND) rx="3" {}
            @if let Some(label) = fitted(&name, width) {
                text.band-label x=(format!("{:.2}", left + 5.0)) y=(top + BAND / 2.0 + 5.0) { (label) }
            } @else {
                // Too short for its name inside: the name beside it, on a halo that keeps it
                // readable over a neighbour (and the title above as its tooltip).
                text.band-label.outside x=(format!("{:.2}", left + width + 3.0)) y=(top + BAND / 2.0 + 5.0) { (name) }
            }
        }
    }
}

/// A vertical line at an instant of the question, with its words above the axis.
fn instant_line(class: &str, words: &str, at: DateTime<Utc>, x: f64, bottom: f64) -> Markup {
    html! {
        g.instant.(class) data-instant=(at.to_rfc3339()) data-x=(format!("{x:.2}")) {
            title { (words) " " (time(at)) }
            line x1=(format!("{x:.2}")) y1=(TOP - 4.0) x2=(format!("{x:.2}")) y2=(bottom) {}
            // "As known at" reads to the left of its line, "as of" to the right: the two
            // are often close (both near now).
            @if class == "asked-known" {
                text.before x=(format!("{:.2}", x - 3.0)) y=(TOP - 8.0) { (words) }
            } @else {
                text x=(format!("{:.2}", x + 3.0)) y=(TOP - 8.0) { (words) }
            }
        }
    }
}

/// What the marks mean.
fn legend(top: f64) -> Markup {
    html! {
        g.legend {
            rect.key x=(LEFT) y=(top + 6.0) width="22" height="12" rx="2" {}
            text x=(LEFT + 28.0) y=(top + 16.0) { "assignment (as recorded)" }
            rect.key.corrected x=(LEFT + 210.0) y=(top + 6.0) width="22" height="12" rx="2" {}
            text x=(LEFT + 238.0) y=(top + 16.0) { "corrected later: start or end recorded after it took effect" }
            line.key.asked-at x1=(LEFT + 640.0) y1=(top + 4.0) x2=(LEFT + 640.0) y2=(top + 20.0) {}
            text x=(LEFT + 646.0) y=(top + 16.0) { "as of" }
            line.key.asked-known x1=(LEFT + 710.0) y1=(top + 4.0) x2=(LEFT + 710.0) y2=(top + 20.0) {}
            text x=(LEFT + 716.0) y=(top + 16.0) { "as known at" }
            rect.key.open x=(LEFT + 800.0) y=(top + 6.0) width="22" height="12" rx="2" {}
            text x=(LEFT + 828.0) y=(top + 16.0) { "in force" }
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone};

    use super::*;
    use crate::domain::EndReason;

    fn assignment(
        started: DateTime<Utc>,
        ended: Option<(DateTime<Utc>, DateTime<Utc>)>,
    ) -> AssignmentView {
        AssignmentView {
            assignment_id: Uuid::now_v7(),
            business_id: Uuid::nil(),
            jurisdiction: crate::domain::Jurisdiction::parse("jurisdiction", "TX").unwrap(),
            contact_id: Uuid::now_v7(),
            started_at: started,
            ended_at: ended.map(|(at, _)| at),
            end_reason: ended.map(|_| EndReason::Cancelled),
            replaces: None,
            replaced_by: None,
            recorded_at: started,
            ended_recorded_at: ended.map(|(_, recorded)| recorded),
        }
    }

    /// A band per assignment, the one whose end was recorded late hatched, and the "as of"
    /// line inside the band in force then.
    #[test]
    fn bands_a_corrected_one_and_the_asked_instant() {
        let t0 = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
        let on_time = assignment(t0, Some((t0 + Duration::days(10), t0 + Duration::days(10))));
        let late = assignment(
            t0 + Duration::days(10),
            Some((t0 + Duration::days(20), t0 + Duration::days(25))),
        );
        let open = assignment(t0 + Duration::days(20), None);
        assert!(!corrected(&on_time) && corrected(&late) && !corrected(&open));
        let timelines = BTreeMap::from([(
            "TX".to_owned(),
            Timeline {
                assignments: vec![on_time, late.clone(), open],
                events: Vec::new(),
            },
        )]);
        let asked = Asked {
            at: t0 + Duration::days(15),
            known_at: Some(t0 + Duration::days(22)),
        };
        let svg = timeline(
            &timelines,
            &HashMap::new(),
            Some(asked),
            t0 + Duration::days(30),
        )
        .into_string();
        assert_eq!(svg.matches("<g class=\"band").count(), 3, "{svg}");
        assert_eq!(svg.matches("<g class=\"band corrected").count(), 1, "{svg}");
        let attribute = |after: &str, name: &str| -> f64 {
            let from = svg
                .find(after)
                .unwrap_or_else(|| panic!("{after} in {svg}"));
            let rest = &svg[from..];
            let at = rest.find(&format!("{name}=\"")).expect("the attribute") + name.len() + 2;
            rest[at..at + rest[at..].find('"').unwrap()]
                .parse()
                .unwrap()
        };
        let band = format!("data-assignment-id=\"{}\"", late.assignment_id);
        let line = attribute("class=\"instant asked-at\"", "data-x");
        assert!(
            attribute(&band, "data-left") < line && line < attribute(&band, "data-right"),
            "{svg}"
        );
        assert!(svg.contains("class=\"instant asked-known\""), "{svg}");
        assert!(!svg.contains(" style="), "no inline style under the CSP");
        // The legend explains every mark: the dashed outline of a band still in force too.
        assert!(svg.contains("<rect class=\"key open\""), "{svg}");
        assert!(svg.contains(">in force</text>"), "{svg}");
    }

    /// An assignment of an hour among months is a sliver: its contact's name stands beside
    /// it (the band's title is its tooltip), where it had none.
    #[test]
    fn a_sliver_has_its_name_beside_it() {
        let t0 = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
        let short = assignment(t0, Some((t0 + Duration::hours(1), t0 + Duration::hours(1))));
        let contact_id = short.contact_id;
        let timelines = BTreeMap::from([(
            "TX".to_owned(),
            Timeline {
                assignments: vec![short],
                events: Vec::new(),
            },
        )]);
        let contacts = HashMap::from([(
            contact_id,
            ContactView {
                contact_id,
                jurisdiction: crate::domain::Jurisdiction::parse("jurisdiction", "TX").unwrap(),
                name: "Lone Star Agents".into(),
                address: crate::domain::PostalAddress {
                    line1: "1 Congress Ave".into(),
                    line2: String::new(),
                    city: "Austin".into(),
                    region: "TX".into(),
                    postal_code: "78701".into(),
                },
                status: crate::domain::ContactStatus::Primary,
                supersedes: None,
                superseded_by: None,
                created_at: t0,
                recorded_at: t0,
                superseded_at: None,
                superseded_recorded_at: None,
                version: 1,
            },
        )]);
        let svg = timeline(&timelines, &contacts, None, t0 + Duration::days(90)).into_string();
        assert!(
            svg.contains("class=\"band-label outside\"")
                && svg.contains(">Lone Star Agents</text>"),
            "{svg}"
        );
    }
}
