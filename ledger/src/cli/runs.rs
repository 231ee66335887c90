//! `ledger runs`: a reassignment run's progress as JSON or as a live bar, the runs in
//! progress, another run for what is left, and re-raising a run's current page.

use ra_ledger::command_line::progress::{progress_line, watch};
use ra_ledger::commands::{Ledger, StartReassignment};
use ra_ledger::db;
use ra_ledger::reassign;
use ra_ledger::store::Metadata;
use uuid::Uuid;

#[derive(Debug, clap::Subcommand)]
pub enum RunsCommand {
    /// A run's progress as JSON.
    Status {
        /// Run id.
        run: Uuid,
    },
    /// A live progress bar until the run completes.
    Watch {
        /// Run id.
        run: Uuid,
    },
    /// Runs in progress, or every run of one contact.
    List {
        /// Only runs of this (old) contact.
        #[arg(long)]
        contact: Option<Uuid>,
    },
    /// Start another run for a superseded contact: moves what is left (e.g. failed rows) to
    /// the jurisdiction's current primary contact; finished rows are skipped.
    Start {
        /// The superseded contact.
        #[arg(long)]
        contact: Uuid,
        /// Rows per page.
        #[arg(long)]
        page_size: Option<u32>,
    },
    /// Re-raise the page a run waits for (safe: a duplicate is dropped by the cursor fence).
    Resume {
        /// Run id.
        run: Uuid,
    },
}

pub async fn run(database_url: &str, command: RunsCommand) -> anyhow::Result<()> {
    let pool = db::pool(database_url, "ledger-runs", 1)?;
    match command {
        RunsCommand::Status { run } => {
            let client = pool.get().await?;
            let status = reassign::status(&client, run)
                .await?
                .ok_or_else(|| anyhow::anyhow!("no reassignment run {run}"))?;
            outln!("{}", serde_json::to_string_pretty(&status)?);
            Ok(())
        }
        RunsCommand::Watch { run } => {
            let status = watch(&pool, run).await?;
            if status.failed > 0 {
                outln!(
                    "{} row(s) failed; see `ledger runs status {run}`, fix the cause, then `ledger runs start --contact {}`",
                    status.failed,
                    status.old_contact_id
                );
            }
            Ok(())
        }
        RunsCommand::List { contact } => {
            let client = pool.get().await?;
            let ids: Vec<Uuid> = match contact {
                Some(contact) => reassign::runs_of(&client, contact).await?,
                None => reassign::in_progress(&client).await?,
            };
            for id in &ids {
                if let Some(status) = reassign::status(&client, *id).await? {
                    outln!("{id} {}", progress_line(&status));
                }
            }
            eprintln!("{} run(s)", ids.len());
            Ok(())
        }
        RunsCommand::Start { contact, page_size } => {
            let ledger = Ledger::new(pool);
            let run = ledger
                .start_reassignment(
                    contact,
                    StartReassignment { page_size },
                    &Metadata {
                        actor: "cli".into(),
                        correlation_id: Uuid::now_v7(),
                        causation_id: None,
                        traceparent: None,
                    },
                )
                .await?;
            outln!(
                "started run {} ({} active assignments)",
                run.run_id,
                run.total_at_start
            );
            Ok(())
        }
        RunsCommand::Resume { run } => {
            let request = reassign::resume(&pool, run).await?;
            outln!(
                "re-raised page {} of run {run} after cursor {}",
                request.page,
                request.cursor.map_or("(start)".into(), |c| c.to_string())
            );
            Ok(())
        }
    }
}
