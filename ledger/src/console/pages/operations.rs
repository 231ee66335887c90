//! The operator's page: the relay's slot and parked messages, the worker's runs and
//! replays, the newest signed digest, the witnesses' quorum and each witness's last answer;
//! and the request to republish a parked message.

use std::collections::HashMap;

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect};
use chrono::Utc;
use maud::{Markup, html};
use ra_ledger_cdc::parking::{self, WaitingMessage};
use uuid::Uuid;

use crate::api::{ApiError, AppState};
use crate::console::guard::checked_operation;
use crate::console::html::{Page, api_error, bad_request, error_page, time};
use crate::console::layout::layout;
use crate::console::pictures::chart::{Series, line_over_time};
use crate::console::pictures::progress;
use crate::console::session::Session;
use crate::console::units::{self, Unit};
use crate::digest::DigestDocument;
use crate::digest::cosign::Outcome;
use crate::hex::hex;
use crate::lag::exact::Lag;
use crate::lag::history::{self, Point, Window};
use crate::lag::{SlotProgress, Waiting};
use crate::reassign;
use crate::replay::{self, ReplaySummary};
use crate::verdict::{
    self,
    rules::{self, Verdict, WitnessFacts},
};

/// Most parked messages the page lists.
const PARKED_LISTED: i64 = 100;
/// Most replays the page lists, newest first.
const REPLAYS_LISTED: i64 = 20;

pub(in crate::console) async fn operations(
    State(state): State<AppState>,
    session: Session,
    Query(query): Query<HashMap<String, String>>,
) -> Page {
    let window = Window::parse(query.get("lag").map_or("", String::as_str));
    let client = state.ledger.pool().get().await.map_err(api_error)?;
    let facts = verdict::read(
        &client,
        &state.console.relay_slot,
        state.console.witnessing.as_ref(),
    )
    .await
    .map_err(api_error)?;
    let witnesses = facts.witnesses.clone();
    let slot = facts.slot;
    let verdict = rules::verdict(&facts);
    let lag_history = history::read(&client, window).await.map_err(api_error)?;
    let parked = parking::waiting(&client, PARKED_LISTED)
        .await
        .map_err(api_error)?;
    let running = reassign::in_progress(&client).await.map_err(api_error)?;
    let stalled = reassign::stalled(&client, reassign::STALL_AFTER)
        .await
        .map_err(api_error)?;
    let replays = replay::recent(&client, REPLAYS_LISTED)
        .await
        .map_err(api_error)?;
    let digest = crate::digest::sealed::latest(&client)
        .await
        .map_err(|error| api_error(ApiError::internal(&error)))?;
    let watched = crate::watcher::findings(&client).await.map_err(api_error)?;
    let csrf = session.operator().then(|| session.csrf(&state));
    let body = html! {
        (verdict_banner(&verdict))
        section #watcher {
            h2 { "Watcher" }
            (watcher(&watched))
        }
        section #relay {
            h2 { "Relay" }
            (relay_slot(&state.console.relay_slot, slot.as_ref()))
            (lag_pictures(window, &lag_history))
            h3 { "Parked messages" }
            (parked_messages(&parked, csrf.as_deref()))
        }
        section #worker {
            h2 { "Worker" }
            (worker_runs(&running, &stalled))
            h3 { "Replays" }
            (replay_list(&replays))
        }
        section #digests {
            h2 { "Signed digests" }
            (newest_digest(&state, digest.as_ref()))
        }
        section #witnesses {
            h2 { "Witnesses" }
            (witness_list(witnesses.as_ref()))
        }
    };
    Ok(layout("Operations", Some(&session), &state, body))
}

/// The verdict at the top: the state, the reason that decides it with its runbook, and
/// the other findings.
fn verdict_banner(verdict: &Verdict) -> Markup {
    html! {
        section.verdict.(verdict.state.as_str()) #verdict data-state=(verdict.state.as_str()) {
            h2 { "Status: " span #verdict-state { (verdict.state.as_str()) } }
            p #verdict-reason { (verdict.reason) }
            @if let Some(runbook) = verdict.runbook {
                p.hint { "Runbook: " a #verdict-runbook href=(runbook_href(runbook)) { code { (runbook) } } }
            }
            @if !verdict.also.is_empty() {
                ul #verdict-also {
                    @for finding in &verdict.also {
                        li data-state=(finding.state.as_str()) {
                            strong { (finding.state.as_str()) } ": " (finding.reason) " ("
                            a href=(runbook_href(finding.runbook)) { code { (finding.runbook) } } ")"
                        }
                    }
                }
            }
            p.hint { "The same verdict, as JSON: " a href=(verdict::PATH) { code { (verdict::PATH) } } "." }
        }
    }
}

