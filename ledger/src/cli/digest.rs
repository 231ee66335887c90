//! `ledger digest monitor`: recompute the index of stream heads from the transparency log
//! and say whether what the ledger signed agrees with it (issue 56, item 2).

use ra_ledger::db;
use ra_ledger::digest::monitor;

/// The signed digests.
#[derive(Debug, clap::Subcommand)]
pub enum DigestCommand {
    /// Recompute every stream's head and its events' log positions from the log a digest
    /// sealed, check that the log is the checkpoint's, and that the digest signed exactly
    /// those heads; exits 1 naming the first difference.
    Monitor {
        /// The digest to check; the newest when left out.
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..))]
        seq: Option<i64>,
    },
}

/// Runs a `ledger digest` command.
pub async fn run(database_url: &str, command: DigestCommand) -> anyhow::Result<()> {
    match command {
        DigestCommand::Monitor { seq } => {
            let pool = db::pool(database_url, "ledger-digest-monitor", 1)?;
            let client = pool.get().await?;
            let verdict = monitor::monitor(&client, seq).await?;
            match verdict.difference {
                None => {
                    outln!(
                        "ok: digest {} signed the heads of the {} streams its log of {} leaves \
                         gives (index root {})",
                        verdict.seq,
                        verdict.streams,
                        verdict.log_size,
                        ra_ledger::hex::hex(&verdict.index_root)
                    );
                    Ok(())
                }
                Some(difference) => {
                    eprintln!("INDEX NOT HONEST: digest {}: {difference}", verdict.seq);
                    std::process::exit(1);
                }
            }
        }
    }
}
