//! `ledger outbox`: retention by hand, and where it stands.

use ra_ledger::{db, retention};
use ra_ledger_cdc::infra::settings::{env, local};

/// Outbox maintenance.
#[derive(Debug, clap::Subcommand)]
pub enum OutboxCommand {
    /// Rows, size on disk, pending retention marks and parked rows.
    Status,
    /// Remove the rows the relay's slot has confirmed, as `ledger serve` does every few
    /// seconds, and print what was removed. Never removes a row the slot has not confirmed,
    /// nor a parked one.
    Prune {
        /// The relay's replication slot.
        #[arg(long, env = env::RELAY_SLOT, default_value = local::SLOT)]
        slot: String,
        /// Most rows per delete statement.
        #[arg(long, default_value_t = retention::DEFAULT_BATCH,
              value_parser = clap::value_parser!(i64).range(1..=1_000_000))]
        batch: i64,
    },
}

pub async fn run(database_url: &str, command: OutboxCommand) -> anyhow::Result<()> {
    let pool = db::pool(database_url, "ledger-outbox", 1)?;
    match command {
        OutboxCommand::Status => {
            let status = retention::status(&pool).await?;
            outln!("rows          {}", status.rows);
            outln!("size on disk  {} kB", status.bytes / 1024);
            outln!(
                "marks         {} (oldest at {})",
                status.marks,
                status.oldest_mark.as_deref().unwrap_or("-")
            );
            outln!(
                "parked rows   {} (never removed by retention)",
                status.parked
            );
        }
        OutboxCommand::Prune { slot, batch } => {
            if !ra_ledger_cdc::infra::settings::identifier(&slot) {
                anyhow::bail!("--slot {slot:?}: a slot name is 1-63 characters of a-z, 0-9 and _");
            }
            let pruned = retention::prune(&pool, &slot, batch).await?;
            match (&pruned.published, &pruned.through) {
                (None, _) => outln!(
                    "the relay of slot {slot} has not recorded that Kafka holds anything (no relay \
                     yet, a snapshot being published, or a record of another server): none removed"
                ),
                (Some(published), None) => outln!(
                    "the relay of slot {slot} recorded Kafka holds what committed before \
                     {published}, behind every retention mark: none removed yet (a mark was \
                     taken; run again once the relay moved on)"
                ),
                (Some(published), Some(through)) => outln!(
                    "removed {} rows in {} batches, up to mark {through} (the relay of slot \
                     {slot} recorded Kafka holds what committed before {published})",
                    pruned.removed,
                    pruned.batches
                ),
            }
        }
    }
    Ok(())
}
