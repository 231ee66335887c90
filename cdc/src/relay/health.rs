//! Beside a streaming session: what could stall or lose the stream without an error.
//!
//! - **The standby gate holds decoding.** The relay's walsender waits in
//!   `WaitForStandbyConfirmation` while a standby of `synchronized_standby_slots` has not
//!   flushed the WAL, or for ever while the setting names a slot the primary lacks. The
//!   stream then looks healthy and carries nothing. Sampled every
//!   `health_check_interval_ms`: [`STANDBY_GATE_WAITING`](crate::metrics::STANDBY_GATE_WAITING)
//!   and a warning that names the missing slots.
//! - **The primary gained or lost its standby.** With `slot_failover`, the gate's decision
//!   ([`super::gate`]) is taken again from the same sample; when it changes how the session
//!   may stream (a standby's physical slot appeared while streaming without the gate, or
//!   the last one went, with `without_standby = "stream"`), the watch ends the session,
//!   cleanly, and the next one starts the new way. While the session streams without the
//!   gate, the warning that says so is repeated every minute.
//! - **A standby not ready to take over.** With a multi-host URL, the other hosts are the
//!   standbys: the relay reads there whether its slot is synced and would survive a
//!   promotion. PostgreSQL drops a slot that is not ready at promotion, and the relay then
//!   stops for want of it: better known before.
//!
//! Each check connects on its own and reconnects when a connection fails; only the gate's
//! decision ever ends the session.

use std::time::{Duration, Instant};

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::gate::{self, Change, GATE_WAIT_EVENT, Gate, GateState};
use crate::config::RelayConfig;
use crate::infra::pg::{self, Settings};
use crate::metrics::RelayMetrics;

/// How long decoding may wait on the gate before the relay warns: a standby flushes within
/// milliseconds when healthy, so two samples in a row mean it does not.
const WARN_AFTER_SAMPLES: u32 = 2;

/// How often a continuing wait is logged again.
const REPEAT_WARNING: Duration = Duration::from_secs(60);

/// What a session's watch looks at.
pub(super) struct Watched {
    /// The primary the session streams from.
    pub primary: Settings,
    /// The other hosts of the URL.
    pub standbys: Vec<Settings>,
    /// With `slot_failover`: how the session streams with respect to the gate.
    pub gate: Option<Gate>,
}

/// Checks the gate on the primary and the slot on the standbys until `stop`; cancels `end`
/// and returns why when the gate's decision ends the session.
pub(super) async fn watch(
    config: RelayConfig,
    watched: Watched,
    metrics: std::sync::Arc<RelayMetrics>,
    stop: CancellationToken,
    end: CancellationToken,
) -> Option<Change> {
    let mut primary = Link::new(watched.primary);
    let mut standbys: Vec<Link> = watched.standbys.into_iter().map(Link::new).collect();
    let mut waiting_samples = 0u32;
    let mut warned_at: Option<Instant> = None;
    // The session's start logged it once already.
    let mut without_standby_at = Instant::now();
    let mut unready: Vec<bool> = vec![false; standbys.len()];
    let interval = Duration::from_millis(config.health_check_interval_ms);
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return None,
            () = tokio::time::sleep(interval) => {}
        }
        if let Some((waiting, gate)) = primary.gate(&config.slot).await {
            metrics.set_gate(waiting, gate.missing.len());
            if let Some(session) = watched.gate {
                if let Some(change) = session.ended_by(&gate.decide(config.without_standby), &gate)
                {
                    warn!(%change, "ending the session");
                    end.cancel();
                    return Some(change);
                }
                if session == Gate::WithoutStandby && without_standby_at.elapsed() >= REPEAT_WARNING
                {
                    without_standby_at = Instant::now();
                    warn!("{}", gate::streaming_without_standby(&gate.named));
                }
            }
            waiting_samples = if waiting { waiting_samples + 1 } else { 0 };
            let due = warned_at.is_none_or(|at| at.elapsed() >= REPEAT_WARNING);
            if waiting_samples >= WARN_AFTER_SAMPLES && due {
                warned_at = Some(Instant::now());
                if gate.missing.is_empty() {
                    warn!(
                        standbys = %gate.named.join(", "),
                        "logical decoding is held by synchronized_standby_slots: a standby has not flushed the WAL the relay would read next. Check that the standbys run and replicate (pg_stat_replication); nothing is published until they catch up"
                    );
                } else {
                    warn!(
                        missing = %gate.missing.join(", "),
                        "logical decoding is held by synchronized_standby_slots: it names slots this primary does not have, so PostgreSQL waits for ever. Build the new standby with that physical slot (pg_basebackup -C -S <slot> -R) or set synchronized_standby_slots to the current standbys' slots"
                    );
                }
            } else if waiting_samples == 0 && warned_at.take().is_some() {
                info!("logical decoding is no longer held by the standby gate");
            }
        }
        let mut ready = 0;
        for (index, standby) in standbys.iter_mut().enumerate() {
            let is_ready = standby.slot_ready(&config.slot).await.unwrap_or(false);
            ready += usize::from(is_ready);
            if config.slot_failover && is_ready == unready[index] {
                // A change: log it once.
                unready[index] = !is_ready;
                if is_ready {
                    info!(standby = %standby.name, "the standby's copy of the slot is ready to take over");
                } else {
                    warn!(
                        standby = %standby.name,
                        "the standby's copy of the slot is not ready to take over (missing, temporary or invalidated): a promotion now would lose the slot. It becomes ready once the relay advanced it past the standby's horizon; check sync_replication_slots, hot_standby_feedback and primary_conninfo's dbname on the standby"
                    );
                }
            }
        }
        metrics.set_standbys(standbys.len(), ready);
    }
}

/// A lazily (re)connected SQL connection to one server.
struct Link {
    settings: Settings,
    name: String,
    client: Option<Client>,
}

impl Link {
    fn new(settings: Settings) -> Self {
        let name = pg::target(&settings);
        Self {
            settings,
            name,
            client: None,
        }
    }

    async fn client(&mut self) -> Option<&Client> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            let connect = pg::connect(&self.settings);
            self.client = tokio::time::timeout(Duration::from_secs(5), connect)
                .await
                .ok()
                .and_then(Result::ok);
        }
        self.client.as_ref()
    }

    /// Whether the walsender of `slot` waits on the gate, and the gate's state.
    async fn gate(&mut self, slot: &str) -> Option<(bool, GateState)> {
        let client = self.client().await?;
        let wait: Option<String> = match client
            .query_opt(include_str!("../sql/walsender_wait.sql"), &[&slot])
            .await
        {
            Ok(row) => row.and_then(|row| row.get(0)),
            Err(_) => {
                self.client = None;
                return None;
            }
        };
        let gate = GateState::read(client).await.ok()?;
        Some((wait.as_deref() == Some(GATE_WAIT_EVENT), gate))
    }

    /// Whether this standby has `slot` ready to take over; `None` when it cannot be asked.
    async fn slot_ready(&mut self, slot: &str) -> Option<bool> {
        let client = self.client().await?;
        match client
            .query_one(include_str!("../sql/standby_slot_ready.sql"), &[&slot])
            .await
        {
            Ok(row) => Some(row.get(0)),
            Err(_) => {
                self.client = None;
                None
            }
        }
    }
}
