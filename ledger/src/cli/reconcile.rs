//! `ledger reconcile`: whether the live topics equal the ledger (see
//! [`ra_ledger::reconcile`]). Once by default, exiting 1 on a loss or a phantom; with
//! `--every`, continuously, with the findings on `/metrics`.

use std::sync::Arc;
use std::time::Duration;

use ra_ledger::db;
use ra_ledger::metrics::ReconcileMetrics;
use ra_ledger::reconcile::{self, Options, Report};
use ra_ledger_cdc::config::RelayConfig;
use ra_ledger_cdc::infra::settings::env;

/// Arguments of `ledger reconcile`.
#[derive(Debug, clap::Args)]
pub struct ReconcileArgs {
    /// The relay's TOML file: its slot, topics and Kafka settings (the relay's role or one
    /// that may read `events`: give that role's URL with --database-url).
    #[arg(long, env = env::RELAY_CONFIG)]
    config: Option<String>,
    /// Only events recorded at or after this time (RFC 3339), and records from then on:
    /// for topics whose retention removed older records.
    #[arg(long, value_parser = parse_time, conflicts_with = "window")]
    since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only events recorded within this long before the run (each run, with --every), by
    /// the database's clock, and records from then on (e.g. 1h, 30m).
    #[arg(long, value_parser = parse_duration)]
    window: Option<Duration>,
    /// Run again and again, this far apart (e.g. 5m), serving the findings on
    /// --metrics-listen, instead of once.
    #[arg(long, value_parser = parse_duration)]
    every: Option<Duration>,
    /// Where `/metrics` listens with --every.
    #[arg(long, default_value = "127.0.0.1:19102")]
    metrics_listen: std::net::SocketAddr,
    /// How long to wait for the relay to confirm past the ledger's snapshot: after it, what
    /// is missing counts as unseen, not lost (e.g. 60s).
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    settle: Duration,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(database_url: &str, args: ReconcileArgs) -> anyhow::Result<()> {
    let relay = RelayConfig::load(args.config.as_deref())?;
    let pool = db::pool(database_url, "ledger-reconcile", 2)?;
    let Some(every) = args.every else {
        let options = Options {
            since: args.since,
            window: args.window,
            settle: args.settle,
        };
        let report = reconcile::run(&pool, &relay, &options).await?;
        print(&report, args.json)?;
        if !report.clean() {
            anyhow::bail!(
                "{} lost and {} phantom events: the topics and the ledger disagree",
                report.lost,
                report.phantom
            );
        }
        return Ok(());
    };
    let metrics = Arc::new(ReconcileMetrics::default());
    let rendered = Arc::clone(&metrics);
    ra_ledger_cdc::infra::runtime::run_process(
        Some(args.metrics_listen),
        move || rendered.render(),
        |shutdown| async move {
            let mut ticks = ra_ledger_cdc::infra::runtime::Every::new(every, shutdown);
            while ticks.tick().await {
                // The window goes back from the snapshot's time by the database's clock,
                // not this host's.
                let options = Options {
                    since: args.since,
                    window: args.window,
                    settle: args.settle,
                };
                match reconcile::run(&pool, &relay, &options).await {
                    Ok(report) => {
                        metrics.finished(&report);
                        if report.clean() {
                            tracing::info!(?report, "reconciled");
                        } else {
                            tracing::error!(?report, "the topics and the ledger disagree");
                        }
                    }
                    Err(error) => {
                        metrics.failed();
                        tracing::warn!(%error, "reconcile run failed; trying again at the next one");
                    }
                }
            }
            Ok::<(), anyhow::Error>(())
        },
    )
    .await
}

fn print(report: &Report, json: bool) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(report)?);
        return Ok(());
    }
    outln!(
        "events {} | records {} | lost {} | phantom {} | duplicates {} (most copies {}) | \
         order inversions {} by commit position, {} by stream version | unseen {} | parked {} | \
         relay caught up: {} | {:.1} s",
        report.events,
        report.records,
        report.lost,
        report.phantom,
        report.duplicates,
        report.max_copies,
        report.lsn_inversions,
        report.version_inversions,
        report.unseen,
        report.parked,
        report.caught_up,
        report.seconds
    );
    for id in &report.lost_sample {
        outln!("lost    {id}");
    }
    for id in &report.phantom_sample {
        outln!("phantom {id}");
    }
    Ok(())
}

fn parse_time(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|time| time.to_utc())
        .map_err(|error| format!("expected an RFC 3339 time such as 2026-03-01T00:00:00Z: {error}"))
}

/// `90s`, `5m`, `2h`, `1d`, or a number of seconds.
pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a duration such as 90s, 5m or 1h"))?;
    let seconds = match unit {
        "" | "s" => number,
        "m" => number * 60,
        "h" => number * 3_600,
        "d" => number * 86_400,
        _ => return Err(format!("{text:?}: the unit is s, m, h or d")),
    };
    if seconds == 0 {
        return Err(format!("{text:?}: must be more than 0"));
    }
    Ok(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_an_operator_writes_them() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7_200)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5 weeks").is_err());
        assert!(parse_duration("").is_err());
    }
}
