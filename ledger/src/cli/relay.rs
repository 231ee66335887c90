//! `ledger relay`: the CDC relay, the grants of its role, and its parked messages.

use ra_ledger::{db, migrate};
use ra_ledger_cdc::config::{DeliveryMode, RelayConfig};
use ra_ledger_cdc::infra::settings::{Settings, env};
use ra_ledger_cdc::parking::{self, Republished};
use ra_ledger_cdc::relay::should_retry;

use super::{DatabaseArg, refused};

/// Arguments of `ledger relay`.
#[derive(Debug, clap::Args)]
pub struct RelayArgs {
    /// TOML file with relay settings (see docs/operators.md); defaults suit the local stack.
    #[arg(long, env = env::RELAY_CONFIG)]
    config: Option<String>,
    /// `exactly_once` or `at_least_once`; overrides the file and LEDGER_RELAY_DELIVERY
    /// (docs/exactly-once.md).
    #[arg(long, value_parser = ra_ledger::command_line::parse_delivery)]
    delivery: Option<DeliveryMode>,
    #[command(subcommand)]
    command: Option<RelayCommand>,
}

#[derive(Debug, clap::Subcommand)]
pub enum RelayCommand {
    /// Grant a LOGIN REPLICATION role the least the relay needs in the ledger database.
    Grant {
        /// The role the relay connects as.
        role: String,
    },
    /// After the relay stopped on a lost, invalidated or disagreeing slot (a failover
    /// without failover slots, a restore, a drop): create the slot anew and publish the
    /// outbox rows still kept, at least once, before the relay resumes from the new slot
    /// (docs/operators.md, "Failover"). Stop the relay first.
    Recover {
        /// Also publish the ledger's events recorded at or after this time (RFC 3339) that
        /// retention already removed from the outbox (needs SELECT on events).
        #[arg(long, value_parser = parse_time)]
        events_since: Option<chrono::DateTime<chrono::Utc>>,
    },
    /// Register events.proto under the subject of every topic the config frames for
    /// registries (`value_formats` set to `confluent_protobuf`), setting the subject's
    /// compatibility to BACKWARD_TRANSITIVE only where it has no level of its own: for a
    /// platform team's CI, with registry credentials that may write, so that the relay
    /// runs with read-only ones (it then only looks its ids up). Prints each subject's id.
    Register,
    /// Messages Kafka refused for good, parked by the relay.
    Parked {
        #[command(subcommand)]
        command: ParkedCommand,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum ParkedCommand {
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

/// Runs `ledger relay` or one of its subcommands. A configuration that cannot work, and an
/// error the relay stopped on ([`should_retry`] false), are [`refused`]: only an operator
/// mends them. Every other error the relay rides out by reconnecting.
pub async fn run(database: &DatabaseArg, args: RelayArgs) -> anyhow::Result<()> {
    let mut config = RelayConfig::read(args.config.as_deref()).map_err(refused)?;
    if let Some(delivery) = args.delivery {
        config.delivery = delivery;
    }
    if database.explicit {
        config.database_url = database.url.as_str().into();
    }
    config.resolve_secrets().map_err(refused)?;
    config.validate().map_err(refused)?;
    match args.command {
        None => ra_ledger_cdc::relay::run_process(config)
            .await
            .map_err(|error| {
                if should_retry(&error) {
                    error.into()
                } else {
                    refused(error)
                }
            }),
        Some(RelayCommand::Parked { command }) => parked(&config, command).await,
        Some(RelayCommand::Register) => register(&config).await,
        Some(RelayCommand::Recover { events_since }) => {
            let options = ra_ledger_cdc::relay::recover::RecoverOptions { events_since };
            let recovered = ra_ledger_cdc::relay::recover::recover(&config, &options).await?;
            outln!(
                "slot {} created at {}{}; published again, at least once: {} outbox rows, {} events; parked {}; the relay's position written there",
                config.slot,
                recovered.consistent_point,
                if recovered.dropped_slot {
                    " (the old slot was dropped)"
                } else {
                    ""
                },
                recovered.outbox_rows,
                recovered.events,
                recovered.parked,
            );
            outln!("start the relay: it streams from the new slot");
            Ok(())
        }
        Some(RelayCommand::Grant { role }) => {
            let client = db::connect(&database.url, "ledger-grant").await?;
            migrate::grant_relay_role(&client, &role).await?;
            outln!(
                "granted {role} SELECT on outbox, SELECT, INSERT, UPDATE on outbox_parked, SELECT, INSERT and UPDATE of its registration's columns on relay_slots, SELECT, INSERT, UPDATE on relay_lag_reports and SELECT, INSERT on relay_schema_ids"
            );
            Ok(())
        }
    }
}

/// `ledger relay register`: a registry that refuses (credentials, rights, an incompatible
/// schema) is [`refused`]; one that does not answer is an error to try again.
async fn register(config: &RelayConfig) -> anyhow::Result<()> {
    let registered = ra_ledger_cdc::registry::register_all(config)
        .await
        .map_err(|error| {
            if error.is_transient() {
                anyhow::Error::from(error)
            } else {
                refused(error)
            }
        })?;
    if registered.is_empty() {
        return Err(refused(anyhow::anyhow!(
            "no topic is framed for registries: value_formats (LEDGER_VALUE_FORMATS) sets confluent_protobuf for none, so there is nothing to register"
        )));
    }
    for subject in registered {
        let level = match &subject.kept_level {
            Some(level) => format!("its compatibility {level} left as set"),
            None => format!(
                "compatibility {} set (it had none of its own)",
                ra_ledger_cdc::registry::COMPATIBILITY
            ),
        };
        outln!(
            "subject {}: events.proto is schema id {}; {level}",
            subject.subject,
            subject.schema_id
        );
    }
    Ok(())
}

/// `--events-since`'s values.
fn parse_time(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|time| time.to_utc())
        .map_err(|error| format!("expected an RFC 3339 time such as 2026-03-01T00:00:00Z: {error}"))
}

async fn parked(config: &RelayConfig, command: ParkedCommand) -> anyhow::Result<()> {
    let client = db::connect(&config.database_url, "ledger-relay-parked").await?;
    match command {
        ParkedCommand::List { all } => {
            let parked = parking::list(&client, all).await?;
            outln!("{}", serde_json::to_string_pretty(&parked)?);
            eprintln!("{} parked message(s)", parked.len());
            Ok(())
        }
        ParkedCommand::Republish { id } => {
            let producer = ra_ledger_cdc::publish::producer(config)?;
            let outcomes = parking::republish(&client, &producer, id).await?;
            let mut refused = 0;
            for outcome in &outcomes {
                match outcome {
                    Republished::Sent { id } => {
                        outln!("parked #{id}: republished")
                    }
                    Republished::Refused { id, error } => {
                        refused += 1;
                        outln!("parked #{id}: still refused: {error}");
                    }
                }
            }
            if let Some(id) = id
                && outcomes.is_empty()
            {
                anyhow::bail!("no pending parked message with id {id}");
            }
            if refused > 0 {
                anyhow::bail!(
                    "{refused} message(s) still refused; fix the cause (topic, size limit) and retry"
                );
            }
            Ok(())
        }
    }
}
