//! A reassignment run's progress, drawn on the terminal until the run completes: `ledger
//! runs watch` and `ledger-bench demo` draw it alike.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use uuid::Uuid;

use crate::reassign::{self, RunState, RunStatus};
use crate::{out, outln};

/// Polls a run and draws its progress until it completes; returns the final status.
pub async fn watch(pool: &Pool, run_id: Uuid) -> anyhow::Result<RunStatus> {
    let client = pool.get().await?;
    let terminal = std::io::stdout().is_terminal();
    let mut last_line = String::new();
    let mut last_print = Instant::now() - Duration::from_secs(10);
    loop {
        let status = reassign::status(&client, run_id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("no reassignment run {run_id}"))?;
        let line = progress_line(&status);
        let done = status.status == RunState::Completed;
        if terminal {
            out!("\r\x1b[2K{line}");
            std::io::stdout().flush()?;
        } else if line != last_line && (done || last_print.elapsed() >= Duration::from_secs(1)) {
            outln!("{line}");
            last_print = Instant::now();
        }
        last_line = line;
        if done {
            if terminal {
                outln!();
            }
            return Ok(status);
        }
        if let Some(error) = &status.last_error {
            eprintln!(
                "\npage {} is being retried (attempt {}): {error}",
                status.pages + 1,
                status.page_attempts
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One line of progress: a bar, counts, rate and estimate.
pub fn progress_line(status: &RunStatus) -> String {
    const WIDTH: usize = 30;
    let total = status.total_at_start.max(1) as f64;
    let done = (status.replaced + status.skipped + status.failed) as f64;
    let fraction = if status.status == RunState::Completed {
        1.0
    } else {
        (done / total).min(1.0)
    };
    let filled = (fraction * WIDTH as f64).round() as usize;
    let eta = status
        .eta_seconds
        .map(|eta| format!(", ETA {eta:.0} s"))
        .unwrap_or_default();
    let state = if status.stalled {
        format!(
            "stalled: no page for {:.0} s",
            status.seconds_since_progress
        )
    } else {
        status.status.as_str().to_owned()
    };
    format!(
        "[{}{}] {:>3.0}% page {} · replaced {} skipped {} failed {} of {} · {:.0} rows/s{eta} · {state}",
        "#".repeat(filled),
        ".".repeat(WIDTH - filled),
        fraction * 100.0,
        status.pages,
        status.replaced,
        status.skipped,
        status.failed,
        status.total_at_start,
        status.rows_per_second,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    #[test]
    fn progress_line_shows_counts_and_fills_when_completed() {
        let now = Utc::now();
        let mut status = RunStatus {
            run_id: Uuid::nil(),
            status: RunState::Running,
            old_contact_id: Uuid::nil(),
            new_contact_id: Uuid::nil(),
            jurisdiction: "TX".into(),
            page_size: 100,
            cursor: None,
            pages: 5,
            pass: 1,
            seconds_since_progress: 0.5,
            stalled: false,
            stalls: 0,
            replaced: 490,
            skipped: 5,
            failed: 5,
            total_at_start: 1_000,
            remaining: 500,
            page_attempts: 0,
            last_error: None,
            requested_by: "cs".into(),
            correlation_id: Uuid::nil(),
            started_at: now,
            updated_at: now,
            completed_at: None,
            elapsed_seconds: 1.0,
            rows_per_second: 490.0,
            eta_seconds: Some(1.02),
            longest_page_ms: 12.0,
            failures: Vec::new(),
        };
        let line = progress_line(&status);
        assert!(
            line.starts_with(&format!("[{}{}]", "#".repeat(15), ".".repeat(15))),
            "{line}"
        );
        assert!(line.contains(" 50% page 5"), "{line}");
        assert!(
            line.contains("replaced 490 skipped 5 failed 5 of 1000"),
            "{line}"
        );
        assert!(line.contains("ETA 1 s"), "{line}");
        status.stalled = true;
        status.seconds_since_progress = 75.2;
        assert!(
            progress_line(&status).ends_with("stalled: no page for 75 s"),
            "{}",
            progress_line(&status)
        );
        status.stalled = false;
        status.status = RunState::Completed;
        status.eta_seconds = None;
        assert!(progress_line(&status).starts_with(&format!("[{}]", "#".repeat(30))));
    }
}
