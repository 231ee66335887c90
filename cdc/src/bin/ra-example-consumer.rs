//! An example consumer: builds "current RA per business and jurisdiction" from the ledger's
//! Kafka topics into its own PostgreSQL database, applying each event once.
//!
//! ```sh
//! ra-example-consumer --database-url postgres://… --brokers 127.0.0.1:19092          # follow
//! ra-example-consumer --database-url postgres://… --brokers 127.0.0.1:19092 --replay # rebuild from the beginning
//! ```
//!
//! `CONSUMER_DATABASE_PASSWORD_FILE` names a file holding the database password; Kafka TLS
//! and SASL come from the same `LEDGER_KAFKA_*` variables as the relay's and the worker's.

use std::time::Duration;

use anyhow::Context;
use ra_ledger_cdc::consumer::{self, INBOX_SCHEMA, Outcome};
use ra_ledger_proto::v1::envelope::Event;
use rdkafka::Message as _;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};

const CONSUMER: &str = "example-current-ra";

const SCHEMA: &str = include_str!("../sql/example_current_ra.sql");

struct Args {
    database_url: String,
    brokers: String,
    topic_prefix: String,
    group: String,
    replay: bool,
}

fn args() -> anyhow::Result<Args> {
    let mut args = Args {
        database_url: std::env::var("CONSUMER_DATABASE_URL").unwrap_or_default(),
        brokers: "127.0.0.1:19092".into(),
        topic_prefix: "outbox.event.".into(),
        group: CONSUMER.into(),
        replay: false,
    };
    let mut iter = std::env::args().skip(1);
    while let Some(flag) = iter.next() {
        let mut value = |name: &str| iter.next().with_context(|| format!("{name} needs a value"));
        match flag.as_str() {
            "--database-url" => args.database_url = value("--database-url")?,
            "--brokers" => args.brokers = value("--brokers")?,
            "--topic-prefix" => args.topic_prefix = value("--topic-prefix")?,
            "--group" => args.group = value("--group")?,
            "--replay" => args.replay = true,
            other => anyhow::bail!("unknown argument {other:?}; see the module docs for usage"),
        }
    }
    anyhow::ensure!(
        !args.database_url.is_empty(),
        "--database-url (or CONSUMER_DATABASE_URL) is required"
    );
    // The password from a file rather than the URL, as every process of the project.
    let password_file =
        std::env::var_os("CONSUMER_DATABASE_PASSWORD_FILE").map(std::path::PathBuf::from);
    args.database_url =
        ra_ledger_cdc::config::with_password_file(&args.database_url, password_file.as_deref())?;
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = args()?;
    let settings = ra_ledger_cdc::pg::config(&args.database_url, CONSUMER)?;
    let mut client = ra_ledger_cdc::pg::connect(&settings)
        .await
        .map_err(|error| anyhow::anyhow!(ra_ledger_cdc::pg::explain(&error)))?;
    client.batch_execute(INBOX_SCHEMA).await?;
    client.batch_execute(SCHEMA).await?;
    let mut group = args.group.clone();
    if args.replay {
        // Forget everything, and read the topics from the beginning under a new group.
        client
            .execute("DELETE FROM ledger_inbox WHERE consumer = $1", &[&CONSUMER])
            .await?;
        client.batch_execute("TRUNCATE example_current_ra").await?;
        group = format!("{}-replay-{}", args.group, std::process::id());
        eprintln!("replaying from the beginning as group {group}");
    }
    // TLS and SASL from the same LEDGER_KAFKA_* variables as the relay and the worker.
    let kafka: StreamConsumer = ra_ledger_cdc::kafka::KafkaSettings::from_env(&args.brokers)?
        .client_config()?
        .set("group.id", &group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()?;
    kafka.subscribe(&[&format!("{}assignment", args.topic_prefix)])?;
    let (mut applied, mut duplicates) = (0u64, 0u64);
    loop {
        let message = tokio::select! {
            message = kafka.recv() => message?,
            _ = tokio::signal::ctrl_c() => break,
            () = tokio::time::sleep(Duration::from_secs(10)) => {
                eprintln!("idle: {applied} applied, {duplicates} duplicates");
                continue;
            }
        };
        let envelope = consumer::decode(message.payload().unwrap_or_default())?;
        let outcome = consumer::apply_once(&mut client, CONSUMER, &envelope, |tx, envelope| {
            Box::pin(async move {
                let since = chrono::DateTime::from_timestamp_micros(envelope.effective_at_micros)
                    .unwrap_or_default();
                match &envelope.event {
                    Some(Event::AssignmentStarted(started)) => {
                        tx.execute(
                            include_str!("../sql/example_assignment_started.sql"),
                            &[
                                &started.business_id,
                                &started.jurisdiction,
                                &started.assignment_id,
                                &started.contact_id,
                                &since,
                            ],
                        )
                        .await?;
                    }
                    Some(Event::AssignmentEnded(ended)) => {
                        tx.execute(
                            "DELETE FROM example_current_ra WHERE assignment_id = $1",
                            &[&ended.assignment_id],
                        )
                        .await?;
                    }
                    _ => {}
                }
                Ok(())
            })
        })
        .await?;
        match outcome {
            Outcome::Applied => applied += 1,
            Outcome::Duplicate => duplicates += 1,
        }
        // The change committed first; a crash before this commit only causes a duplicate.
        kafka.commit_message(&message, CommitMode::Async)?;
    }
    eprintln!("stopped: {applied} applied, {duplicates} duplicates");
    Ok(())
}
