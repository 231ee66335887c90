//! The `ledger` command: migrations, the ledger service, verification, projection rebuilds
//! and audit queries.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand};
use ra_ledger::api::{self, AppState, CursorKey, Tokens};
use ra_ledger::commands::Ledger;
use ra_ledger::domain::{self, Jurisdiction};
use ra_ledger::{bench, db, health, migrate, queries, rebuild, verify};
use uuid::Uuid;

/// Default database of the local stack (`deploy/stack up`).
const DEFAULT_DATABASE_URL: &str = "postgres://ledger:ledger@127.0.0.1:54329/ledger";

#[derive(Debug, Parser)]
#[command(
    name = "ledger",
    version,
    about = "RA Ledger: registered-agent contacts and assignments as an append-only ledger"
)]
struct Cli {
    /// PostgreSQL URL of the ledger database.
    #[arg(long, env = "LEDGER_DATABASE_URL", default_value = DEFAULT_DATABASE_URL, global = true, hide_env_values = true)]
    database_url: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply pending schema migrations (safe to run twice, and from two processes at once).
    Migrate {
        /// Only list the migrations embedded in this binary.
        #[arg(long)]
        list: bool,
    },
    /// Run the ledger HTTP service; applies migrations first.
    Serve {
        /// Address to listen on.
        #[arg(long, env = "LEDGER_LISTEN", default_value = "127.0.0.1:18080")]
        listen: SocketAddr,
        /// Maximum PostgreSQL connections in the pool.
        #[arg(long, env = "LEDGER_POOL_SIZE", default_value_t = 16)]
        pool_size: usize,
        /// Bearer tokens, `role:name:token` separated by commas; role is writer or auditor.
        #[arg(long, env = "LEDGER_TOKENS", hide_env_values = true)]
        tokens: String,
        /// Secret that signs history cursors; random per process when unset (cursors then
        /// do not survive a restart).
        #[arg(long, env = "LEDGER_CURSOR_KEY", hide_env_values = true)]
        cursor_key: Option<String>,
        /// Longest a command waits for a lock another transaction holds before it answers
        /// 409 conflict (milliseconds).
        #[arg(long, env = "LEDGER_LOCK_TIMEOUT_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
        lock_timeout_ms: u64,
    },
    /// Recompute every stream's hash chain; exits 1 and names the first broken link.
    Verify,
    /// Projection maintenance.
    Projections {
        #[command(subcommand)]
        command: ProjectionsCommand,
    },
    /// Run the CDC relay: outbox rows from the WAL to Kafka, in commit order.
    Relay {
        /// TOML file with relay settings (see README); defaults suit the local stack.
        #[arg(long, env = "LEDGER_RELAY_CONFIG")]
        config: Option<String>,
        #[command(subcommand)]
        command: Option<RelayCommand>,
    },
    /// Run the reassignment worker: processes the chained pages of supersede runs.
    Worker {
        /// Kafka bootstrap servers.
        #[arg(long, env = "LEDGER_KAFKA_BROKERS", default_value = "127.0.0.1:19092")]
        brokers: String,
        /// The reassignment topic.
        #[arg(
            long,
            env = "LEDGER_REASSIGNMENT_TOPIC",
            default_value = "outbox.event.reassignment"
        )]
        topic: String,
        /// Consumer group shared by every worker.
        #[arg(
            long,
            env = "LEDGER_WORKER_GROUP",
            default_value = "ra-ledger-reassignment"
        )]
        group: String,
        /// Whole-page attempts before a failing page runs row by row.
        #[arg(long, env = "LEDGER_WORKER_MAX_ATTEMPTS", default_value_t = ra_ledger::reassign::DEFAULT_MAX_ATTEMPTS, value_parser = clap::value_parser!(u32).range(1..=100))]
        max_attempts: u32,
        /// Where to serve /metrics; empty to disable.
        #[arg(
            long,
            env = "LEDGER_WORKER_METRICS_LISTEN",
            default_value = "127.0.0.1:19101"
        )]
        metrics_listen: String,
        /// Other librdkafka consumer settings, `key=value`; repeatable.
        #[arg(long = "kafka", value_parser = parse_key_value)]
        kafka: Vec<(String, String)>,
    },
    /// Reassignment runs: progress, live watch, re-runs.
    Runs {
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// Walk through a supersede on the local stack: seed, supersede, watch, audit, Kafka.
    Demo(ra_ledger::demo::DemoOptions),
    /// Print throughput and latency figures, measured in a scratch database.
    Bench {
        #[command(subcommand)]
        benchmark: BenchCommand,
    },
    /// Audit questions, answered from the projections.
    Audit {
        #[command(subcommand)]
        question: AuditCommand,
    },
}

