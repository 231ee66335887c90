//! The standby's copies of the primary's failover slots: when one is ready to take over,
//! and the orphans a demoted primary brings back; and on the primary, a slot's failover
//! flag and the gate that names the standbys (`synchronized_standby_slots`).

use std::time::{Duration, Instant};

use anyhow::bail;

use super::{ReplicatedPostgres, admin};

/// The standby's copy of a logical slot, from its `pg_replication_slots`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotCopy {
    /// Whether slot sync made it (a slot made on this server is not).
    pub synced: bool,
    /// A synced slot stays temporary until its consumer moved it past the standby's
    /// horizon (the standby logs "could not synchronize replication slot" meanwhile), and
    /// PostgreSQL drops it at promotion.
    pub temporary: bool,
    /// Why the slot was invalidated, if it was (`wal_removed`, `rows_removed`, …).
    pub invalidation_reason: Option<String>,
    /// How far its consumer confirmed, as far as the standby knows (slot sync naps up to
    /// 30 s between rounds, so this may trail the primary's).
    pub confirmed_flush_lsn: Option<String>,
}

impl SlotCopy {
    /// Whether a promotion keeps this slot, usable: synced, not temporary, valid.
    pub fn failover_ready(&self) -> bool {
        self.synced && !self.temporary && self.invalidation_reason.is_none()
    }
}

impl ReplicatedPostgres {
    /// The standby's copy of `slot`, if it has one.
    pub async fn standby_slot(&self, slot: &str) -> anyhow::Result<Option<SlotCopy>> {
        let client = admin(self.running_standby()?).await?;
        let row = client
            .query_opt(
                "SELECT synced, temporary, invalidation_reason, confirmed_flush_lsn::text \
                   FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await?;
        Ok(row.map(|row| SlotCopy {
            synced: row.get(0),
            temporary: row.get(1),
            invalidation_reason: row.get(2),
            confirmed_flush_lsn: row.get(3),
        }))
    }

    /// Waits until the standby's copy of `slot` is ready to take over
    /// ([`SlotCopy::failover_ready`]); `synced` alone is not enough.
    pub async fn wait_failover_ready(
        &self,
        slot: &str,
        timeout: Duration,
    ) -> anyhow::Result<SlotCopy> {
        self.wait_copy(slot, None, timeout).await
    }

    /// Like [`ReplicatedPostgres::wait_failover_ready`], and until the copy's
    /// `confirmed_flush_lsn` is at least `lsn` (e.g. the primary's, to fail over with no
    /// redelivery).
    pub async fn wait_failover_ready_at(
        &self,
        slot: &str,
        lsn: &str,
        timeout: Duration,
    ) -> anyhow::Result<SlotCopy> {
        self.wait_copy(slot, Some(lsn), timeout).await
    }

    async fn wait_copy(
        &self,
        slot: &str,
        lsn: Option<&str>,
        timeout: Duration,
    ) -> anyhow::Result<SlotCopy> {
        let standby = self.running_standby()?;
        let client = admin(standby).await?;
        let deadline = Instant::now() + timeout;
        loop {
            let copy = self.standby_slot(slot).await?;
            if let Some(copy) = &copy
                && copy.failover_ready()
            {
                let reached: bool = match (lsn, &copy.confirmed_flush_lsn) {
                    (None, _) => true,
                    (Some(_), None) => false,
                    (Some(lsn), Some(confirmed)) => client
                        .query_one(
                            "SELECT $1::text::pg_lsn >= $2::text::pg_lsn",
                            &[confirmed, &lsn],
                        )
                        .await?
                        .get(0),
                };
                if reached {
                    return Ok(copy.clone());
                }
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(standby.log_path()).unwrap_or_default();
                let sync_lines: Vec<&str> = log
                    .lines()
                    .filter(|line| line.contains("slot"))
                    .rev()
                    .take(6)
                    .collect();
                bail!(
                    "the standby's copy of slot {slot} is not failover-ready{} after {timeout:?}: \
                     {copy:?}; has its consumer moved it since it was made? The standby's last \
                     lines about slots ({}), newest first:\n{}",
                    lsn.map(|lsn| format!(" at {lsn}")).unwrap_or_default(),
                    standby.log_path().display(),
                    sync_lines.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether the current primary's `slot` is a failover slot (`None`: no such slot).
    pub async fn primary_slot_failover(&self, slot: &str) -> anyhow::Result<Option<bool>> {
        let client = admin(&self.primary).await?;
        Ok(client
            .query_opt(
                "SELECT failover FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await?
            .map(|row| row.get(0)))
    }

    /// Sets the current primary's `synchronized_standby_slots` as an operator does
    /// (`ALTER SYSTEM`, then a reload), and waits until a new session sees it.
    pub async fn set_synchronized_standby_slots(&self, value: &str) -> anyhow::Result<()> {
        let client = admin(&self.primary).await?;
        // ALTER SYSTEM takes no parameters (a literal, quoted) and no transaction block (one
        // statement per call).
        let literal = format!("'{}'", value.replace('\'', "''"));
        client
            .batch_execute(&format!(
                "ALTER SYSTEM SET synchronized_standby_slots = {literal}"
            ))
            .await?;
        client.batch_execute("SELECT pg_reload_conf()").await?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now: String = admin(&self.primary)
                .await?
                .query_one("SELECT current_setting('synchronized_standby_slots')", &[])
                .await?
                .get(0);
            if now == value {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("synchronized_standby_slots is still '{now}' 10 s after the reload");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The standby's failover slots that slot sync did not make: slots a demoted primary
    /// kept. While one has the name of a primary's failover slot, slot sync of every slot
    /// stops ("same name slot already exists on the standby", cloudnative-pg#9969).
    pub async fn orphaned_failover_slots(&self) -> anyhow::Result<Vec<String>> {
        let client = admin(self.running_standby()?).await?;
        let rows = client
            .query(
                "SELECT slot_name::text FROM pg_replication_slots \
                  WHERE slot_type = 'logical' AND failover AND NOT synced ORDER BY 1",
                &[],
            )
            .await?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// Drops [`ReplicatedPostgres::orphaned_failover_slots`] on the standby, as a rejoining
    /// node must for slot sync to go on; returns their names.
    pub async fn drop_orphaned_failover_slots(&self) -> anyhow::Result<Vec<String>> {
        let orphans = self.orphaned_failover_slots().await?;
        let client = admin(self.running_standby()?).await?;
        for slot in &orphans {
            client
                .execute("SELECT pg_drop_replication_slot($1)", &[slot])
                .await?;
        }
        Ok(orphans)
    }
}
