//! The relay's lag, written where `ledger serve` and its console read it (migration V18,
//! table `relay_lag_reports`): the commit time of the oldest transaction the relay read and
//! Kafka has not yet acknowledged, the figure `ra_relay_oldest_unconfirmed_commit_age_seconds`
//! shows. The service's gauge, the console and the alert rules then say the same number as
//! the relay, instead of a bound from the retention marks that came down to the truth only
//! a retention round later (issue 48).
//!
//! Beside each session, on a connection of its own: every [`REPORT_EVERY`] it writes the
//! figure when it changed, and every [`REPORT_AT_LEAST_EVERY`] anyway, so a reader tells a
//! live report from one a dead or frozen relay left ([`report_due`]). A failed write is
//! logged and tried again on a new connection; it never touches the stream. A relay that
//! refuses to go on records why there too ([`refused`]), for the verdict.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::connect;
use crate::config::RelayConfig;
use crate::metrics::RelayMetrics;

/// How often the figure is looked at, and written when it changed: the slot is confirmed
/// about as often (at each publication check), so the report trails it by at most this.
pub const REPORT_EVERY: Duration = Duration::from_millis(200);

/// How often the figure is written even when unchanged: a report older than a few of these
/// is a relay that stopped reporting.
pub const REPORT_AT_LEAST_EVERY: Duration = Duration::from_secs(1);

/// How long after a failed report the next one is tried.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Writes the relay's oldest unconfirmed commit for `config.slot` until `stop`.
pub(super) async fn run(
    config: RelayConfig,
    metrics: std::sync::Arc<RelayMetrics>,
    stop: CancellationToken,
) {
    let application_name = format!("ledger-relay:{}:lag", config.slot);
    let mut connection: Option<tokio_postgres::Client> = None;
    let mut written: Option<(Option<i64>, Instant)> = None;
    // After a failure: no attempt before this, and one warning per run of failures (a
    // relay newer than the database's migrations, or a role without V18's grant, fails
    // every time; its log should not fill with five lines a second).
    let mut retry_at: Option<Instant> = None;
    let mut warned = false;
    let mut tick = tokio::time::interval(REPORT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let oldest = metrics.oldest_unconfirmed();
        let now = Instant::now();
        if !report_due(written, oldest, now) || retry_at.is_some_and(|at| now < at) {
            continue;
        }
        // A connection attempt to a server that does not answer must not hold the
        // session's end: the stop wins.
        let outcome = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            outcome = report(&config, &application_name, &mut connection, oldest) => outcome,
        };
        match outcome {
            Ok(()) => {
                written = Some((oldest, Instant::now()));
                retry_at = None;
                warned = false;
            }
            Err(error) => {
                if !warned {
                    warn!(%error, retry_every = ?RETRY_AFTER, "cannot report the relay's lag to the database; ledger serve shows the database's bound meanwhile");
                    warned = true;
                }
                connection = None;
                retry_at = Some(Instant::now() + RETRY_AFTER);
            }
        }
    }
}

/// One report, on `connection` (connected first when there is none).
async fn report(
    config: &RelayConfig,
    application_name: &str,
    connection: &mut Option<tokio_postgres::Client>,
    oldest: Option<i64>,
) -> Result<(), super::RelayError> {
    if connection.is_none() {
        *connection = Some(connect::connect_sql(config, application_name).await?);
    }
    if let Some(client) = connection.as_ref() {
        client
            .execute(
                include_str!("../sql/lag_report.sql"),
                &[&config.slot, &oldest],
            )
            .await?;
    }
    Ok(())
}

/// How long the relay, stopping on a refusal, tries to record it.
const REFUSAL_WRITE: Duration = Duration::from_secs(5);

/// Records that the relay of `config.slot` refused to go on, and why, for the verdict:
/// best effort, within [`REFUSAL_WRITE`] (the refusal may be that the database is not the
/// one it should be; then the verdict says only that no relay streams).
pub(super) async fn refused(config: &RelayConfig, error: &super::RelayError) {
    let reason = error.to_string();
    let write = async {
        let client =
            connect::connect_sql(config, &format!("ledger-relay:{}:lag", config.slot)).await?;
        client
            .execute(
                include_str!("../sql/lag_refused.sql"),
                &[&config.slot, &reason],
            )
            .await?;
        Ok::<_, super::RelayError>(())
    };
    match tokio::time::timeout(REFUSAL_WRITE, write).await {
        Ok(Ok(())) => {}
        Ok(Err(failed)) => {
            warn!(error = %failed, "cannot record the relay's refusal for the verdict")
        }
        Err(_) => {
            warn!("cannot record the relay's refusal for the verdict within {REFUSAL_WRITE:?}")
        }
    }
}

/// Whether to write `oldest` now, given what was written last and when. Pure.
fn report_due(written: Option<(Option<i64>, Instant)>, oldest: Option<i64>, now: Instant) -> bool {
    match written {
        None => true,
        Some((before, at)) => before != oldest || now.duration_since(at) >= REPORT_AT_LEAST_EVERY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_written_at_once_and_an_unchanged_figure_every_second() {
        let start = Instant::now();
        assert!(report_due(None, None, start), "the first report");
        let written = Some((Some(42), start));
        assert!(!report_due(written, Some(42), start + REPORT_EVERY));
        assert!(
            report_due(written, None, start + REPORT_EVERY),
            "confirmed: 0 at once"
        );
        assert!(report_due(written, Some(43), start + REPORT_EVERY));
        assert!(report_due(written, Some(42), start + REPORT_AT_LEAST_EVERY));
    }
}
