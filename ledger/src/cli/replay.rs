//! `ledger replay`: republish past events to replay topics, with a completion marker that
//! hands off to the live topics (see `ra_ledger::replay`).

use std::io::{IsTerminal as _, Write as _};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use ra_ledger::db;
use ra_ledger::metrics::ReplayMetrics;
use ra_ledger::replay::run::{self, Outcome, Progress};
use ra_ledger::replay::{self, Cancel, ReplayRequest, ReplayState, ReplayStatus};
use ra_ledger_cdc::infra::kafka::KafkaSettings;
use ra_ledger_cdc::infra::settings::{env, local};
use ra_ledger_cdc::registry::SchemaRegistry;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{parse_key_value, refused};

/// Replays.
#[derive(Debug, clap::Subcommand)]
pub enum ReplayCommand {
    /// Record a replay and run it here, with a progress bar. Ctrl-C (or a kill) stops it
    /// at its checkpoint; `ledger replay resume` or any `ledger worker` goes on from there.
    Start {
        #[command(flatten)]
        selection: SelectionArgs,
        #[command(flatten)]
        kafka: KafkaArgs,
        /// Only record the request; a `ledger worker` runs it.
        #[arg(long)]
        detach: bool,
    },
    /// Run a started or requested replay from its checkpoint.
    Resume {
        /// The replay id.
        id: String,
        #[command(flatten)]
        kafka: KafkaArgs,
    },
    /// A replay's progress, handoff offsets and errors, as JSON.
    Status {
        /// The replay id.
        id: String,
    },
    /// Cancel a requested or running replay, for good: its runner stops publishing within
    /// a second, and its place among the replays open at once is free. Exits 1 if it had
    /// completed or failed already.
    Cancel {
        /// The replay id.
        id: String,
    },
}

/// What to replay.
#[derive(Debug, clap::Args)]
pub struct SelectionArgs {
    /// Aggregate type (contact, assignment, reassignment); repeatable [default: contact and
    /// assignment].
    #[arg(long = "aggregate")]
    aggregates: Vec<String>,
    /// Only this event type (e.g. AssignmentStarted); repeatable.
    #[arg(long = "event-type")]
    event_types: Vec<String>,
    /// Only streams starting with this, e.g. `assignment-<business id>`.
    #[arg(long)]
    stream_prefix: Option<String>,
    /// Only events recorded at or after this instant (RFC 3339).
    #[arg(long)]
    recorded_from: Option<DateTime<Utc>>,
    /// Only events recorded before this instant (RFC 3339).
    #[arg(long)]
    recorded_to: Option<DateTime<Utc>>,
    /// Events per second at most [default: 5000].
    #[arg(long)]
    rate: Option<u32>,
    /// The live topics' prefix.
    #[arg(long, env = env::TOPIC_PREFIX, default_value = local::TOPIC_PREFIX)]
    topic_prefix: String,
    /// Replay topic names: `{live}` and `{id}` are substituted [default: {live}.replay.{id}].
    #[arg(long)]
    target: Option<String>,
}

/// Where Kafka is.
#[derive(Debug, clap::Args)]
pub struct KafkaArgs {
    /// Kafka bootstrap servers.
    #[arg(long, env = env::KAFKA_BROKERS, default_value = local::KAFKA_BROKERS)]
    brokers: String,
    /// Other librdkafka settings, `key=value` (TLS, SASL); repeatable. The LEDGER_KAFKA_*
    /// variables apply too.
    #[arg(long = "kafka", value_parser = parse_key_value)]
    kafka: Vec<(String, String)>,
    /// The schema registry of the relay's framed topics (its Confluent-compatible API): a
    /// live topic whose subject it holds gets its events framed on the replay topic too.
    #[arg(long, env = env::SCHEMA_REGISTRY_URL)]
    schema_registry_url: Option<String>,
    /// The registry's user (basic auth); its password comes from a file.
    #[arg(long, env = env::SCHEMA_REGISTRY_USER)]
    schema_registry_user: Option<String>,
    /// The file holding the registry user's password.
    #[arg(long, env = env::SCHEMA_REGISTRY_PASSWORD_FILE)]
    schema_registry_password_file: Option<std::path::PathBuf>,
    /// The CA (PEM) that signed the registry's certificate.
    #[arg(long, env = env::SCHEMA_REGISTRY_CA_FILE)]
    schema_registry_ca_file: Option<std::path::PathBuf>,
}