#[derive(Debug, Subcommand)]
enum RunsCommand {
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

#[derive(Debug, Subcommand)]
enum ProjectionsCommand {
    /// Replay the ledger into fresh tables and swap them in (commands wait meanwhile).
    Rebuild {
        /// Compare the rebuilt tables with the live ones instead of swapping; exits 1 on a
        /// difference.
        #[arg(long)]
        verify: bool,
    },
}

#[derive(Debug, Subcommand)]
enum RelayCommand {
    /// Grant a LOGIN REPLICATION role the least the relay needs in the ledger database.
    Grant {
        /// The role the relay connects as.
        role: String,
    },
    /// Messages Kafka refused for good, parked by the relay.
    Parked {
        #[command(subcommand)]
        command: ParkedCommand,
    },
}

#[derive(Debug, Subcommand)]
enum ParkedCommand {
    /// List parked messages (not yet re-published, unless --all).
    List {
        /// Include re-published ones.
        #[arg(long)]
        all: bool,
    },
    /// Re-publish parked messages with their original key and headers.
    Republish {
        /// Only this parked row id; default every pending one.
        #[arg(long)]
        id: Option<i64>,
    },
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Assignments per second through the ledger's write path vs raw INSERTs of the same rows.
    Write {
        /// Assignments per round and path.
        #[arg(long, default_value_t = 5_000)]
        rows: usize,
        /// Concurrent writers.
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
        /// Alternating rounds (ledger, raw, ledger, raw, ...).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Relay throughput draining an outbox backlog, against pg_recvlogical and rdkafka alone.
    Relay {
        /// Outbox rows in the backlog.
        #[arg(long, default_value_t = 1_000_000)]
        rows: u64,
        /// Rows per transaction.
        #[arg(long, default_value_t = 100)]
        per_transaction: u64,
        /// Kafka bootstrap servers.
        #[arg(long, env = "LEDGER_KAFKA_BROKERS", default_value = "127.0.0.1:19092")]
        brokers: String,
    },
    /// Commit → consumer receipt latency under a steady load through the relay.
    Latency {
        /// Events per second.
        #[arg(long, default_value_t = 2_000)]
        rate: u64,
        /// Duration in seconds.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Kafka bootstrap servers.
        #[arg(long, env = "LEDGER_KAFKA_BROKERS", default_value = "127.0.0.1:19092")]
        brokers: String,
    },
    /// Supersede a contact with many active assignments: chained pages vs one transaction.
    Reassign {
        /// Active assignments to move.
        #[arg(long, default_value_t = 50_000)]
        rows: usize,
        /// Rows per page.
        #[arg(long, default_value_t = ra_ledger::reassign::DEFAULT_PAGE_SIZE)]
        page_size: u32,
        /// Workers in the consumer group (a run still has one page in flight).
        #[arg(long, default_value_t = 2)]
        workers: usize,
        /// Kafka bootstrap servers.
        #[arg(long, env = "LEDGER_KAFKA_BROKERS", default_value = "127.0.0.1:19092")]
        brokers: String,
    },
    /// As-of query latency (p50/p99) over a large assignment history.
    AsOf {
        /// Assignment history rows to seed.
        #[arg(long, default_value_t = 1_000_000)]
        history_rows: usize,
        /// Queries to time.
        #[arg(long, default_value_t = 20_000)]
        queries: usize,
    },
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
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
        /// Only what the ledger had recorded by then (RFC 3339); defaults to now.
        #[arg(long, value_parser = parse_instant)]
        known_at: Option<DateTime<Utc>>,
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

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(format!("{text:?} is not key=value")),
    }
}

fn parse_instant(text: &str) -> Result<DateTime<Utc>, String> {
    let time: DateTime<Utc> = text
        .parse()
        .map_err(|error| format!("not an RFC 3339 time: {error}"))?;
    domain::instant("time", time).map_err(|error| error.reason)
}

fn parse_jurisdiction(code: &str) -> Result<Jurisdiction, String> {
    Jurisdiction::parse("jurisdiction", code).map_err(|error| error.reason)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let matches = <Cli as clap::CommandFactory>::command().get_matches();
    let explicit_database_url = matches
        .value_source("database_url")
        .is_some_and(|source| source != clap::parser::ValueSource::DefaultValue);
    let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches)?;
    match cli.command {
        Command::Relay { config, command } => {
            let mut relay_config = ra_ledger_cdc::config::RelayConfig::load(config.as_deref())?;
            if explicit_database_url {
                relay_config.database_url = cli.database_url.clone();
            }
            match command {
                None => Ok(ra_ledger_cdc::relay::run_process(relay_config).await?),
                Some(RelayCommand::Parked { command }) => parked(&relay_config, command).await,
                Some(RelayCommand::Grant { role }) => {
                    let client = db::connect(&cli.database_url, "ledger-grant").await?;
                    migrate::grant_relay_role(&client, &role).await?;
                    println!(
                        "granted {role} SELECT on outbox and SELECT, INSERT, UPDATE on outbox_parked"
                    );
                    Ok(())
                }
            }
        }
        Command::Migrate { list: true } => {
            for name in migrate::embedded() {
                println!("{name}");
            }
            Ok(())
        }
        Command::Migrate { list: false } => migrate_database(&cli.database_url).await,
        Command::Serve {
            listen,
            pool_size,
            tokens,
            cursor_key,
            lock_timeout_ms,
        } => {
            let tokens = Tokens::parse(&tokens)?;
            if tokens.is_empty() {
                bail!(
                    "LEDGER_TOKENS configures no token; set e.g. writer:cs-tool:<secret>,auditor:audit:<secret>"
                );
            }
            let cursor_key = match cursor_key {
                Some(key) if key.len() >= 16 => CursorKey::new(key.as_bytes()),
                Some(_) => bail!("LEDGER_CURSOR_KEY must be at least 16 characters"),
                None => {
                    tracing::warn!(
                        "LEDGER_CURSOR_KEY is not set; history cursors will not survive a restart"
                    );
                    CursorKey::random()
                }
            };
            let settings = ServeSettings {
                listen,
                pool_size,
                tokens,
                cursor_key,
                lock_timeout: std::time::Duration::from_millis(lock_timeout_ms),
            };
            serve(&cli.database_url, settings).await
        }
        Command::Verify => {
            let client = db::connect(&cli.database_url, "ledger-verify").await?;
            let report =
                verify::verify(&client, |done| eprintln!("verified {done} events…")).await?;
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
        Command::Projections {
            command: ProjectionsCommand::Rebuild { verify },
        } => {
            let mut client = db::pool(&cli.database_url, "ledger-rebuild", 1)?
                .get()
                .await?;
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
        Command::Audit { question } => audit(&cli.database_url, question).await,
        Command::Worker {
            brokers,
            topic,
            group,
            max_attempts,
            metrics_listen,
            kafka,
        } => {
            let metrics_listen = match metrics_listen.trim() {
                "" => None,
                text => Some(text.parse::<SocketAddr>().map_err(|error| {
                    anyhow::anyhow!("LEDGER_WORKER_METRICS_LISTEN {text:?}: {error}")
                })?),
            };
            ra_ledger::worker::run_process(ra_ledger::worker::WorkerConfig {
                database_url: cli.database_url.clone(),
                brokers,
                topic,
                group_id: group,
                max_attempts,
                metrics_listen,
                kafka: kafka.into_iter().collect(),
                ..Default::default()
            })
            .await?;
            Ok(())
        }
        Command::Runs { command } => runs(&cli.database_url, command).await,
        Command::Demo(options) => ra_ledger::demo::run(&cli.database_url, options).await,
        Command::Bench {
            benchmark:
                BenchCommand::Reassign {
                    rows,
                    page_size,
                    workers,
                    brokers,
                },
        } => {
            ra_ledger::reassign::page_size(Some(page_size))?;
            if rows == 0 || workers == 0 {
                bail!("--rows and --workers must be at least 1");
            }
            let f = bench::reassign(&cli.database_url, &brokers, rows, page_size, workers).await?;
            let chained = f.chained_total.as_secs_f64();
            let single = f.single_total.as_secs_f64();
            let longest = f.chained_longest_page.as_secs_f64();
            // Per row: two events, two outbox rows, one projection update, one insert.
            const WRITES_PER_ROW: f64 = 6.0;
            println!("supersede of a contact with {} active assignments", f.rows);
            println!(
                "chained pages of {}: total {chained:.3} s, {} pages, longest page transaction {:.1} ms, most pages in flight {}, {:.0} rows/s ({:.0} row writes/s)",
                f.page_size,
                f.pages,
                longest * 1000.0,
                f.max_pages_in_flight,
                f.rows as f64 / chained,
                f.rows as f64 * WRITES_PER_ROW / chained
            );
            println!(
                "  of which {:.3} s inside page transactions; between pages (relay, broker, worker) mean {:.1} ms, max {:.1} ms",
                f.timing.in_pages,
                f.timing.mean_gap * 1000.0,
                f.timing.max_gap * 1000.0
            );
            println!(
                "one transaction: {single:.3} s, {:.0} rows/s ({:.0} row writes/s)",
                f.rows as f64 / single,
                f.rows as f64 * WRITES_PER_ROW / single
            );
            println!(
                "chained total / single = {:.2} (target <= 1.5); longest page / single = 1/{:.0} (target <= 1/20); pages in flight {} (must be 1)",
                chained / single,
                single / longest.max(1e-9),
                f.max_pages_in_flight
            );
            Ok(())
        }
        Command::Bench {
            benchmark:
                BenchCommand::Write {
                    rows,
                    concurrency,
                    rounds,
                },
        } => {
            if rows == 0 || concurrency == 0 || rounds == 0 {
                bail!("--rows, --concurrency and --rounds must be at least 1");
            }
            println!(
                "write path: {rows} assignments per round, {concurrency} concurrent writers, one transaction each"
            );
            let results = bench::write(&cli.database_url, rows, concurrency, rounds).await?;
            for (round, result) in results.iter().enumerate() {
                println!(
                    "round {}: ledger {:.0}/s, raw INSERTs {:.0}/s, ratio {:.2}",
                    round + 1,
                    result.ledger_per_second,
                    result.raw_per_second,
                    result.ledger_per_second / result.raw_per_second
                );
            }
            let ledger: f64 =
                results.iter().map(|r| r.ledger_per_second).sum::<f64>() / results.len() as f64;
            let raw: f64 =
                results.iter().map(|r| r.raw_per_second).sum::<f64>() / results.len() as f64;
            println!(
                "mean: ledger {ledger:.0}/s, raw {raw:.0}/s, ratio {:.2} (target >= 0.70)",
                ledger / raw
            );
            Ok(())
        }
        Command::Bench {
            benchmark:
                BenchCommand::Latency {
                    rate,
                    seconds,
                    brokers,
                },
        } => {
            if rate == 0 || seconds == 0 {
                bail!("--rate and --seconds must be at least 1");
            }
            let figures = bench::latency(&cli.database_url, &brokers, rate, seconds).await?;
            println!(
                "steady load {rate} events/s for {seconds} s: {} sent, {} received; commit -> consumer receipt {} (target p99 <= 50 ms)",
                figures.sent, figures.latencies.count, figures.latencies
            );
            Ok(())
        }
        Command::Bench {
            benchmark:
                BenchCommand::Relay {
                    rows,
                    per_transaction,
                    brokers,
                },
        } => {
            if rows == 0 || per_transaction == 0 {
                bail!("--rows and --per-transaction must be at least 1");
            }
            let figures = bench::relay(&cli.database_url, &brokers, rows, per_transaction).await?;
            let ceiling = figures.slot_ceiling.min(figures.broker_ceiling);
            println!(
                "backlog: {} outbox rows, {per_transaction} per transaction",
                figures.rows
            );
            println!(
                "slot ceiling   (pg_recvlogical to /dev/null): {:.0} rows/s",
                figures.slot_ceiling
            );
            println!(
                "broker ceiling (rdkafka alone, same messages): {:.0} rows/s",
                figures.broker_ceiling
            );
            println!(
                "relay          (slot -> Kafka, acknowledged): {:.0} rows/s",
                figures.relay
            );
            println!(
                "relay / lower ceiling = {:.2} (target >= 0.80)",
                figures.relay / ceiling
            );
            Ok(())
        }
        Command::Bench {
            benchmark:
                BenchCommand::AsOf {
                    history_rows,
                    queries,
                },
        } => {
            if queries == 0 {
                bail!("--queries must be at least 1");
            }
            eprintln!("seeding {history_rows} assignment history rows…");
            let figures = bench::as_of(&cli.database_url, history_rows, queries).await?;
            println!(
                "as-of query over {} history rows, {} queries: {} (target p99 <= 2 ms)",
                figures.history_rows, figures.latencies.count, figures.latencies
            );
            Ok(())
        }
    }
}

async fn runs(database_url: &str, command: RunsCommand) -> anyhow::Result<()> {
    use ra_ledger::reassign;
    let pool = db::pool(database_url, "ledger-runs", 1)?;
    match command {
        RunsCommand::Status { run } => {
            let client = pool.get().await?;
            let status = reassign::status(&client, run)
                .await?
                .ok_or_else(|| anyhow::anyhow!("no reassignment run {run}"))?;
            println!("{}", serde_json::to_string_pretty(&status)?);
            Ok(())
        }
        RunsCommand::Watch { run } => {
            let status = ra_ledger::demo::watch(&pool, run).await?;
            if status.failed > 0 {
                println!(
                    "{} row(s) failed; see `ledger runs status {run}`, fix the cause, then `ledger runs start --contact {}`",
                    status.failed, status.old_contact_id
                );
            }
            Ok(())
        }
        RunsCommand::List { contact } => {
            let client = pool.get().await?;
            let ids: Vec<Uuid> = match contact {
                Some(contact) => reassign::runs_of(&client, contact).await?,
                None => client
                    .query(
                        "SELECT run_id FROM reassignment_runs WHERE status = 'running' ORDER BY started_at",
                        &[],
                    )
                    .await?
                    .iter()
                    .map(|row| row.get(0))
                    .collect(),
            };
            for id in &ids {
                if let Some(status) = reassign::status(&client, *id).await? {
                    println!("{id} {}", reassign::progress_line(&status));
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
                    ra_ledger::commands::StartReassignment { page_size },
                    &ra_ledger::store::Metadata {
                        actor: "cli".into(),
                        correlation_id: Uuid::now_v7(),
                        causation_id: None,
                    },
                )
                .await?;
            println!(
                "started run {} ({} active assignments)",
                run.run_id, run.total_at_start
            );
            Ok(())
        }
        RunsCommand::Resume { run } => {
            let request = reassign::resume(&pool, run).await?;
            println!(
                "re-raised page {} of run {run} after cursor {}",
                request.page,
                request.cursor.map_or("(start)".into(), |c| c.to_string())
            );
            Ok(())
        }
    }
}

async fn parked(
    config: &ra_ledger_cdc::config::RelayConfig,
    command: ParkedCommand,
) -> anyhow::Result<()> {
    let client = db::connect(&config.database_url, "ledger-relay-parked").await?;
    match command {
        ParkedCommand::List { all } => {
            let parked = ra_ledger_cdc::parking::list(&client, all).await?;
            println!("{}", serde_json::to_string_pretty(&parked)?);
            eprintln!("{} parked message(s)", parked.len());
            Ok(())
        }
        ParkedCommand::Republish { id } => {
            let producer = ra_ledger_cdc::publish::producer(config)?;
            let outcomes = ra_ledger_cdc::parking::republish(&client, &producer, id).await?;
            let mut refused = 0;
            for outcome in &outcomes {
                match outcome {
                    ra_ledger_cdc::parking::Republished::Sent { id } => {
                        println!("parked #{id}: republished")
                    }
                    ra_ledger_cdc::parking::Republished::Refused { id, error } => {
                        refused += 1;
                        println!("parked #{id}: still refused: {error}");
                    }
                }
            }
            if let Some(id) = id
                && outcomes.is_empty()
            {
                bail!("no pending parked message with id {id}");
            }
            if refused > 0 {
                bail!(
                    "{refused} message(s) still refused; fix the cause (topic, size limit) and retry"
                );
            }
            Ok(())
        }
    }
}

async fn audit(database_url: &str, question: AuditCommand) -> anyhow::Result<()> {
    let client = db::pool(database_url, "ledger-audit", 1)?.get().await?;
    let json = match question {
        AuditCommand::At {
            business,
            jurisdiction,
            at,
            known_at,
        } => {
            let now = Utc::now();
            let answer = queries::registered_agent_at(
                &client,
                business,
                jurisdiction,
                at.unwrap_or(now),
                known_at.unwrap_or(now),
            )
            .await?;
            serde_json::to_string_pretty(&answer)?
        }
        AuditCommand::During {
            business,
            jurisdiction,
            from,
            to,
        } => {
            if to <= from {
                bail!("--to {to} must be after --from {from}");
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
            let mut all = Vec::new();
            let mut after = None;
            loop {
                let page = queries::assignment_history(&client, business, after, 500).await?;
                let full = page.len() == 500;
                after = page.last().map(|last| queries::HistoryCursor {
                    started_at: last.started_at,
                    assignment_id: last.assignment_id,
                });
                all.extend(page);
                if !full {
                    break;
                }
            }
            serde_json::to_string_pretty(&all)?
        }
    };
    println!("{json}");
    Ok(())
}

async fn migrate_database(database_url: &str) -> anyhow::Result<()> {
    let mut client = db::connect(database_url, "ledger-migrate").await?;
    let report = migrate::run(&mut client).await?;
    let slot =
        std::env::var("LEDGER_RELAY_SLOT").unwrap_or_else(|_| migrate::DEFAULT_RELAY_SLOT.into());
    match migrate::ensure_relay_slot(&client, &slot).await {
        Ok(true) => {
            tracing::info!(%slot, "created the relay's replication slot; the outbox is captured from now on")
        }
        Ok(false) => {}
        Err(error) => tracing::warn!(
            %slot, %error,
            "cannot create the relay's replication slot (does the role have REPLICATION?); \
             outbox rows committed before the relay first runs will not be published"
        ),
    }
    if report.applied.is_empty() {
        tracing::info!("schema is up to date");
    }
    for name in report.applied {
        tracing::info!(migration = %name, "applied");
    }
    Ok(())
}

/// What `ledger serve` runs with.
struct ServeSettings {
    listen: SocketAddr,
    pool_size: usize,
    tokens: Tokens,
    cursor_key: CursorKey,
    lock_timeout: std::time::Duration,
}

async fn serve(database_url: &str, settings: ServeSettings) -> anyhow::Result<()> {
    migrate_database(database_url).await?;
    let pool = db::command_pool(
        database_url,
        "ledger-api",
        settings.pool_size,
        settings.lock_timeout,
    )?;
    let listen = settings.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}; is another ledger running?"))?;
    let state = AppState {
        ledger: Ledger::new(pool.clone()),
        tokens: settings.tokens,
        cursor_key: settings.cursor_key,
    };
    let app = api::router(state).merge(health::router(pool));
    tracing::info!(%listen, "ledger serving");
    api::serve(listener, app, shutdown_signal()).await?;
    tracing::info!("ledger stopped");
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler cannot fail on Unix");
    tokio::select! {
        _ = terminate.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("Ctrl-C received, shutting down"),
    }
}