/// A runbook section (`docs/operators.md#…`) as the console's link to it.
fn runbook_href(runbook: &str) -> String {
    super::runbook::href(runbook)
}

/// The end-to-end watcher: the events it found missing from Kafka, how far it proved the
/// rest, and when it last looked.
fn watcher(findings: &crate::watcher::Findings) -> Markup {
    html! {
        @match findings.watermark {
            None => p.hint { "The end-to-end watcher has not run: set " code { "watcher_relay_config" } " in the service's settings to turn it on." }
            Some(watermark) => dl.facts {
                dt { "Committed events missing from Kafka" }
                dd #watcher-missing data-missing=(findings.missing) {
                    @if findings.missing > 0 {
                        span.error { (findings.missing) " (" a href=(runbook_href("docs/operators.md#raeventsmissing")) { "runbook" } ")" }
                    } @else { "none" }
                }
                dt { "Proved on Kafka through position" } dd #watcher-watermark { (watermark) }
                dt { "Last round" }
                dd #watcher-round {
                    (findings.round_at.and_then(|at| chrono::DateTime::from_timestamp(at as i64, 0)).map_or_else(|| "never".into(), time))
                }
                dt { "Rescans (Kafka lost records it had counted)" }
                dd #watcher-rescans { (findings.rescans) @if let Some(why) = &findings.last_rescan { " — the last: " (why) } }
            }
        }
    }
}

/// The relay's slot: whether a relay streams from it, and how far behind it is.
fn relay_slot(name: &str, slot: Option<&SlotProgress>) -> Markup {
    html! {
        @match slot {
            None => p.error { "No replication slot " code { (name) } ": the relay has not started yet." }
            Some(slot) => {
                @let lag = slot.lag();
                dl.facts {
                    dt { "Slot" } dd { code { (name) } }
                    dt { "Streaming" } dd #streaming { (if slot.streaming { "yes" } else { "no (no relay connected)" }) }
                    dt { "Oldest unpublished commit" }
                    dd #lag-seconds data-seconds=(format!("{:.3}", lag.seconds(Utc::now()))) data-bound=(lag.is_bound()) {
                        (waiting(lag))
                    }
                    dt { "WAL not confirmed" }
                    dd #lag-bytes data-bytes=(slot.lag_bytes.map_or(String::new(), |b| b.to_string()))
                        title="WAL written since the slot's confirmed position, by every table and the heartbeats: not events waiting (the line above says whether any wait)" {
                        (slot.lag_bytes.map_or("unknown".into(), |b| units::bytes(b as f64)))
                    }
                    dt { "WAL kept" }
                    dd #retained-bytes data-bytes=(slot.retained_bytes.map_or(String::new(), |b| b.to_string()))
                        title="WAL the slot keeps the server from recycling: what fills the disk while the relay is down" {
                        (slot.retained_bytes.map_or("unknown".into(), |b| units::bytes(b as f64)))
                    }
                }
            }
        }
    }
}

/// The lag over `window`: the slot's lag in bytes, the oldest unpublished commit's wait, and
/// events appended per second, one picture each on one time axis.
fn lag_pictures(window: Window, points: &[Point]) -> Markup {
    let end = Utc::now();
    let start = end - chrono::Duration::from_std(window.length()).unwrap_or_default();
    let series = |value: fn(&Point) -> Option<f64>| -> Vec<_> {
        points
            .iter()
            .map(|point| (point.at, value(point)))
            .collect()
    };
    let bytes = Series {
        title: "Slot lag (WAL bytes not confirmed)",
        class: "lag-bytes",
        unit: Unit::Bytes,
    };
    let waited = Series {
        title: "Oldest unpublished commit's wait (seconds)",
        class: "lag-waited",
        unit: Unit::Seconds,
    };
    let rate = Series {
        title: "Events appended per second",
        class: "lag-rate",
        unit: Unit::PerSecond,
    };
    html! {
        figure.picture #lag-history data-window=(window.as_str()) {
            nav.windows {
                "Lag over the last "
                @for each in [Window::Hour, Window::Day] {
                    @if each == window { strong { (each.as_str()) } } @else {
                        a href={"/operations?lag=" (each.as_str()) "#lag-history"} { (each.as_str()) }
                    }
                    " "
                }
            }
            (line_over_time(&bytes, start, end, &series(|p| p.lag_bytes.map(|b| b as f64))))
            (line_over_time(&waited, start, end, &series(|p| p.waited_seconds)))
            (line_over_time(&rate, start, end, &series(|p| p.events_per_second)))
            figcaption { "Sampled by ledger serve every retention round, the worst of each " (window.length().as_secs() / u64::from(history::POINTS)) " s; kept a day." }
        }
    }
}

