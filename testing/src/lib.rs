//! Tooling for tests and benchmarks: scratch databases, topics, bulk seeding, and the
//! timing of a reassignment run's pages. The test harness (`tests/`) and `ledger-bench`
//! (`bench/`) share it, so neither writes its own; the `ledger` binary does not depend on
//! it, so no build of the product carries it.
//!
//! - [`ScratchDatabase`]: a migrated database for one test or benchmark, dropped with its
//!   slots.
//! - [`create_topics`], [`delete_topics`]: the relay's topics under a prefix of one run.
//! - [`seed_assignments`], [`primary_contact`]: bulk seeding, below the command path.
//! - [`max_pages_in_flight`], [`page_timing`]: a reassignment run's pages, read back.
//! - [`debezium`]: Debezium beside the relay, for the peers benchmark and its test.

pub mod debezium;

use std::time::Duration;

use deadpool_postgres::Pool;
use ra_ledger_cdc::config::RelayConfig;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use uuid::Uuid;

use ra_ledger::db::{self, DbError};
use ra_ledger::domain::{ASSIGNMENT_AGGREGATE, Jurisdiction, registration_id};
use ra_ledger::error::CommandError;
use ra_ledger::events;
use ra_ledger::store::{self, Metadata, NewEvent, StreamAppend};
use ra_ledger::topics::{Outcome, TopicError, TopicSpec};

