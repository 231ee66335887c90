//! A runbook section of the operators' guide, served by the console: the verdict and the
//! alerts name sections of `docs/operators.md` (`docs/operators.md#rarelaydown`), and the
//! on-call engineer who follows the link should land on the text, not on a 404. The guide
//! is built into the binary, so the section shown is the one of this version.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use maud::html;

use crate::api::AppState;
use crate::console::html::{Page, error_page};
use crate::console::layout::layout;
use crate::console::session::Session;

/// The operators' guide this binary was built with.
const GUIDE: &str = include_str!("../../../../docs/operators.md");

/// The console's link to the runbook section `runbook` (`docs/operators.md#anchor`).
pub(in crate::console) fn href(runbook: &str) -> String {
    let anchor = runbook
        .rsplit_once('#')
        .map_or(runbook, |(_, anchor)| anchor);
    format!("/runbooks/{anchor}")
}

pub(in crate::console) async fn runbook(
    State(state): State<AppState>,
    session: Session,
    Path(anchor): Path<String>,
) -> Page {
    let Some((title, text)) = section(GUIDE, &anchor) else {
        return Err(error_page(
            StatusCode::NOT_FOUND,
            "No such runbook",
            &format!("docs/operators.md has no section #{anchor}."),
        ));
    };
    let body = html! {
        section #runbook data-anchor=(anchor) {
            h2 { (title) }
            pre.runbook { (text) }
            p.hint { "From " code { "docs/operators.md#" (anchor) } ", as built into this binary. Back to " a href="/operations" { "operations" } "." }
        }
    };
    Ok(layout(title, Some(&session), &state, body))
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces as
/// `-`. Pure.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The section of `guide` whose heading's anchor is `anchor`: its title and its text up to
/// the next heading of its level or above. Pure.
fn section<'a>(guide: &'a str, anchor: &str) -> Option<(&'a str, &'a str)> {
    let mut start = None;
    let mut offset = 0;
    for line in guide.split_inclusive('\n') {
        let hashes = line.bytes().take_while(|b| *b == b'#').count();
        let heading = (1..=6).contains(&hashes) && line[hashes..].starts_with(' ');
        if heading {
            if let Some((level, title, from)) = start {
                if hashes <= level {
                    return Some((title, guide[from..offset].trim()));
                }
            } else if slug(line[hashes..].trim_end()) == anchor {
                start = Some((hashes, line[hashes..].trim(), offset + line.len()));
            }
        }
        offset += line.len();
    }
    start.map(|(_, title, from)| (title, guide[from..].trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runbook_is_its_section_up_to_the_next_heading_of_its_level() {
        let guide = "# Guide\n## Alerts\n### RaRelayDown\nCheck the unit.\n#### Detail\nmore\n### RaSlotMissing\nRecover.\n## What to do when …\nthis\n";
        assert_eq!(
            section(guide, "rarelaydown"),
            Some(("RaRelayDown", "Check the unit.\n#### Detail\nmore"))
        );
        assert_eq!(
            section(guide, "raslotmissing"),
            Some(("RaSlotMissing", "Recover."))
        );
        assert_eq!(
            section(guide, "what-to-do-when-"),
            Some(("What to do when …", "this"))
        );
        assert_eq!(section(guide, "nothing"), None);
        assert_eq!(
            href("docs/operators.md#rarelaydown"),
            "/runbooks/rarelaydown"
        );
    }

    /// Every runbook the verdict names is a section of the guide built in.
    #[test]
    fn every_runbook_the_verdict_names_exists() {
        for runbook in [
            "docs/operators.md#raslotwallost",
            "docs/operators.md#raslotmissing",
            "docs/operators.md#rarelaydown",
            "docs/operators.md#raslotwalunreserved",
            "docs/operators.md#raoutboxcommitunpublished",
            "docs/operators.md#rarelayunconfirmedcommittooold",
            "docs/operators.md#raslotwalheadroomlow",
            "docs/operators.md#raparkedmessageswaiting",
            "docs/operators.md#replays",
            "docs/operators.md#what-to-do-when-",
        ] {
            let anchor = runbook.rsplit_once('#').expect("an anchor").1;
            assert!(section(GUIDE, anchor).is_some(), "{runbook}");
        }
    }
}
