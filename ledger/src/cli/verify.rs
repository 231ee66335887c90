//! `ledger verify`: recompute every stream's hash chain.

use ra_ledger::{db, verify};

pub async fn run(database_url: &str) -> anyhow::Result<()> {
    let client = db::connect(database_url, "ledger-verify").await?;
    let report = verify::verify(&client, |done| eprintln!("verified {done} events…")).await?;
    match report.broken {
        None => {
            println!(
                "ok: {} events in {} streams, every hash chain intact",
                report.events, report.streams
            );
            Ok(())
        }
        Some(link) => {
            println!("BROKEN: {link}");
            std::process::exit(1);
        }
    }
}