/// Why a piece of tooling failed.
#[derive(Debug, thiserror::Error)]
pub enum TestingError {
    /// Connecting failed.
    #[error(transparent)]
    Connect(#[from] DbError),
    /// A statement failed.
    #[error("database: {}", ra_ledger::db::describe(.0))]
    Database(#[from] tokio_postgres::Error),
    /// Migrating the scratch database failed.
    #[error(transparent)]
    Migrate(#[from] ra_ledger::migrate::MigrateError),
    /// Creating a database or a topic was refused.
    #[error("{0}")]
    Refused(String),
    /// Kafka failed.
    #[error("Kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// A command failed.
    #[error(transparent)]
    Command(#[from] CommandError),
}

/// A database that exists for one test or benchmark, next to the one an admin URL names
/// (the role needs CREATEDB), dropped by [`ScratchDatabase::drop`] with its slots. A clone
/// names the same database: dropping it twice is harmless.
#[derive(Debug, Clone)]
pub struct ScratchDatabase {
    admin_url: String,
    /// Its name.
    pub name: String,
    /// Its URL.
    pub url: String,
}

impl ScratchDatabase {
    /// Creates a database named `<prefix>_<random>` on the server of `admin_url` and applies
    /// the ledger's migrations to it.
    pub async fn create(admin_url: &str, prefix: &str) -> Result<Self, TestingError> {
        let database = Self::create_empty(admin_url, prefix).await?;
        let mut client = db::connect(&database.url, "ledger-scratch").await?;
        ra_ledger::migrate::run(&mut client).await?;
        Ok(database)
    }

    /// Creates an empty database, without migrations.
    pub async fn create_empty(admin_url: &str, prefix: &str) -> Result<Self, TestingError> {
        let name = format!("{prefix}_{}", Uuid::new_v4().simple());
        let admin = db::connect(admin_url, "ledger-scratch").await?;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .map_err(|error| {
                TestingError::Refused(format!(
                    "cannot create scratch database {name}: {}; the role needs CREATEDB",
                    ra_ledger::db::describe(&error)
                ))
            })?;
        Ok(Self {
            admin_url: admin_url.to_owned(),
            url: db::with_database(admin_url, &name),
            name,
        })
    }

    /// Creates a pgoutput logical replication slot in the database and returns its name,
    /// unique to this database (slot names are cluster-wide) so one that died leaves
    /// nothing in the way of the next.
    pub async fn create_slot(
        &self,
        client: &tokio_postgres::Client,
        purpose: &str,
    ) -> Result<String, TestingError> {
        let slot = format!("{}_{purpose}", self.name);
        client
            .query_one(
                "SELECT 1 FROM pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&slot],
            )
            .await?;
        Ok(slot)
    }

    /// A relay on this database's `slot`, publishing under `topic_prefix` to `brokers`,
    /// without a metrics endpoint.
    /// Kafka security comes from the environment, as for every tool.
    pub fn relay_config(&self, slot: String, topic_prefix: String, brokers: &str) -> RelayConfig {
        let mut kafka =
            ra_ledger_cdc::infra::kafka::KafkaSettings::default().with_brokers(&brokers.into());
        kafka.apply_env();
        RelayConfig {
            database_url: self.url.as_str().into(),
            slot,
            topic_prefix,
            kafka: kafka.properties,
            kafka_secret_files: kafka.secret_files,
            metrics_listen: None,
            ..RelayConfig::default()
        }
    }

    /// Drops the database and its replication slots. A relay still stopping holds its slot
    /// for a moment: it is waited for, then its connection ended.
    /// Dropping one that is gone already does nothing.
    pub async fn drop(self) -> Result<(), TestingError> {
        let admin = db::connect(&self.admin_url, "ledger-scratch").await?;
        let exists = admin
            .query_opt(
                "SELECT 1 FROM pg_database WHERE datname = $1",
                &[&self.name],
            )
            .await?
            .is_some();
        if !exists {
            return Ok(());
        }
        for attempt in 0..100 {
            let active: i64 = admin
                .query_one(include_str!("sql/drop_slots.sql"), &[&self.name])
                .await?
                .get(0);
            if active == 0 {
                break;
            }
            if attempt == 10 {
                admin
                    .execute(
                        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots \
                         WHERE database = $1 AND active_pid IS NOT NULL",
                        &[&self.name],
                    )
                    .await?;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // FORCE cannot end an autovacuum worker for a role without pg_signal_backend; those
        // finish or give way within moments.
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let mut attempts = 0;
        loop {
            match admin.batch_execute(&drop).await {
                Ok(()) => return Ok(()),
                Err(error) if attempts < 50 => {
                    attempts += 1;
                    tracing::debug!(%error, "scratch database busy; retrying the drop");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(error) => {
                    return Err(TestingError::Refused(format!(
                        "cannot drop scratch database {}: {}; drop it by hand",
                        self.name,
                        ra_ledger::db::describe(&error)
                    )));
                }
            }
        }
    }
}

/// A librdkafka configuration for `brokers`, with the environment's Kafka security settings
/// (`LEDGER_KAFKA_SECURITY_PROTOCOL`, ...), as every tool and bench uses.
pub fn kafka_client(brokers: &str) -> Result<rdkafka::ClientConfig, TestingError> {
    ra_ledger_cdc::infra::kafka::KafkaSettings::from_env(brokers)
        .and_then(|settings| settings.client_config())
        .map_err(|error| TestingError::Refused(error.to_string()))
}

/// A Kafka admin client for `brokers`.
pub fn admin_client(brokers: &str) -> Result<AdminClient<DefaultClientContext>, TestingError> {
    Ok(kafka_client(brokers)?.create()?)
}

/// Creates `topics` with `partitions` partitions each on `brokers`.
pub async fn create_topics(
    brokers: &str,
    topics: &[String],
    partitions: i32,
) -> Result<(), TestingError> {
    create_topics_with(kafka_client(brokers)?, topics, partitions).await
}

/// Creates `topics` with `partitions` partitions each (replicated as the cluster allows,
/// with the matching `min.insync.replicas`, as `ledger topics create` does; the broker's
/// defaults for the rest), with a client made of `config`; one that exists already is an
/// error.
pub async fn create_topics_with(
    config: rdkafka::ClientConfig,
    topics: &[String],
    partitions: i32,
) -> Result<(), TestingError> {
    let specs: Vec<TopicSpec> = topics
        .iter()
        .map(|topic| TopicSpec::plain(topic, partitions))
        .collect();
    let created =
        ra_ledger::topics::create(&config, &specs)
            .await
            .map_err(|error| match error {
                TopicError::Kafka(error) => TestingError::Kafka(error),
                error => TestingError::Refused(error.to_string()),
            })?;
    for (spec, outcome) in created.topics {
        if outcome == Outcome::Existed {
            let code = rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists;
            return Err(TestingError::Refused(format!(
                "cannot create topic {}: {code}",
                spec.name
            )));
        }
    }
    Ok(())
}

/// Deletes every topic on `brokers` whose name starts with `prefix`: what a benchmark made,
/// with its data, so that runs do not pile up on the broker (each 1,000,000-row `ledger-bench
/// relay` left about 1.2 GB).
pub async fn delete_topics(brokers: &str, prefix: &str) -> Result<(), TestingError> {
    delete_topics_with(kafka_client(brokers)?, prefix).await
}

/// [`delete_topics`] with a client made of `config`.
pub async fn delete_topics_with(
    mut config: rdkafka::ClientConfig,
    prefix: &str,
) -> Result<(), TestingError> {
    use rdkafka::admin::AdminOptions;
    if prefix.is_empty() {
        return Err(TestingError::Refused(
            "deleting topics by prefix needs a prefix".into(),
        ));
    }
    let admin: AdminClient<DefaultClientContext> = config.set("log_level", "3").create()?;
    let metadata = admin
        .inner()
        .fetch_metadata(None, Duration::from_secs(10))?;
    let names: Vec<&str> = metadata
        .topics()
        .iter()
        .map(|topic| topic.name())
        .filter(|name| name.starts_with(prefix))
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin.delete_topics(&names, &options).await? {
        if let Err((topic, code)) = result {
            return Err(TestingError::Refused(format!(
                "cannot delete topic {topic}: {code}"
            )));
        }
    }
    Ok(())
}

/// Assigns `count` new businesses to `contact_id` in `jurisdiction` through the real write
/// path (events, outbox rows, projections), `per_transaction` per transaction, calling
/// `progress(done)` after each. Returns the business ids. It takes no primary-contact lock:
/// it is for seeding, not for running beside a supersede.
pub async fn seed_assignments(
    pool: &Pool,
    jurisdiction: Jurisdiction,
    contact_id: Uuid,
    count: usize,
    per_transaction: usize,
    mut progress: impl FnMut(usize),
) -> Result<Vec<Uuid>, TestingError> {
    let metadata = Metadata {
        actor: "seed".into(),
        correlation_id: Uuid::now_v7(),
        causation_id: None,
        traceparent: None,
    };
    let mut businesses = Vec::with_capacity(count);
    let mut client = pool.get().await.map_err(CommandError::from)?;
    while businesses.len() < count {
        let batch = per_transaction.max(1).min(count - businesses.len());
        let tx = client.transaction().await?;
        // The streams are new by construction (fresh business ids).
        let heads = store::read_heads(&tx, &[]).await?;
        let appends: Vec<StreamAppend> = (0..batch)
            .map(|_| {
                let business_id = Uuid::now_v7();
                businesses.push(business_id);
                let started = events::assignment_started(
                    Uuid::now_v7(),
                    business_id,
                    jurisdiction,
                    contact_id,
                    None,
                );
                StreamAppend {
                    aggregate_type: ASSIGNMENT_AGGREGATE,
                    aggregate_id: registration_id(business_id, jurisdiction),
                    expected_version: Some(0),
                    events: vec![NewEvent::new(started, heads.now)],
                }
            })
            .collect();
        ra_ledger::write::record(&tx, &appends, &heads, &metadata).await?;
        tx.commit().await?;
        progress(businesses.len());
    }
    Ok(businesses)
}

/// Creates the first primary contact of `code` through the ledger, with a placeholder
/// address in that jurisdiction; returns its id.
pub async fn primary_contact(
    ledger: &ra_ledger::commands::Ledger,
    code: &str,
    metadata: &Metadata,
) -> Result<Uuid, CommandError> {
    let contact = ledger
        .create_contact(
            ra_ledger::commands::CreateContact {
                jurisdiction: code.into(),
                name: format!("Agents of {code}"),
                address: ra_ledger::domain::PostalAddress {
                    line1: "1 Main St".into(),
                    line2: String::new(),
                    city: "Capital".into(),
                    region: code.into(),
                    postal_code: "00001".into(),
                },
                effective_at: None,
            },
            metadata,
        )
        .await?;
    Ok(contact.contact_id)
}

/// Most page transactions of one run that were open at the same time, from the pages'
/// recorded transaction intervals (the fence makes anything but 1 impossible).
pub async fn max_pages_in_flight(
    client: &tokio_postgres::Client,
    run_id: Uuid,
) -> Result<i64, TestingError> {
    Ok(client
        .query_one(include_str!("sql/max_pages_in_flight.sql"), &[&run_id])
        .await?
        .get(0))
}

/// Where a run's time went: inside page transactions, and between them (relay, broker and
/// worker carrying the next request).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PageTiming {
    /// Sum of the page transactions' durations, seconds.
    pub in_pages: f64,
    /// Mean time from one page's end to the next page's start, seconds.
    pub mean_gap: f64,
    /// Longest such gap, seconds.
    pub max_gap: f64,
}

/// The run's [`PageTiming`].
pub async fn page_timing(
    client: &tokio_postgres::Client,
    run_id: Uuid,
) -> Result<PageTiming, TestingError> {
    let row = client
        .query_one(include_str!("sql/page_timing.sql"), &[&run_id])
        .await?;
    Ok(PageTiming {
        in_pages: row.get(0),
        mean_gap: row.get(1),
        max_gap: row.get(2),
    })
}
