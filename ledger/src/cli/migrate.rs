//! `ledger migrate`: apply pending migrations (and create the relay's slot), or list them.

use ra_ledger::migrate;

/// Arguments of `ledger migrate`.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// Only list the migrations embedded in this binary.
    #[arg(long)]
    list: bool,
}

pub async fn run(database_url: &str, args: MigrateArgs) -> anyhow::Result<()> {
    if args.list {
        for name in migrate::embedded() {
            outln!("{name}");
        }
        return Ok(());
    }
    migrate::prepare(database_url).await?;
    Ok(())
}
