//! `ledger audit`: the audit questions, answered from the projections, as JSON.

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Pool};
use ra_ledger::digest::prove;
use ra_ledger::domain::{self, Jurisdiction};
use ra_ledger::{db, queries};
use uuid::Uuid;

#[derive(Debug, clap::Subcommand)]
pub enum AuditCommand {
    /// Who was the RA of a business in a jurisdiction at an instant.
    At {
        /// Business id.
        #[arg(long)]
        business: Uuid,
        /// Jurisdiction code, e.g. TX.
        #[arg(long, value_parser = parse_jurisdiction)]
        jurisdiction: Jurisdiction,
        /// Business time (RFC 3339); defaults to now.
        #[arg(long, value_parser = parse_instant)]
        at: Option<DateTime<Utc>>,
        /// Only what the ledger had recorded by then (RFC 3339); defaults to now, or with
        /// --proof to the newest digest's time (a digest cannot prove a later instant).
        #[arg(long, value_parser = parse_instant)]
        known_at: Option<DateTime<Utc>>,
        /// Print the answer's proof against the newest signed digest instead (it holds the
        /// answer); `ledger proof verify` checks it offline.
        #[arg(long)]
        proof: bool,
    },
    /// Every RA of a business in a jurisdiction during [from, to).
    During {
        /// Business id.
        #[arg(long)]
        business: Uuid,
        /// Jurisdiction code.
        #[arg(long, value_parser = parse_jurisdiction)]
        jurisdiction: Jurisdiction,
        /// Start (RFC 3339, inclusive).
        #[arg(long, value_parser = parse_instant)]
        from: DateTime<Utc>,
        /// End (RFC 3339, exclusive).
        #[arg(long, value_parser = parse_instant)]
        to: DateTime<Utc>,
    },
    /// The supersede lineage of a contact.
    Lineage {
        /// Contact id.
        contact: Uuid,
    },
    /// The whole assignment history of a business.
    History {
        /// Business id.
        business: Uuid,
    },
}

pub(super) fn parse_instant(text: &str) -> Result<DateTime<Utc>, String> {
    let time: DateTime<Utc> = text
        .parse()
        .map_err(|error| format!("not an RFC 3339 time: {error}"))?;
    domain::instant("time", time).map_err(|error| error.reason)
}

pub(super) fn parse_jurisdiction(code: &str) -> Result<Jurisdiction, String> {
    Jurisdiction::parse("jurisdiction", code).map_err(|error| error.reason)
}

pub async fn run(database_url: &str, question: AuditCommand) -> anyhow::Result<()> {
    // Two: `--proof` reads in a snapshot of its own.
    let pool = db::pool(database_url, "ledger-audit", 2)?;
    let client = pool.get().await?;
    let json = match question {
        AuditCommand::At {
            business,
            jurisdiction,
            at,
            known_at,
            proof,
        } => {
            let now = Utc::now();
            let at = at.unwrap_or(now);
            if proof {
                proof_at(&pool, business, jurisdiction, at, known_at).await?
            } else {
                let known_at = known_at.unwrap_or(now);
                answer_at(&client, business, jurisdiction, at, known_at).await?
            }
        }
        AuditCommand::During {
            business,
            jurisdiction,
            from,
            to,
        } => {
            if to <= from {
                anyhow::bail!("--to {to} must be after --from {from}");
            }
            serde_json::to_string_pretty(
                &queries::registered_agents_during(&client, business, jurisdiction, from, to)
                    .await?,
            )?
        }
        AuditCommand::Lineage { contact } => {
            serde_json::to_string_pretty(&queries::lineage(&client, contact).await?)?
        }
        AuditCommand::History { business } => {
            serde_json::to_string_pretty(&whole_history(&client, business).await?)?
        }
    };
    outln!("{json}");
    Ok(())
}

/// Who was the RA at `at`, as known at `known_at`, from the projections; an error when
/// nobody was.
async fn answer_at(
    client: &impl GenericClient,
    business: Uuid,
    jurisdiction: Jurisdiction,
    at: DateTime<Utc>,
    known_at: DateTime<Utc>,
) -> anyhow::Result<String> {
    let Some(answer) =
        queries::registered_agent_at(client, business, jurisdiction, at, known_at).await?
    else {
        // The API's 404, in the same words: no answer is not an answer of null.
        anyhow::bail!(
            "business {business} had no registered agent in {} at {at} (as known at {known_at})",
            jurisdiction.code()
        );
    };
    Ok(serde_json::to_string_pretty(&answer)?)
}

/// The proof of who was the RA at `at` against the newest signed digest (as known at
/// `known_at`, or at that digest's time). "No RA" is proven too (issue 56): the document's
/// `answer` is then `null`.
async fn proof_at(
    pool: &Pool,
    business: Uuid,
    jurisdiction: Jurisdiction,
    at: DateTime<Utc>,
    known_at: Option<DateTime<Utc>>,
) -> anyhow::Result<String> {
    let (_, document) = prove::for_answer(
        pool,
        &Default::default(),
        business,
        jurisdiction,
        at,
        known_at,
    )
    .await?;
    Ok(serde_json::to_string_pretty(&document)?)
}

/// Every assignment of `business`, read a page at a time.
async fn whole_history(
    client: &impl GenericClient,
    business: Uuid,
) -> anyhow::Result<Vec<queries::AssignmentView>> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = queries::assignment_history(client, business, after, 500).await?;
        let full = page.len() == 500;
        after = page.last().map(|last| queries::HistoryCursor {
            started_at: last.started_at,
            assignment_id: last.assignment_id,
        });
        all.extend(page);
        if !full {
            return Ok(all);
        }
    }
}
