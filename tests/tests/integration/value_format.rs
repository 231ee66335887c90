//! `value_formats`: a topic set to `json` carries the proto3 canonical JSON of the very
//! envelope the ledger stored and hashed, in both delivery modes, as `docs/asyncapi.yaml`
//! describes it; the other topics and the hash chain are untouched, and a payload with no
//! JSON rendering is parked.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine as _;

use axum::http::StatusCode;
use prost::Message as _;
use ra_ledger::reassign::RunState;
use ra_ledger_cdc::config::DeliveryMode;
use ra_ledger_cdc::value_format::ValueFormat;
use ra_ledger_proto::v1::Envelope;
use ra_ledger_tests::api::{TestApi, contact_body};
use ra_ledger_tests::relay::{Collector, Received, RunningRelay, test_config};
use ra_ledger_tests::worker::{self, RunningWorker, wait_for_run};
use ra_ledger_tests::{TestDatabase, TestTopics};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::contracts::asyncapi::{Contract, Seen};

/// An event as the ledger stored it.
struct Stored {
    /// From its stream's name, `<aggregate type>-<id>`.
    aggregate_type: String,
    stream_version: i64,
    payload: Vec<u8>,
}

/// The events table, and a collector that has read every one of its events from the
/// topics (or the test fails after two minutes).
async fn every_stored_event_on_kafka(
    client: &tokio_postgres::Client,
    topics: &TestTopics,
) -> anyhow::Result<(HashMap<String, Stored>, Collector)> {
    let stored = stored_events(client).await?;
    let expected: HashSet<String> = stored.keys().cloned().collect();
    let mut collector = Collector::new(topics)?;
    assert!(
        collector
            .until_all(Duration::from_secs(120), &expected)
            .await,
        "got {:?} of {expected:?}",
        collector.distinct_ids()
    );
    Ok((stored, collector))
}

async fn stored_events(client: &tokio_postgres::Client) -> anyhow::Result<HashMap<String, Stored>> {
    let rows = client
        .query(
            "SELECT event_id::text, split_part(stream, '-', 1), stream_version, payload \
             FROM events",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| {
            let stored = Stored {
                aggregate_type: row.get(1),
                stream_version: row.get(2),
                payload: row.get(3),
            };
            (row.get(0), stored)
        })
        .collect())
}

/// Checks one JSON value by hand, as a consumer without a protobuf toolchain reads it.
fn check_by_hand(message: &Received, stored: &Stored) {
    let value: Value = serde_json::from_slice(&message.payload).expect("the value is JSON");
    let object = value.as_object().expect("a JSON object");
    assert_eq!(object["eventId"], json!(message.id()));
    // int64 as a string, lowerCamelCase names.
    assert_eq!(
        object["streamVersion"],
        json!(stored.stream_version.to_string())
    );
    assert!(object["recordedAtMicros"].is_string(), "{value}");
    assert_eq!(object["schemaVersion"], json!(1));
    assert!(
        object.keys().all(|name| !name.contains('_')),
        "snake_case name in {value}"
    );
    match message.headers["event_type"].as_str() {
        "ContactCreated" => {
            let created = &object["contactCreated"];
            assert_eq!(
                created["status"],
                json!("CONTACT_STATUS_PRIMARY"),
                "{value}"
            );
            assert_eq!(created["address"]["postalCode"], json!("78701"), "{value}");
            // The empty `supersedes` is a default: left out.
            assert!(created.get("supersedes").is_none(), "{value}");
        }
        "AssignmentStarted" => {
            assert!(
                object["assignmentStarted"]["businessId"].is_string(),
                "{value}"
            );
        }
        "AssignmentEnded" => {
            // Enums by name.
            assert_eq!(
                object["assignmentEnded"]["reason"],
                json!("END_REASON_CANCELLED"),
                "{value}"
            );
        }
        other => panic!("unexpected event type {other} on a JSON topic"),
    }
}

