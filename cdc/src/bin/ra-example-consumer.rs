//! An example consumer: builds "current RA per business and jurisdiction" from the ledger's
//! Kafka topics into its own PostgreSQL database, applying each event once.
//!
//! ```sh
//! ra-example-consumer --database-url postgres://… --brokers 127.0.0.1:19092          # follow
//! ra-example-consumer --database-url postgres://… --brokers 127.0.0.1:19092 --replay # rebuild from the beginning
//! ra-example-consumer --database-url postgres://… --bootstrap <replay id>             # join late
//! ```
//!
//! `--bootstrap` reads the replay topic of the assignment topic (`ledger replay`) from the
//! beginning until every partition delivered its completion marker, then the live topic from
//! the marker's handoff offsets, applying every event once through the inbox either way. It
//! keeps what the consumer already applied: a second bootstrap, or one after a crash, only
//! finds duplicates. `--replay-topic` names the replay topic when it is not the default
//! `<live topic>.replay.<replay id>`.
//!
//! `CONSUMER_DATABASE_PASSWORD_FILE` names a file holding the database password; Kafka TLS
//! and SASL come from the same `LEDGER_KAFKA_*` variables as the relay's and the worker's.

use std::sync::Arc;

use anyhow::Context;
use ra_ledger_cdc::consumer::example::{self, ExampleArgs};
use ra_ledger_cdc::infra::settings::{DatabaseUrl, env};
use tokio_util::sync::CancellationToken;

fn args() -> anyhow::Result<ExampleArgs> {
    let mut args = ExampleArgs::new(&env::read(env::CONSUMER_DATABASE_URL).unwrap_or_default());
    let mut iter = std::env::args().skip(1);
    while let Some(flag) = iter.next() {
        let mut value = |name: &str| iter.next().with_context(|| format!("{name} needs a value"));
        match flag.as_str() {
            "--database-url" => args.database_url = value("--database-url")?,
            "--brokers" => args.brokers = value("--brokers")?,
            "--topic-prefix" => args.topic_prefix = value("--topic-prefix")?,
            "--group" => args.group = value("--group")?,
            "--replay" => args.replay = true,
            "--bootstrap" => args.bootstrap = Some(value("--bootstrap")?),
            "--replay-topic" => args.replay_topic = Some(value("--replay-topic")?),
            other => anyhow::bail!("unknown argument {other:?}; see the module docs for usage"),
        }
    }
    anyhow::ensure!(
        !(args.replay && args.bootstrap.is_some()),
        "--replay and --bootstrap exclude each other"
    );
    anyhow::ensure!(
        !args.database_url.is_empty(),
        "--database-url (or CONSUMER_DATABASE_URL) is required"
    );
    // The password from a file rather than the URL, as every process of the project.
    let password_file = env::read_path(env::CONSUMER_DATABASE_PASSWORD_FILE);
    args.database_url = DatabaseUrl::from(args.database_url)
        .with_password_file(password_file.as_deref())?
        .expose()
        .to_owned();
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = args()?;
    let shutdown = CancellationToken::new();
    ra_ledger_cdc::infra::runtime::cancel_on_signal(shutdown.clone());
    example::run(args, Arc::default(), shutdown).await
}