impl KafkaArgs {
    fn settings(self) -> anyhow::Result<(KafkaSettings, Option<SchemaRegistry>)> {
        let mut settings = KafkaSettings::from_env(&self.brokers)?;
        settings.properties.extend(self.kafka);
        let registry = self
            .schema_registry_url
            .map(|url| {
                SchemaRegistry::connect(&ra_ledger_cdc::registry::RegistryAccess {
                    url,
                    user: self.schema_registry_user,
                    password_file: self.schema_registry_password_file,
                    ca_file: self.schema_registry_ca_file,
                })
            })
            .transpose()
            .map_err(refused)?;
        Ok((settings, registry))
    }
}

/// Who the CLI acts for: `cli:<user>`.
fn actor() -> String {
    format!(
        "cli:{}",
        std::env::var("USER").unwrap_or_else(|_| "unknown".into())
    )
}

fn replay_id(text: &str) -> anyhow::Result<Uuid> {
    Uuid::parse_str(text.trim()).map_err(|_| anyhow::anyhow!("replay id {text:?} is not a UUID"))
}

pub async fn run(database_url: &str, command: ReplayCommand) -> anyhow::Result<()> {
    let pool = db::pool(database_url, "ledger-replay", 2)?;
    match command {
        ReplayCommand::Start {
            selection,
            kafka,
            detach,
        } => {
            let request = ReplayRequest {
                aggregate_types: (!selection.aggregates.is_empty()).then_some(selection.aggregates),
                event_types: (!selection.event_types.is_empty()).then_some(selection.event_types),
                stream_prefix: selection.stream_prefix,
                recorded_from: selection.recorded_from,
                recorded_to: selection.recorded_to,
                rate: selection.rate,
                topic_prefix: Some(selection.topic_prefix),
                target: selection.target,
            };
            let selection = request.validate().map_err(|error| {
                let flag = match error.field.as_str() {
                    "aggregate_types" => "--aggregate".to_owned(),
                    "event_types" => "--event-type".to_owned(),
                    other => format!("--{}", other.replace('_', "-")),
                };
                anyhow::anyhow!("{flag}: {}", error.reason)
            })?;
            let kafka = kafka.settings()?;
            let id = replay::request(&mut pool.get().await?, &selection, &actor()).await?;
            outln!("replay {id}");
            if detach {
                outln!("recorded; a `ledger worker` runs it (ledger replay status {id})");
                return Ok(());
            }
            drive(&pool, &kafka, id).await
        }
        ReplayCommand::Resume { id, kafka } => {
            let id = replay_id(&id)?;
            let kafka = kafka.settings()?;
            drive(&pool, &kafka, id).await
        }
        ReplayCommand::Cancel { id } => {
            let id = replay_id(&id)?;
            match replay::cancel(&pool.get().await?, id, &actor()).await? {
                Cancel::Cancelled => {
                    outln!("replay {id} cancelled; its runner stops publishing within a second");
                    Ok(())
                }
                Cancel::AlreadyEnded(ReplayState::Cancelled) => {
                    outln!("replay {id} was cancelled already");
                    Ok(())
                }
                Cancel::AlreadyEnded(state) => anyhow::bail!(
                    "replay {id} is {} already: there is nothing to cancel",
                    state.as_str()
                ),
                Cancel::NotFound => anyhow::bail!("no replay {id}"),
            }
        }
        ReplayCommand::Status { id } => {
            let id = replay_id(&id)?;
            let status = replay::status(&pool.get().await?, id)
                .await?
                .ok_or_else(|| anyhow::anyhow!("no replay {id}"))?;
            outln!("{}", serde_json::to_string_pretty(&status)?);
            Ok(())
        }
    }
}

