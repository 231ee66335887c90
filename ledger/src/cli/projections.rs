//! `ledger projections rebuild [--online] [--verify]`.

use std::time::Instant;

use ra_ledger::{db, rebuild};

/// Projection maintenance.
#[derive(Debug, clap::Subcommand)]
pub enum ProjectionsCommand {
    /// Replay the ledger into fresh tables and swap them in (commands wait meanwhile, unless
    /// --online).
    Rebuild {
        /// Compare the rebuilt tables with the live ones instead of swapping; exits 1 on a
        /// difference.
        #[arg(long)]
        verify: bool,
        /// Build while writes go on, catch up, and swap in one short transaction (writers
        /// wait at most about 50 ms at a time). Run as the projections' owner.
        #[arg(long)]
        online: bool,
        /// With --online: after each chunk of the bulk, pause this many times as long as the
        /// chunk took, leaving CPU and disk to the writers (0: full speed).
        #[arg(long, default_value_t = 1.0, value_parser = ra_ledger::command_line::parse_pause_ratio, requires = "online")]
        pause_ratio: f64,
    },
}

pub async fn run(database_url: &str, command: ProjectionsCommand) -> anyhow::Result<()> {
    let ProjectionsCommand::Rebuild {
        verify,
        online,
        pause_ratio,
    } = command;
    if online {
        let options = rebuild::online::OnlineOptions {
            verify_only: verify,
            pause_ratio,
            ..Default::default()
        };
        return run_online(database_url, options).await;
    }
    let mut client = db::pool(database_url, "ledger-rebuild", 1)?.get().await?;
    let started = Instant::now();
    let report = rebuild::rebuild(&mut client, verify, |done, total| {
        let rate = done as f64 / started.elapsed().as_secs_f64().max(0.001);
        eprintln!("replayed {done}/{total} events ({rate:.0}/s)");
    })
    .await?;
    if !verify {
        outln!(
            "rebuilt projections from {} events and swapped them in",
            report.events
        );
        return Ok(());
    }
    differences(&report.differences, &report.examples, report.events)
}

fn differences(
    differences: &[(String, u64)],
    examples: &[String],
    events: u64,
) -> anyhow::Result<()> {
    let different: u64 = differences.iter().map(|(_, count)| count).sum();
    for (table, count) in differences {
        outln!("{table}: {count} differing rows");
    }
    for example in examples {
        outln!("  e.g. {example}");
    }
    if different > 0 {
        outln!("DIFFERENT: live projections disagree with the ledger");
        std::process::exit(1);
    }
    outln!("ok: rebuilt projections from {events} events equal the live ones");
    Ok(())
}

async fn run_online(
    database_url: &str,
    options: rebuild::online::OnlineOptions,
) -> anyhow::Result<()> {
    let verify = options.verify_only;
    use rebuild::online::{Phase, rebuild_online};
    // One connection builds, one takes the brief locks.
    let pool = db::pool(database_url, "ledger-rebuild", 2)?;
    let started = Instant::now();
    let report = rebuild_online(&pool, options, |phase, done, total| {
        if done % 100_000 == 0 || done == total {
            let rate = done as f64 / started.elapsed().as_secs_f64().max(0.001);
            match phase {
                Phase::Bulk => eprintln!("built {done}/{total} events ({rate:.0}/s)"),
                Phase::CatchUp => eprintln!("caught up {done} events"),
            }
        }
    })
    .await?;
    eprintln!(
        "{} events, {} catch-up window(s), {} in the last; {} lock attempt(s) retried",
        report.events, report.catch_up_windows, report.last_window, report.lock_retries
    );
    if verify {
        return differences(&report.differences, &report.examples, report.events);
    }
    outln!(
        "rebuilt projections from {} events online and swapped them in (locks held {:.1} ms)",
        report.events,
        report.swap_held.as_secs_f64() * 1e3
    );
    Ok(())
}