/// How long the oldest commit not yet published has waited, in words, and how that is
/// known: the relay's own figure, or a bound from the database with the reason.
fn waiting(lag: Lag) -> Markup {
    let now = Utc::now();
    html! {
        @match lag {
            Lag::Exact { oldest: None } => "0 s (everything the relay read is acknowledged by Kafka)",
            Lag::Exact { oldest: Some(oldest) } => {
                (units::duration(lag.seconds(now))) " (committed " (time(oldest)) ", not yet acknowledged by Kafka)"
            }
            Lag::Bound { waiting: Waiting::Nothing, why } => {
                "0 s (everything committed is published; from the database, as " (why.describe()) ")"
            }
            Lag::Bound { waiting: Waiting::AtMostSince { since, marked }, why } => {
                "at most " (units::duration(lag.seconds(now))) " (committed after " (time(since)) ")"
                span.bound { " — a bound from the database, not the relay's figure: " (why.describe()) }
                @if !marked { " — no retention mark confirmed yet: is outbox retention on?" }
            }
        }
    }
}

/// The parked messages waiting, each with its request to republish, or the form to ask
/// for it (carrying `csrf`, an operator's session's token; no form without one).
fn parked_messages(parked: &[WaitingMessage], csrf: Option<&str>) -> Markup {
    html! {
        @if parked.is_empty() { p #parked-none { "None." } } @else {
            table.list #parked {
                thead { tr { th { "#" } th { "Event" } th { "Type" } th { "Topic" } th { "Error" } th { "Parked" } th { "Republish" } } }
                tbody {
                    @for message in parked {
                        tr {
                            td { (message.id) }
                            td { code { (message.event_id) } }
                            td { (message.event_type) }
                            td { (message.topic) }
                            td { (message.error) }
                            td { (time(message.parked_at)) }
                            td { (republish_cell(message, csrf)) }
                        }
                    }
                }
            }
            p.hint { "Fix the cause first (e.g. the broker's message.max.bytes). The relay publishes a requested message again with its original key and headers; " code { "ledger relay parked republish --id N" } " does the same from a shell." }
        }
    }
}

/// Who asked to republish `message` and when, or the last refusal and the form.
fn republish_cell(message: &WaitingMessage, csrf: Option<&str>) -> Markup {
    html! {
        @if let Some(at) = message.republish_requested_at {
            "requested " (time(at)) " by " (message.republish_requested_by.as_deref().unwrap_or_default()) "; the relay publishes it within seconds"
        } @else {
            @if let Some(error) = &message.republish_error { span.error { "Last attempt refused: " (error) } " " }
            @if let Some(csrf) = csrf {
                form.inline method="post" action={"/operations/parked/" (message.id) "/republish"} {
                    input type="hidden" name="csrf" value=(csrf);
                    button type="submit" { "Republish" }
                }
            }
        }
    }
}

/// The reassignment runs in progress, the stalled ones marked.
fn worker_runs(running: &[Uuid], stalled: &[Uuid]) -> Markup {
    html! {
        dl.facts {
            dt { "Runs in progress" } dd #runs-active { (running.len()) }
            dt { "Stalled (no progress for " (reassign::STALL_AFTER.as_secs()) " s)" } dd #runs-stalled { (stalled.len()) }
        }
        @if !running.is_empty() {
            ul { @for run in running { li { a href={"/runs/" (run)} { (run) } @if stalled.contains(run) { " (stalled)" } } } }
        }
    }
}

