//! `ledger projections rebuild [--verify]`.

use std::time::Instant;

use ra_ledger::{db, rebuild};

/// Projection maintenance.
#[derive(Debug, clap::Subcommand)]
pub enum ProjectionsCommand {
    /// Replay the ledger into fresh tables and swap them in (commands wait meanwhile).
    Rebuild {
        /// Compare the rebuilt tables with the live ones instead of swapping; exits 1 on a
        /// difference.
        #[arg(long)]
        verify: bool,
    },
}

pub async fn run(database_url: &str, command: ProjectionsCommand) -> anyhow::Result<()> {
    let ProjectionsCommand::Rebuild { verify } = command;
    let mut client = db::pool(database_url, "ledger-rebuild", 1)?.get().await?;
    let started = Instant::now();
    let report = rebuild::rebuild(&mut client, verify, |done, total| {
        let rate = done as f64 / started.elapsed().as_secs_f64().max(0.001);
        eprintln!("replayed {done}/{total} events ({rate:.0}/s)");
    })
    .await?;
    if !verify {
        println!(
            "rebuilt projections from {} events and swapped them in",
            report.events
        );
        return Ok(());
    }
    let different: u64 = report.differences.iter().map(|(_, count)| count).sum();
    for (table, count) in &report.differences {
        println!("{table}: {count} differing rows");
    }
    for example in &report.examples {
        println!("  e.g. {example}");
    }
    if different > 0 {
        println!("DIFFERENT: live projections disagree with the ledger");
        std::process::exit(1);
    }
    println!(
        "ok: rebuilt projections from {} events equal the live ones",
        report.events
    );
    Ok(())
}
