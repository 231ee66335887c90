//! The operator's page: the relay's slot and parked messages, the worker's runs and
//! replays, the newest signed digest; and the request to republish a parked message.

use std::collections::HashMap;

use axum::Form;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect};
use chrono::{DateTime, Utc};
use maud::html;
use uuid::Uuid;

use crate::api::{ApiError, AppState};
use crate::console::guard::checked_operation;
use crate::console::html::{Page, api_error, bad_request, error_page, time};
use crate::console::layout::layout;
use crate::console::session::Session;
use crate::reassign;

pub(in crate::console) async fn operations(
    State(state): State<AppState>,
    session: Session,
) -> Page {
    let client = state.ledger.pool().get().await.map_err(api_error)?;
    let slot = client
        .query_opt(
            include_str!("../../sql/console/relay_slot.sql"),
            &[&state.relay_slot],
        )
        .await
        .map_err(api_error)?;
    let parked = client
        .query(include_str!("../../sql/console/parked.sql"), &[])
        .await
        .map_err(api_error)?;
    let running = reassign::in_progress(&client).await.map_err(api_error)?;
    let stalled = reassign::stalled(&client, reassign::STALL_AFTER)
        .await
        .map_err(api_error)?;
    let replays = client
        .query(include_str!("../../sql/console/replays.sql"), &[])
        .await
        .map_err(api_error)?;
    let digest = crate::digest::build::latest(&client)
        .await
        .map_err(|error| api_error(ApiError::internal(&error)))?;
    // The newest digest's signature, checked with the key this service signs with (when
    // digests are on) or else only with the key the digest names.
    let verified = digest.as_ref().map(|document| {
        let signed = crate::digest::SignedDigest::from_document(document);
        let key = state
            .digest_public_key
            .as_deref()
            .or_else(|| document["public_key_pem"].as_str())
            .and_then(crate::digest::public_key_from_pem);
        match (signed, key) {
            (Err(error), _) => format!("unreadable: {error}"),
            (Ok(_), None) => "no public key to check it with".to_owned(),
            (Ok(signed), Some(key)) if signed.verify(&key) => {
                if state.digest_public_key.is_some() {
                    "signature verifies with this service's public key".to_owned()
                } else {
                    "signature verifies with the key the digest names (digests are off here: no key of this service to compare)".to_owned()
                }
            }
            (Ok(_), Some(_)) => "SIGNATURE DOES NOT VERIFY".to_owned(),
        }
    });
    let body = html! {
        section #relay {
            h2 { "Relay" }
            @match &slot {
                None => p.error { "No replication slot " code { (state.relay_slot) } ": the relay has not started yet." }
                Some(slot) => {
                    @let active: bool = slot.get(0);
                    @let lag_bytes: Option<i64> = slot.get(1);
                    @let published_before: Option<DateTime<Utc>> = slot.get(2);
                    dl.facts {
                        dt { "Slot" } dd { code { (state.relay_slot) } }
                        dt { "Streaming" } dd #streaming { (if active { "yes" } else { "no (no relay connected)" }) }
                        dt { "Lag" } dd #lag-bytes { (lag_bytes.map_or("unknown".into(), |b| format!("{b} bytes"))) }
                        dt { "Lag in time" } dd #lag-seconds {
                            @match (lag_bytes, published_before) {
                                (Some(0), _) => "0 s (nothing to publish)",
                                (_, Some(at)) => { "at most " (format!("{:.0}", (Utc::now() - at).as_seconds_f64())) " s (everything committed before " (time(at)) " is published)" }
                                _ => "unknown (no retention mark confirmed yet)",
                            }
                        }
                    }
                }
            }
            h3 { "Parked messages" }
            @if parked.is_empty() { p #parked-none { "None." } } @else {
                table.list #parked {
                    thead { tr { th { "#" } th { "Event" } th { "Type" } th { "Topic" } th { "Error" } th { "Parked" } th { "Republish" } } }
                    tbody {
                        @for row in &parked {
                            tr {
                                td { (row.get::<_, i64>(0)) }
                                td { code { (row.get::<_, Uuid>(1)) } }
                                td { (row.get::<_, String>(2)) }
                                td { (row.get::<_, String>(3)) }
                                td { (row.get::<_, String>(4)) }
                                td { (time(row.get(5))) }
                                td {
                                    @if let Some(at) = row.get::<_, Option<DateTime<Utc>>>(6) {
                                        "requested " (time(at)) " by " (row.get::<_, Option<String>>(7).unwrap_or_default()) "; the relay publishes it within seconds"
                                    } @else {
                                        @if let Some(error) = row.get::<_, Option<String>>(8) { span.error { "Last attempt refused: " (error) } " " }
                                        @if session.operator() {
                                            form.inline method="post" action={"/operations/parked/" (row.get::<_, i64>(0)) "/republish"} {
                                                input type="hidden" name="csrf" value=(session.csrf(&state));
                                                button type="submit" { "Republish" }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                p.hint { "Fix the cause first (e.g. the broker's message.max.bytes). The relay publishes a requested message again with its original key and headers; " code { "ledger relay parked republish --id N" } " does the same from a shell." }
            }
        }
        section #worker {
            h2 { "Worker" }
            dl.facts {
                dt { "Runs in progress" } dd #runs-active { (running.len()) }
                dt { "Stalled (no progress for " (reassign::STALL_AFTER.as_secs()) " s)" } dd #runs-stalled { (stalled.len()) }
            }
            @if !running.is_empty() {
                ul { @for run in &running { li { a href={"/runs/" (run)} { (run) } @if stalled.contains(run) { " (stalled)" } } } }
            }
            h3 { "Replays" }
            @if replays.is_empty() { p { "None." } } @else {
                table.list {
                    thead { tr { th { "Replay" } th { "Status" } th { "Published" } th { "Of" } th { "Requested" } } }
                    tbody {
                        @for row in &replays {
                            tr {
                                td { code { (row.get::<_, Uuid>(0)) } }
                                td { (row.get::<_, String>(1)) }
                                td { (row.get::<_, i64>(2)) }
                                td { (row.get::<_, Option<i64>>(3).map_or("—".into(), |n| n.to_string())) }
                                td { (time(row.get(4))) }
                            }
                        }
                    }
                }
            }
        }
        section #digests {
            h2 { "Signed digests" }
            @match &digest {
                None => p { "No digest yet" @if state.digest_public_key.is_none() { " (digests are off on this service)" } "." }
                Some(document) => {
                    dl.facts {
                        dt { "Latest" } dd #digest-seq { (document["seq"]) }
                        dt { "Events" } dd { (document["event_count"]) }
                        dt { "Time" } dd { (document["time"].as_str().unwrap_or_default()) }
                        dt { "Root" } dd { code { (document["root"].as_str().unwrap_or_default()) } }
                        dt { "Check" } dd #digest-verified { (verified.as_deref().unwrap_or_default()) }
                    }
                    p.hint { "The whole ledger against it: " code { "ledger verify" } "; one answer: " code { "ledger proof verify" } " (offline, from the public key)." }
                }
            }
        }
    };
    Ok(layout("Operations", Some(&session), &state, body))
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
    let updated = client
        .execute(
            "UPDATE outbox_parked SET republish_requested_at = now(), republish_requested_by = $2 \
             WHERE id = $1 AND republished_at IS NULL",
            &[&id, &session.name],
        )
        .await
        .map_err(api_error)?;
    if updated == 0 {
        return Err(error_page(
            StatusCode::NOT_FOUND,
            "No such parked message",
            &format!("No parked message #{id} waits to be published."),
        ));
    }
    Ok(Redirect::to("/operations").into_response())
}