/// The newest replays.
fn replay_list(replays: &[ReplaySummary]) -> Markup {
    html! {
        @if replays.is_empty() { p { "None." } } @else {
            figure.picture #replay-progress {
                (progress::replays(replays))
                figcaption { "Published (dark) against selected (light), per replay." }
            }
            table.list {
                thead { tr { th { "Replay" } th { "Status" } th { "Published" } th { "Of" } th { "Requested" } } }
                tbody {
                    @for replay in replays {
                        tr {
                            td { code { (replay.id) } }
                            td { (replay.status.as_str()) }
                            td { (replay.published) }
                            td { (replay.total_events.map_or("—".into(), |n| n.to_string())) }
                            td { (time(replay.requested_at)) }
                        }
                    }
                }
            }
        }
    }
}

/// The newest signed digest and whether its signature verifies.
fn newest_digest(state: &AppState, digest: Option<&DigestDocument>) -> Markup {
    html! {
        @match digest {
            None => p { "No digest yet" @if state.digest_public_key.is_none() { " (digests are off on this service)" } "." }
            Some(document) => {
                dl.facts {
                    dt { "Latest" } dd #digest-seq { (document.seq) }
                    dt { "Events" } dd { (document.event_count) }
                    dt { "Time" } dd { (document.time.as_deref().unwrap_or_default()) }
                    dt { "Root" } dd { code { (hex(&document.root.0)) } }
                    dt { "Check" } dd #digest-verified { (signature_check(state, document)) }
                }
                p.hint { "The whole ledger against it: " code { "ledger verify" } "; one answer: " code { "ledger proof verify" } " (offline, from the public key)." }
            }
        }
    }
}

/// The witnesses' quorum over the newest checkpoint, and each witness's last answer.
fn witness_list(witnesses: Option<&WitnessFacts>) -> Markup {
    html! {
        @match witnesses {
            None => p { "No witness policy on this service (" code { "witness_policy_file" } "): checkpoints are sealed and cosigned by nobody." }
            Some(facts) => {
                dl.facts {
                    dt { "Quorum" } dd { (facts.quorum) }
                    dt { "Newest checkpoint" }
                    dd #quorum data-met=(facts.newest_met) {
                        @match facts.newest {
                            None => "none yet",
                            Some(seq) => {
                                "digest " (seq) ": "
                                (if facts.newest_met { "quorum met" } else { "SHORT of the quorum" })
                                @if let Some(since) = facts.short_since { " (since " (time(since)) ")" }
                            }
                        }
                    }
                }
                table.list #witness-states {
                    thead { tr { th { "Witness" } th { "Last answer" } th { "Checkpoint" } th { "Size held" } th { "Reason" } th { "When" } } }
                    tbody {
                        @for witness in &facts.witnesses {
                            @let outcome = witness.outcome.map_or("not sent yet", Outcome::as_str);
                            tr data-witness=(witness.name) data-outcome=(outcome) {
                                td { code { (witness.name) } }
                                td { (outcome) }
                                td { (witness.digest_seq.map_or("—".into(), |seq| seq.to_string())) }
                                td { (witness.size) }
                                td { (witness.reason.as_deref().unwrap_or("")) }
                                td { (witness.answered_at.map_or("—".into(), time)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The digest's signature, checked with the key this service signs with (when digests are
/// on) or else only with the key the digest names.
fn signature_check(state: &AppState, document: &DigestDocument) -> String {
    let key = state
        .digest_public_key
        .as_deref()
        .or(Some(document.public_key_pem.as_str()))
        .and_then(crate::digest::public_key_from_pem);
    match key {
        None => "no public key to check it with".to_owned(),
        Some(key) if document.signed().verify(&key) => {
            if state.digest_public_key.is_some() {
                "signature verifies with this service's public key".to_owned()
            } else {
                "signature verifies with the key the digest names (digests are off here: no key of this service to compare)".to_owned()
            }
        }
        Some(_) => "SIGNATURE DOES NOT VERIFY".to_owned(),
    }
}

/// An operator asks the relay to publish a parked message again (the relay holds the
/// producer).
pub(in crate::console) async fn request_republish(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    checked_operation(&state, &session, &headers, &form)?;
    let id: i64 = id
        .parse()
        .map_err(|_| bad_request(format!("parked message id {id:?} is not a number")))?;
    let client = state.ledger.pool().get().await.map_err(api_error)?;
    let requested = parking::request_republish(&client, id, &session.name)
        .await
        .map_err(api_error)?;
    if !requested {
        return Err(error_page(
            StatusCode::NOT_FOUND,
            "No such parked message",
            &format!("No parked message #{id} waits to be published."),
        ));
    }
    Ok(Redirect::to("/operations").into_response())
}
