//! A reassignment run: its progress (polled by the script), and the form that resumes it.

use std::collections::HashMap;

use axum::Form;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use maud::{Markup, html};

use crate::api::AppState;
use crate::console::guard::checked_write;
use crate::console::html::{Page, api_error, error_page, uuid};
use crate::console::layout::layout;
use crate::console::pictures::chart::{self, Bar, Series};
use crate::console::session::Session;
use crate::console::units::Unit;
use crate::reassign::{self, PageRecord, RunStatus};

/// Most pages the run page draws: the newest.
const PAGES_DRAWN: i64 = 500;

fn percent(run: &RunStatus) -> f64 {
    if run.completed_at.is_some() {
        return 100.0;
    }
    let done = run.replaced + run.skipped + run.failed;
    if run.total_at_start <= 0 {
        0.0
    } else {
        (done as f64 * 100.0 / run.total_at_start as f64).min(100.0)
    }
}

async fn run_status(state: &AppState, id: &str) -> Result<RunStatus, Response> {
    let run_id = uuid("run id", id)?;
    let client = state.ledger.pool().get().await.map_err(api_error)?;
    reassign::status(&client, run_id)
        .await
        .map_err(api_error)?
        .ok_or_else(|| {
            error_page(
                StatusCode::NOT_FOUND,
                "No such run",
                &format!("The ledger has no reassignment run {run_id}."),
            )
        })
}

pub(in crate::console) async fn run(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
) -> Page {
    let run = run_status(&state, &id).await?;
    let percent = percent(&run);
    let client = state.ledger.pool().get().await.map_err(api_error)?;
    let pages = reassign::pages(&client, run.run_id, PAGES_DRAWN)
        .await
        .map_err(api_error)?;
    let body = html! {
        section.run #run data-progress={"/runs/" (run.run_id) "/progress"} {
            progress #bar max="100" value=(format!("{percent:.1}")) { (format!("{percent:.1}")) "%" }
            p.percent { span #percent { (format!("{percent:.1}")) } "% — " span #state { (run.status.as_str()) } }
            dl.facts {
                dt { "Run" } dd { code { (run.run_id) } }
                dt { "From contact" } dd { a href={"/contacts/" (run.old_contact_id)} { (run.old_contact_id) } }
                dt { "To contact" } dd { a href={"/contacts/" (run.new_contact_id)} { (run.new_contact_id) } }
                dt { "Cursor" } dd #cursor { (run.cursor.map_or("(start)".into(), |c| c.to_string())) }
                dt { "Pages" } dd #pages { (run.pages) }
                dt { "Replaced" } dd #replaced { (run.replaced) }
                dt { "Skipped" } dd #skipped { (run.skipped) }
                dt { "Failed" } dd #failed { (run.failed) }
                dt { "Of" } dd #total { (run.total_at_start) }
                dt { "Rate" } dd #rate { (format!("{:.0}", run.rows_per_second)) " rows/s" }
                dt { "ETA" } dd #eta { (run.eta_seconds.map_or("—".into(), |s| format!("{s:.0} s"))) }
                dt { "Stalled" } dd #stalled { (if run.stalled { "yes" } else { "no" }) }
            }
            (page_pictures(&run, &pages))
            @if let Some(error) = &run.last_error { p.error #last-error { "Last page error: " (error) } }
            @if !run.failures.is_empty() {
                h2 { "Failed rows" }
                table.list #failures {
                    thead { tr { th { "Assignment" } th { "Business" } th { "Attempts" } th { "Reason" } } }
                    tbody {
                        @for failure in &run.failures {
                            tr {
                                td { code { (failure.assignment_id) } }
                                td { a href={"/businesses/" (failure.business_id)} { (failure.business_id) } }
                                td { (failure.attempts) }
                                td { (failure.reason) }
                            }
                        }
                    }
                }
            }
            noscript { p { a href={"/runs/" (run.run_id)} { "Reload" } " to see the progress." } }
            @if session.writer() && run.completed_at.is_none() {
                form.card #resume method="post" action={"/runs/" (run.run_id) "/resume"} {
                    input type="hidden" name="csrf" value=(session.csrf(&state));
                    button type="submit" { "Resume (re-raise the page it waits for)" }
                }
            }
        }
    };
    Ok(layout("Reassignment run", Some(&session), &state, body))
}

/// Rows per second page by page, and pages done over time, as of the page's load.
fn page_pictures(run: &RunStatus, pages: &[PageRecord]) -> Markup {
    let bars: Vec<Bar> = pages
        .iter()
        .map(|page| Bar {
            label: page.page.to_string(),
            value: page.rows_per_second(),
            title: format!(
                "page {} (pass {}): {} rows in {:.3} s",
                page.page,
                page.pass,
                page.rows,
                (page.finished_at - page.started_at).as_seconds_f64()
            ),
        })
        .collect();
    let end = run.completed_at.unwrap_or_else(Utc::now);
    let done: Vec<_> = pages
        .iter()
        .enumerate()
        .map(|(index, page)| (page.finished_at, Some((index + 1) as f64)))
        .collect();
    let per_page = Series {
        title: "Rows per second, page by page",
        class: "run-rate",
        unit: Unit::PerSecond,
    };
    let over_time = Series {
        title: "Pages done over time",
        class: "run-pages",
        unit: Unit::Count,
    };
    html! {
        figure.picture #run-pictures {
            (chart::bars(&per_page, &bars))
            (chart::line_over_time(&over_time, run.started_at, end, &done))
            figcaption { "As of this page's load" @if pages.len() as i64 == PAGES_DRAWN { " (the newest " (PAGES_DRAWN) " pages)" } "." }
        }
    }
}

/// The run page's feed: the same status the API gives, read with the session.
pub(in crate::console) async fn run_progress(
    State(state): State<AppState>,
    _session: Session,
    Path(id): Path<String>,
) -> Page {
    let run = run_status(&state, &id).await?;
    let mut value = serde_json::to_value(&run).unwrap_or_default();
    value["percent"] = serde_json::json!(percent(&run));
    Ok(([(header::CACHE_CONTROL, "no-store")], axum::Json(value)).into_response())
}

pub(in crate::console) async fn resume(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Page {
    checked_write(&state, &session, &headers, &form)?;
    let run_id = uuid("run id", &id)?;
    reassign::resume(state.ledger.pool(), run_id)
        .await
        .map_err(api_error)?;
    Ok(Redirect::to(&format!("/runs/{run_id}")).into_response())
}