/// `tests/json_mapping.py`'s verdict (Google's protobuf library, a second implementation of
/// the mapping) on (stored envelope, published JSON) pairs: whether all hold, and what it said.
fn python_agrees(pairs: &[(&[u8], &[u8])]) -> anyhow::Result<(bool, String)> {
    let python = std::env::var("LEDGER_PYTHON").map_err(|_| {
        anyhow::anyhow!(
            "LEDGER_PYTHON is not set: run this test through deploy/test, which makes the venv"
        )
    })?;
    let mut child = Command::new(python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("json_mapping.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().expect("piped");
    for (protobuf, json) in pairs {
        let line = json!({
            "protobuf": base64::engine::general_purpose::STANDARD.encode(protobuf),
            "json": std::str::from_utf8(json)?,
        });
        writeln!(stdin, "{line}")?;
    }
    drop(stdin);
    let output = child.wait_with_output()?;
    Ok((
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    ))
}

/// `message` as the contract checker reads records: its topic without the test's prefix.
fn seen(message: &Received, prefix: &str) -> Seen {
    Seen {
        topic: message.topic[prefix.len() + 1..].to_owned(),
        partition: message.partition,
        offset: message.offset,
        key: Some(message.key.clone()),
        headers: message.headers.clone().into_iter().collect(),
        payload: message.payload.clone(),
    }
}

/// The scenario, in one delivery mode, with one aggregate type's topic set to JSON (the
/// other stays protobuf): a contact and assignments written through the ledger, and a raw
/// outbox row of the JSON topic's type with no JSON rendering among them.
async fn json_topic_scenario(delivery: DeliveryMode, json_aggregate: &str) -> anyhow::Result<()> {
    let contract = Contract::load()?;
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let mut config = test_config(&database, &mut topics).await?;
    config.delivery = delivery;
    config.value_formats = BTreeMap::from([(json_aggregate.into(), ValueFormat::Json)]);
    config.validate()?;
    let relay = RunningRelay::start(config);

    let api = TestApi::new(&database)?;
    api.contact("TX", "First Office").await;
    let mut assignments = Vec::new();
    for _ in 0..3 {
        assignments.push(api.assign(Uuid::now_v7()).await);
    }
    let client = database.connect().await?;
    let garbage: String = client
        .query_one(
            "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES (gen_random_uuid(), $1, 'not-an-envelope', 'Garbage', '\\x00ff') \
             RETURNING event_id::text",
            &[&json_aggregate],
        )
        .await?
        .get(0);
    // Written after the garbage row: its arrival shows the stream went on.
    let ended = api
        .post(
            &format!("/v1/assignments/{}/end", assignments[0]),
            json!({}),
        )
        .await;
    assert!(ended.status.is_success(), "{:?}", ended.body);

    let (stored, collector) = every_stored_event_on_kafka(&client, &topics).await?;
    relay.stop().await?;

    let json_topic = format!("{}.outbox.event.{json_aggregate}", topics.prefix);
    let (mut json_ids, mut protobuf_ids) = (HashSet::new(), HashSet::new());
    let mut pairs = Vec::new();
    let mut identified = BTreeSet::new();
    for message in &collector.received {
        identified.insert(
            contract
                .identify(&seen(message, &topics.prefix))
                .map_err(anyhow::Error::msg)?,
        );
        let event = &stored[message.id()];
        let from_ledger = Envelope::decode(event.payload.as_slice())?;
        if event.aggregate_type == json_aggregate {
            assert_eq!(message.topic, json_topic);
            // The canonical JSON parser (pbjson, strict: unknown fields are refused) reads
            // back the envelope the ledger stored.
            let from_json: Envelope = serde_json::from_slice(&message.payload)?;
            assert_eq!(from_json, from_ledger);
            check_by_hand(message, event);
            pairs.push((event.payload.as_slice(), message.payload.as_slice()));
            json_ids.insert(message.id());
        } else {
            assert_eq!(message.payload, event.payload, "protobuf topics unchanged");
            protobuf_ids.insert(message.id());
        }
        assert_eq!(message.headers["event_type"], from_ledger.event_type);
    }
    let (contacts, assignments) = (1, 4);
    let expected_counts = if json_aggregate == "contact" {
        (contacts, assignments)
    } else {
        (assignments, contacts)
    };
    assert_eq!((json_ids.len(), protobuf_ids.len()), expected_counts);
    // The document's JSON message of that topic, and the protobuf one of the other.
    let (json_message, protobuf_channel, protobuf_message) = if json_aggregate == "contact" {
        ("ContactEventJson", "assignment", "AssignmentEvent")
    } else {
        ("AssignmentEventJson", "contact", "ContactEvent")
    };
    assert_eq!(
        identified,
        BTreeSet::from([
            (json_aggregate.to_owned(), json_message.to_owned()),
            (protobuf_channel.to_owned(), protobuf_message.to_owned()),
        ])
    );
    let (holds, said) = python_agrees(&pairs)?;
    assert!(holds, "{said}");
    eprintln!("json_mapping.py: {}", said.trim());
    assert!(
        !collector.distinct_ids().contains(&garbage),
        "the row without JSON was published"
    );

    let parked = ra_ledger_cdc::parking::list(&client, true).await?;
    assert_eq!(parked.len(), 1, "{parked:?}");
    assert_eq!(parked[0].event_id, garbage);
    assert_eq!(parked[0].topic, json_topic);
    assert!(
        parked[0].error.contains("not a ra.ledger.v1.Envelope"),
        "{}",
        parked[0].error
    );

    // The chain covers the protobuf bytes; publishing JSON changed nothing stored.
    let report = ra_ledger::verify::verify(&client, |_| {}).await?;
    assert_eq!((report.events, report.broken), (5, None));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_assignment_topic_at_least_once_carries_the_canonical_json_of_the_stored_envelope()
-> anyhow::Result<()> {
    json_topic_scenario(DeliveryMode::AtLeastOnce, "assignment").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_contact_topic_exactly_once_carries_the_canonical_json_of_the_stored_envelope()
-> anyhow::Result<()> {
    json_topic_scenario(DeliveryMode::ExactlyOnce, "contact").await
}

/// The reassignment topic in JSON: the worker reads its page requests as JSON and runs a
/// supersede's chain to the end, and every run event on the topic is its canonical JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_reassignment_topic_still_drives_the_worker() -> anyhow::Result<()> {
    let contract = Contract::load()?;
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let mut config = test_config(&database, &mut topics).await?;
    config.value_formats = BTreeMap::from([("reassignment".into(), ValueFormat::Json)]);
    let relay = RunningRelay::start(config);
    let worker = RunningWorker::start(worker::test_config(&database, &topics));

    let api = TestApi::new(&database)?;
    let contact: Uuid = api.contact("TX", "First Office").await.parse()?;
    for _ in 0..5 {
        api.assign(Uuid::now_v7()).await;
    }
    let superseded = api
        .post(
            &format!("/v1/contacts/{contact}/supersede"),
            json!({"name": "Second Office", "address": contact_body("TX", "x")["address"], "page_size": 2}),
        )
        .await;
    superseded.expect(StatusCode::ACCEPTED);
    let run_id: Uuid = superseded.str("run_id").parse()?;
    let run = wait_for_run(&database, run_id, Duration::from_secs(120), |status| {
        status.status == RunState::Completed
    })
    .await?;
    assert_eq!((run.replaced, run.failed), (5, 0), "{run:?}");

    let client = database.connect().await?;
    let (stored, collector) = every_stored_event_on_kafka(&client, &topics).await?;
    worker.stop().await?;
    relay.stop().await?;

    let mut identified = BTreeSet::new();
    let mut completed = None;
    for message in &collector.received {
        identified.insert(
            contract
                .identify(&seen(message, &topics.prefix))
                .map_err(anyhow::Error::msg)?,
        );
        let event = &stored[message.id()];
        if event.aggregate_type == "reassignment" {
            let from_json: Envelope = serde_json::from_slice(&message.payload)?;
            assert_eq!(from_json, Envelope::decode(event.payload.as_slice())?);
            if message.headers["event_type"] == "ReassignmentCompleted" {
                completed = Some(serde_json::from_slice::<Value>(&message.payload)?);
            }
        }
    }
    assert_eq!(
        identified,
        BTreeSet::from([
            ("assignment".to_owned(), "AssignmentEvent".to_owned()),
            ("contact".to_owned(), "ContactEvent".to_owned()),
            (
                "reassignment".to_owned(),
                "ReassignmentEventJson".to_owned()
            ),
        ])
    );
    // uint64 as a string, uint32 as a number, zero left out.
    let completed = completed.expect("the run's completion is on the topic");
    let counts = &completed["reassignmentCompleted"];
    assert_eq!(counts["replaced"], json!("5"), "{completed}");
    assert_eq!(counts["pages"], json!(3), "{completed}");
    assert!(counts.get("failed").is_none(), "{completed}");
    Ok(())
}

/// An envelope of a newer schema than the relay's (here, a field its events.proto does not
/// have): its JSON would lose the field, so the relay publishes and parks nothing, and holds
/// the stream (the events after it wait too) until it is upgraded; the protobuf topic's
/// value is the bytes themselves, and carries the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_envelope_holds_a_json_topic_rather_than_lose_a_field() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let mut config = test_config(&database, &mut topics).await?;
    config.value_formats = BTreeMap::from([("assignment".into(), ValueFormat::Json)]);
    let client = database.connect().await?;
    let envelope = Envelope {
        event_id: Uuid::now_v7().to_string(),
        stream: "assignment-b-TX".into(),
        stream_version: 1,
        event_type: "AssignmentStarted".into(),
        schema_version: 1,
        ..Envelope::default()
    };
    let mut newer = envelope.encode_to_vec();
    prost::encoding::encode_key(50, prost::encoding::WireType::LengthDelimited, &mut newer);
    prost::encoding::encode_varint(3, &mut newer);
    newer.extend_from_slice(b"new");
    let insert = "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
                  VALUES ($1::text::uuid, $2, 'b-TX', 'AssignmentStarted', $3)";
    client
        .execute(insert, &[&envelope.event_id, &"assignment", &newer])
        .await?;
    let after = Uuid::now_v7().to_string();
    let later = Envelope {
        event_id: after.clone(),
        ..envelope.clone()
    };
    client
        .execute(insert, &[&after, &"assignment", &later.encode_to_vec()])
        .await?;
    let mut collector = Collector::new(&topics)?;
    let relay = RunningRelay::start(config);
    collector.until(Duration::from_secs(8), |_| false).await;
    let sessions = ra_ledger_tests::metric(
        &relay.metrics.render(),
        ra_ledger_cdc::metrics::SESSIONS.name,
    );
    relay.stop().await?;
    assert!(
        collector.received.is_empty(),
        "published {} records",
        collector.received.len()
    );
    assert!(
        ra_ledger_cdc::parking::list(&client, true)
            .await?
            .is_empty()
    );
    assert!(
        sessions >= 2,
        "the relay retries, holding the stream: {sessions} sessions"
    );
    Ok(())
}