/// Runs the replay here, drawing its progress; prints the handoff at the end.
async fn drive(
    pool: &deadpool_postgres::Pool,
    (kafka, registry): &(KafkaSettings, Option<SchemaRegistry>),
    id: Uuid,
) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    ra_ledger_cdc::infra::runtime::cancel_on_signal(shutdown.clone());
    let metrics = Arc::new(ReplayMetrics::default());
    let terminal = std::io::stderr().is_terminal();
    let mut last_print = Instant::now() - Duration::from_secs(10);
    let mut draw = |progress: Progress| {
        let line = progress_line(&progress);
        if terminal {
            eprint!("\r\x1b[2K{line}");
            let _ = std::io::stderr().flush();
        } else if last_print.elapsed() >= Duration::from_secs(5) {
            eprintln!("{line}");
            last_print = Instant::now();
        }
    };
    let outcome = run::run(
        pool,
        kafka,
        registry.as_ref(),
        id,
        &metrics,
        &shutdown,
        &mut draw,
    )
    .await;
    if terminal {
        eprintln!();
    }
    match outcome? {
        Outcome::Complete => {
            let status = status(pool, id).await?;
            outln!("replay {id} complete: {} events", status.published);
            for target in &status.targets {
                outln!(
                    "  {} -> then {} from offsets {}",
                    target.replay_topic,
                    target.live_topic,
                    serde_json::to_string(&target.handoff)?
                );
            }
            Ok(())
        }
        Outcome::Stopped => {
            eprintln!("stopped at the checkpoint; resume with: ledger replay resume {id}");
            Ok(())
        }
        Outcome::Busy => anyhow::bail!("replay {id} is being run by another process"),
        Outcome::AlreadyEnded(ReplayState::Failed) => {
            let status = status(pool, id).await?;
            anyhow::bail!(
                "replay {id} failed: {}",
                status.error.as_deref().unwrap_or("(no reason recorded)")
            )
        }
        Outcome::Cancelled | Outcome::AlreadyEnded(ReplayState::Cancelled) => {
            let status = status(pool, id).await?;
            anyhow::bail!(
                "replay {id} was cancelled by {} at {}; nothing more is published",
                status.cancelled_by.as_deref().unwrap_or("(unknown)"),
                status
                    .cancelled_at
                    .map_or_else(|| "(unknown)".to_owned(), |at| at.to_rfc3339())
            )
        }
        Outcome::AlreadyEnded(_) => {
            outln!("replay {id} was complete already");
            Ok(())
        }
    }
}

async fn status(pool: &deadpool_postgres::Pool, id: Uuid) -> anyhow::Result<ReplayStatus> {
    replay::status(&pool.get().await?, id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no replay {id}"))
}

/// One line of progress: a bar, counts, rate and estimate.
fn progress_line(progress: &Progress) -> String {
    const WIDTH: usize = 30;
    let total = progress.total.max(0);
    let fraction = if total == 0 {
        1.0
    } else {
        (progress.published.min(total) as f64 / total as f64).min(1.0)
    };
    let filled = (fraction * WIDTH as f64).round() as usize;
    let eta = if progress.rate > 0.0 {
        format!(
            ", ETA {:.0} s",
            (total - progress.published).max(0) as f64 / progress.rate
        )
    } else {
        String::new()
    };
    format!(
        "[{}{}] {:>3.0}% {} of {} events · {:.0} events/s{eta}",
        "#".repeat(filled),
        ".".repeat(WIDTH - filled),
        fraction * 100.0,
        progress.published,
        total,
        progress.rate,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_line_fills_with_the_published_share() {
        let line = progress_line(&Progress {
            published: 50,
            total: 100,
            rate: 10.0,
        });
        assert!(
            line.starts_with(&format!("[{}{}]", "#".repeat(15), ".".repeat(15))),
            "{line}"
        );
        assert!(
            line.contains(" 50% 50 of 100 events · 10 events/s, ETA 5 s"),
            "{line}"
        );
    }
}
