//! The example consumer (`ra-example-consumer`): builds "current RA per business and
//! jurisdiction" from the ledger's assignment topic into its own PostgreSQL database,
//! applying each event once through the inbox; with `bootstrap`, from a replay first
//! ([`crate::replay`]). The binary parses arguments and calls [`run`]; tests call it too.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::consumer::{self, INBOX_SCHEMA};
use crate::replay;
use ra_ledger_proto::v1::{self, envelope::Event};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::OwnedMessage;
use rdkafka::{Message as _, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

/// The consumer's name in the inbox.
pub const CONSUMER: &str = "example-current-ra";

/// Its table.
pub const SCHEMA: &str = include_str!("../sql/example_current_ra.sql");

/// What to consume, and where to.
#[derive(Debug, Clone)]
pub struct ExampleArgs {
    /// Its own database.
    pub database_url: String,
    /// Kafka bootstrap servers.
    pub brokers: String,
    /// The ledger's topic prefix.
    pub topic_prefix: String,
    /// Consumer group.
    pub group: String,
    /// Forget everything and read the live topic from the beginning.
    pub replay: bool,
    /// Bootstrap from this replay, then the live topic from its handoff.
    pub bootstrap: Option<String>,
    /// The replay topic, when not the default name.
    pub replay_topic: Option<String>,
    /// Other librdkafka settings (the LEDGER_KAFKA_* variables apply too).
    pub kafka: BTreeMap<String, String>,
}

impl ExampleArgs {
    /// Defaults for the local stack, reading into `database_url`.
    pub fn new(database_url: &str) -> Self {
        Self {
            database_url: database_url.to_owned(),
            brokers: crate::infra::settings::local::KAFKA_BROKERS.into(),
            topic_prefix: crate::infra::settings::local::TOPIC_PREFIX.into(),
            group: CONSUMER.into(),
            replay: false,
            bootstrap: None,
            replay_topic: None,
            kafka: BTreeMap::new(),
        }
    }
}

/// Runs the example consumer until `shutdown` (or Ctrl-C); `counts` shows its progress.
pub async fn run(
    args: ExampleArgs,
    counts: Arc<ExampleCounts>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (mut client, group) = prepare_database(&args).await?;
    let kafka = kafka_consumer(&args, &group)?;
    if !start_reading(&args, &kafka, &mut client, &counts, &shutdown).await? {
        eprintln!("stopped during the bootstrap: {counts}");
        return Ok(());
    }
    while let Some(messages) = receive_batch(&kafka, &shutdown, &counts).await? {
        let payloads: Vec<&[u8]> = messages
            .iter()
            .map(|m| m.payload().unwrap_or_default())
            .collect();
        apply_all(&mut client, &payloads, &counts).await?;
        log_traces(&messages);
        // The changes committed first; a crash before this commit only causes duplicates.
        commit_offsets(&kafka, &messages)?;
    }
    eprintln!("stopped: {counts}");
    Ok(())
}

/// Connects to the consumer's own database and creates its tables; with `replay`, forgets
/// everything first. Returns the connection and the consumer group to read as (a new one
/// with `replay`, so the topics are read from the beginning).
async fn prepare_database(args: &ExampleArgs) -> anyhow::Result<(tokio_postgres::Client, String)> {
    let settings = crate::infra::pg::config(&args.database_url, CONSUMER)?;
    let client = crate::infra::pg::connect(&settings)
        .await
        .map_err(|error| anyhow::anyhow!(crate::infra::pg::explain(&error)))?;
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
    Ok((client, group))
}

/// A `read_committed` consumer in `group` that commits its offsets itself.
fn kafka_consumer(args: &ExampleArgs, group: &str) -> anyhow::Result<StreamConsumer> {
    // TLS and SASL from the same LEDGER_KAFKA_* variables as the relay and the worker.
    let mut settings = crate::infra::kafka::KafkaSettings::from_env(&args.brokers)?;
    settings.properties.extend(args.kafka.clone());
    let mut kafka_config = settings.client_config()?;
    consumer::read_committed(&mut kafka_config);
    Ok(kafka_config
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()?)
}

/// Points `kafka` at the live topic: subscribed, or with `bootstrap`, assigned at the
/// replay's handoff once the replay is applied. `false` when stopped during the bootstrap.
async fn start_reading(
    args: &ExampleArgs,
    kafka: &StreamConsumer,
    client: &mut tokio_postgres::Client,
    counts: &ExampleCounts,
    shutdown: &CancellationToken,
) -> anyhow::Result<bool> {
    let live_topic = format!("{}assignment", args.topic_prefix);
    let Some(replay_id) = &args.bootstrap else {
        kafka.subscribe(&[&live_topic])?;
        return Ok(true);
    };
    let replay_topic = args
        .replay_topic
        .clone()
        .unwrap_or_else(|| replay::replay_topic(replay::DEFAULT_TARGET, &live_topic, replay_id));
    let Some(marker) = bootstrap(kafka, client, replay_id, &replay_topic, counts, shutdown).await?
    else {
        return Ok(false);
    };
    eprintln!(
        "replay {replay_id} read to its markers ({counts}); {} from offsets {:?}",
        marker.live_topic, marker.handoff
    );
    kafka.assign(&marker.live_assignment()?)?;
    counts.live.store(true, Ordering::Relaxed);
    Ok(true)
}

/// Commits the offsets past `messages`, whose changes are committed. A failure is only
/// logged: a restart re-reads them, and the inbox absorbs the duplicates.
fn commit_offsets(kafka: &StreamConsumer, messages: &[OwnedMessage]) -> anyhow::Result<()> {
    let mut offsets = TopicPartitionList::new();
    for message in messages {
        offsets.add_partition_offset(
            message.topic(),
            message.partition(),
            Offset::Offset(message.offset() + 1),
        )?;
    }
    if let Err(error) = kafka.commit(&offsets, CommitMode::Async) {
        eprintln!("cannot commit the offsets (a restart re-reads, the inbox absorbs it): {error}");
    }
    Ok(())
}

/// Events applied and duplicates absorbed, and whether the bootstrap reached the live topic.
#[derive(Debug, Default)]
pub struct ExampleCounts {
    /// Events applied (first time).
    pub applied: AtomicU64,
    /// Deliveries the inbox absorbed.
    pub duplicates: AtomicU64,
    /// `--bootstrap`: the replay was read to its markers; the live topic is being read.
    pub live: AtomicBool,
}

impl std::fmt::Display for ExampleCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} applied, {} duplicates",
            self.applied.load(Ordering::Relaxed),
            self.duplicates.load(Ordering::Relaxed)
        )
    }
}

