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
//! logged and tried again on a new connection; it never touches the stream.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::setup;
use crate::config::RelayConfig;
use crate::metrics::RelayMetrics;

/// How often the figure is looked at, and written when it changed: the slot is confirmed
/// about as often (at each publication check), so the report trails it by at most this.
pub const REPORT_EVERY: Duration = Duration::from_millis(200);

/// How often the figure is written even when unchanged: a report older than a few of these
/// is a relay that stopped reporting.
pub const REPORT_AT_LEAST_EVERY: Duration = Duration::from_secs(1);

/// Writes the relay's oldest unconfirmed commit for `config.slot` until `stop`.
pub(super) async fn run(
    config: RelayConfig,
    metrics: std::sync::Arc<RelayMetrics>,
    stop: CancellationToken,
) {
    let application_name = format!("ledger-relay:{}:lag", config.slot);
    let mut connection = None;
    let mut written: Option<(Option<i64>, Instant)> = None;
    let mut tick = tokio::time::interval(REPORT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let oldest = metrics.oldest_unconfirmed();
        if !report_due(written, oldest, Instant::now()) {
            continue;
        }
        if connection.is_none() {
            connection = setup::connect_sql(&config, &application_name)
                .await
                .map_err(|error| warn!(%error, "cannot connect to report the relay's lag"))
                .ok();
        }
        let Some(client) = connection.as_ref() else {
            continue;
        };
        match client
            .execute(
                include_str!("../sql/lag_report.sql"),
                &[&config.slot, &oldest],
            )
            .await
        {
            Ok(_) => written = Some((oldest, Instant::now())),
            Err(error) => {
                warn!(error = %crate::infra::pg::explain(&error), "cannot report the relay's lag; reconnecting");
                connection = None;
            }
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
