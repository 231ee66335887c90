//! A replay of a framed topic is framed as its live topic is: a team reading the live topic
//! through the registry bootstraps from the replay with the same deserializer.

use std::collections::HashSet;
use std::time::Duration;

use axum::http::StatusCode;
use ra_ledger_cdc::config::DeliveryMode;
use ra_ledger_cdc::confluent_wire::Framed;
use ra_ledger_cdc::registry::value_subject;
use ra_ledger_cdc::replay::header;
use ra_ledger_tests::api::TestApi;
use ra_ledger_tests::registry::registry;
use ra_ledger_tests::relay::{Collector, RunningRelay};
use ra_ledger_tests::worker::{self, RunningWorker};
use ra_ledger_tests::{TestDatabase, TestTopics};
use rdkafka::Message as _;
use rdkafka::message::Headers as _;
use serde_json::json;
use uuid::Uuid;

use super::{framed_config, read_topic, registry_client, stored_payloads, write_assignments};
use crate::contracts::replay_completes;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_frames_the_events_of_a_framed_topic_and_leaves_the_others_bare()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let mut topics = TestTopics::new();
    let config = framed_config(
        &database,
        &mut topics,
        DeliveryMode::AtLeastOnce,
        &["assignment"],
    )
    .await?;
    let relay = RunningRelay::start(config.clone());
    write_assignments(&api, 12).await?;
    let client = database.connect().await?;
    let assignments = stored_payloads(&client, "assignment").await?;
    let contacts = stored_payloads(&client, "contact").await?;
    let expected: HashSet<String> = assignments.keys().chain(contacts.keys()).cloned().collect();
    let mut collector = Collector::new(&topics)?;
    assert!(
        collector
            .until_all(Duration::from_secs(120), &expected)
            .await
    );

    let mut worker_config = worker::test_config(&database, &topics);
    worker_config.schema_registry_url = Some(registry().ccompat_url());
    let worker = RunningWorker::start(worker_config);
    let reply = api
        .operate(
            "/v1/replays",
            json!({"aggregate_types": ["contact", "assignment"],
                   "topic_prefix": config.topic_prefix, "rate": 20_000}),
        )
        .await;
    reply.expect(StatusCode::ACCEPTED);
    let replay_id: Uuid = reply.str("replay_id").parse()?;
    replay_completes(&database, replay_id).await?;
    worker.stop().await?;
    relay.stop().await?;

    let live = config.topic("assignment");
    let schema_id = registry_client()
        .latest_id(&value_subject(&live))
        .await?
        .expect("the relay registered the live topic's subject");
    let is_marker = |record: &rdkafka::message::OwnedMessage| {
        record
            .headers()
            .is_some_and(|headers| headers.iter().any(|h| h.key == header::MARKER))
    };
    let id_of = |record: &rdkafka::message::OwnedMessage| -> String {
        record
            .headers()
            .and_then(|headers| headers.iter().find(|h| h.key == "id"))
            .and_then(|h| h.value)
            .map(|value| String::from_utf8_lossy(value).into_owned())
            .unwrap_or_default()
    };
    let framed = read_topic(&topics, &format!("{live}.replay.{replay_id}"))?;
    let mut events = 0;
    for record in &framed {
        let value = record.payload().unwrap_or_default();
        if is_marker(record) {
            // The markers stay JSON: a consumer tells them by their header first.
            assert_eq!(value.first(), Some(&b'{'));
            continue;
        }
        let parsed = Framed::parse(value)?;
        assert_eq!(
            (parsed.schema_id, parsed.indexes.as_slice()),
            (schema_id, &[0][..])
        );
        assert_eq!(parsed.payload, assignments[&id_of(record)].as_slice());
        events += 1;
    }
    assert_eq!(events, assignments.len(), "assignment events replayed");

    let bare = read_topic(
        &topics,
        &format!("{}.replay.{replay_id}", config.topic("contact")),
    )?;
    let replayed_contacts: Vec<_> = bare.iter().filter(|record| !is_marker(record)).collect();
    assert_eq!(replayed_contacts.len(), contacts.len());
    for record in replayed_contacts {
        assert_eq!(
            record.payload().unwrap_or_default(),
            contacts[&id_of(record)].as_slice(),
            "the unframed topic's replay changed"
        );
    }
    Ok(())
}