/// Phase 1 of `--bootstrap`: the replay topic from the beginning to its markers. `None` if
/// interrupted.
async fn bootstrap(
    kafka: &StreamConsumer,
    client: &mut tokio_postgres::Client,
    replay_id: &str,
    replay_topic: &str,
    counts: &ExampleCounts,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<replay::CompletionMarker>> {
    // The replay topic appears once a runner starts the replay.
    let partitions = loop {
        let metadata = kafka.fetch_metadata(Some(replay_topic), Duration::from_secs(10))?;
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .filter(|topic| topic.error().is_none())
            .flat_map(|topic| topic.partitions().iter().map(|p| p.id()))
            .collect();
        if !partitions.is_empty() {
            break partitions;
        }
        eprintln!("waiting for replay topic {replay_topic} (is a `ledger worker` running?)");
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
            () = shutdown.cancelled() => return Ok(None),
        }
    };
    let mut progress = replay::Bootstrap::new(replay_id, replay_topic, partitions);
    kafka.assign(&progress.replay_assignment()?)?;
    eprintln!("bootstrapping from {replay_topic}");
    loop {
        if let Some(marker) = progress.complete() {
            return Ok(Some(marker.clone()));
        }
        let Some(messages) = receive_batch(kafka, shutdown, counts).await? else {
            return Ok(None);
        };
        // A marker ends its partition: the events before it are applied first.
        let mut events = Vec::with_capacity(messages.len());
        let mut markers = Vec::new();
        for message in &messages {
            match replay::classify(message)? {
                replay::Delivery::Event(payload) => events.push(payload),
                replay::Delivery::Marker(marker) => markers.push((message.partition(), marker)),
            }
        }
        apply_all(client, &events, counts).await?;
        for (partition, marker) in markers {
            progress.marker_seen(partition, marker)?;
        }
        if progress.complete().is_none() && messages.is_empty() {
            eprintln!(
                "replay: {counts}; waiting for the markers of partitions {:?}",
                progress.waiting()
            );
        }
    }
}

