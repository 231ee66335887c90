//! `ledger import`: assignments from a CSV file, in batches, with a progress bar; a re-run
//! skips what is already assigned.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ra_ledger::commands::{Ledger, MAX_BATCH};
use ra_ledger::db;
use ra_ledger::import::{self, ImportOptions, ImportProgress};
use ra_ledger::store::Metadata;
use uuid::Uuid;

#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The CSV file: a header naming business_id, jurisdiction and optionally effective_at
    /// (RFC 3339), then one assignment per line. Checked whole before anything is written.
    pub file: PathBuf,
    /// Rows per transaction (1 to 1000). Each batch is all or nothing.
    #[arg(long, default_value_t = MAX_BATCH, value_parser = batch_size)]
    pub batch_size: usize,
    /// Batches in flight at once (1 to 16).
    #[arg(long, default_value_t = 2, value_parser = concurrency)]
    pub concurrency: usize,
    /// Who imports, recorded as every event's actor.
    #[arg(long, default_value = "import")]
    pub actor: String,
}

pub async fn run(database_url: &str, args: ImportArgs) -> anyhow::Result<()> {
    let actor = args.actor.trim();
    if actor.is_empty() || actor.len() > 200 || actor.chars().any(char::is_control) {
        anyhow::bail!(
            "--actor must be 1 to 200 characters without control characters, not {:?}",
            args.actor
        );
    }
    let rows = import::read(&args.file)?;
    if rows.is_empty() {
        outln!("{}: no assignments to import", args.file.display());
        return Ok(());
    }
    let pool = db::pool(database_url, "ledger-import", args.concurrency)?;
    let ledger = Ledger::new(pool);
    let options = ImportOptions {
        batch_size: args.batch_size,
        concurrency: args.concurrency,
        metadata: Metadata {
            actor: actor.to_owned(),
            correlation_id: Uuid::now_v7(),
            causation_id: None,
            traceparent: None,
        },
    };
    let terminal = std::io::stderr().is_terminal();
    let mut last_print = Instant::now() - Duration::from_secs(10);
    let outcome = import::run(&ledger, &rows, &options, |progress| {
        let line = progress_line(progress);
        if terminal {
            eprint!("\r\x1b[2K{line}");
            let _ = std::io::stderr().flush();
        } else if last_print.elapsed() >= Duration::from_secs(5) || progress.done == progress.total
        {
            eprintln!("{line}");
            last_print = Instant::now();
        }
    })
    .await;
    if terminal {
        eprintln!();
    }
    let progress = outcome?;
    outln!(
        "imported {}: {} assignments started, {} already assigned (skipped), correlation id {}",
        args.file.display(),
        progress.started,
        progress.skipped,
        options.metadata.correlation_id
    );
    Ok(())
}

fn batch_size(text: &str) -> Result<usize, String> {
    within(text, 1..=MAX_BATCH)
}

fn concurrency(text: &str) -> Result<usize, String> {
    within(text, 1..=16)
}

fn within(text: &str, range: std::ops::RangeInclusive<usize>) -> Result<usize, String> {
    text.parse()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| {
            format!(
                "{text:?} is not a whole number from {} to {}",
                range.start(),
                range.end()
            )
        })
}

/// One line of progress: a bar, counts, rate and estimate.
fn progress_line(progress: &ImportProgress) -> String {
    const WIDTH: usize = 30;
    let fraction = if progress.total == 0 {
        1.0
    } else {
        progress.done as f64 / progress.total as f64
    };
    let filled = (fraction * WIDTH as f64).round() as usize;
    let eta = if progress.rate > 0.0 && progress.done < progress.total {
        format!(
            ", ETA {:.0} s",
            (progress.total - progress.done) as f64 / progress.rate
        )
    } else {
        String::new()
    };
    format!(
        "[{}{}] {:>3.0}% {} of {} rows ({} started, {} skipped) · {:.0} rows/s{eta}",
        "#".repeat(filled),
        ".".repeat(WIDTH.saturating_sub(filled)),
        fraction * 100.0,
        progress.done,
        progress.total,
        progress.started,
        progress.skipped,
        progress.rate,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_line_counts_started_and_skipped() {
        let line = progress_line(&ImportProgress {
            total: 100,
            done: 50,
            started: 40,
            skipped: 10,
            rate: 25.0,
        });
        assert_eq!(
            line,
            format!(
                "[{}{}]  50% 50 of 100 rows (40 started, 10 skipped) · 25 rows/s, ETA 2 s",
                "#".repeat(15),
                ".".repeat(15)
            )
        );
    }
}