/// Most messages applied in one transaction.
const BATCH: usize = 500;

/// The next messages: waits for one (`None` on shutdown; an empty batch after 10 s idle),
/// then takes what else has arrived, up to [`BATCH`].
async fn receive_batch(
    kafka: &StreamConsumer,
    shutdown: &CancellationToken,
    counts: &ExampleCounts,
) -> anyhow::Result<Option<Vec<OwnedMessage>>> {
    let first = tokio::select! {
        message = kafka.recv() => message?.detach(),
        () = shutdown.cancelled() => return Ok(None),
        () = tokio::time::sleep(Duration::from_secs(10)) => {
            eprintln!("idle: {counts}");
            return Ok(Some(Vec::new()));
        }
    };
    let mut messages = vec![first];
    while messages.len() < BATCH {
        match tokio::time::timeout(Duration::from_millis(2), kafka.recv()).await {
            Ok(message) => messages.push(message?.detach()),
            Err(_) => break,
        }
    }
    Ok(Some(messages))
}

/// Logs the traces of an applied batch (the relay's `traceparent` header): one line per
/// trace, with how many of the batch's events belong to it and the last span.
fn log_traces(messages: &[OwnedMessage]) {
    use rdkafka::message::Headers as _;
    let mut traces: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for message in messages {
        let Some(headers) = message.headers() else {
            continue;
        };
        for header in headers.iter() {
            if header.key != crate::publish::header::TRACEPARENT {
                continue;
            }
            let Some(traceparent) = header.value.and_then(|v| std::str::from_utf8(v).ok()) else {
                continue;
            };
            let trace_id = traceparent.split('-').nth(1).unwrap_or_default().to_owned();
            let entry = traces.entry(trace_id).or_default();
            entry.0 += 1;
            entry.1 = traceparent.to_owned();
        }
    }
    for (trace_id, (events, last)) in traces {
        eprintln!("applied {events} event(s) of trace {trace_id} (last traceparent {last})");
    }
}

/// Applies envelopes once each, in one transaction.
async fn apply_all(
    client: &mut tokio_postgres::Client,
    payloads: &[&[u8]],
    counts: &ExampleCounts,
) -> anyhow::Result<()> {
    if payloads.is_empty() {
        return Ok(());
    }
    // Prepared once per batch: each event is then one round trip, not two.
    let start = client
        .prepare(include_str!("../sql/example_assignment_started.sql"))
        .await?;
    let end = client
        .prepare("DELETE FROM example_current_ra WHERE assignment_id = $1")
        .await?;
    let envelopes = payloads
        .iter()
        .map(|payload| consumer::decode(payload))
        .collect::<Result<Vec<_>, _>>()?;
    let outcome = consumer::apply_batch(client, CONSUMER, &envelopes, |tx, envelope| {
        let (start, end) = (start.clone(), end.clone());
        Box::pin(async move {
            let since = chrono::DateTime::from_timestamp_micros(envelope.effective_at_micros)
                .unwrap_or_default();
            match &envelope.event {
                Some(Event::AssignmentStarted(started)) => {
                    // Every field by name: a field added to the event does not compile
                    // here until the example keeps it or says why not.
                    let v1::AssignmentStarted {
                        assignment_id,
                        business_id,
                        jurisdiction,
                        contact_id,
                        // The current RA only: which assignment came before is history.
                        replaces: _,
                    } = started;
                    tx.execute(
                        &start,
                        &[business_id, jurisdiction, assignment_id, contact_id, &since],
                    )
                    .await?;
                }
                Some(Event::AssignmentEnded(ended)) => {
                    let v1::AssignmentEnded {
                        assignment_id,
                        // Its row goes: why it ended and what replaced it are history.
                        business_id: _,
                        jurisdiction: _,
                        contact_id: _,
                        reason: _,
                        replaced_by: _,
                    } = ended;
                    tx.execute(&end, &[assignment_id]).await?;
                }
                _ => {}
            }
            Ok(())
        })
    })
    .await?;
    counts.applied.fetch_add(outcome.applied, Ordering::Relaxed);
    counts
        .duplicates
        .fetch_add(outcome.duplicates, Ordering::Relaxed);
    Ok(())
}
