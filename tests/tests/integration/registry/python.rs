//! confluent-kafka's `ProtobufDeserializer`, with its `SchemaRegistryClient` pointed at the
//! run's Apicurio Registry, reads every record of a framed topic
//! (`proto/consumers/python/registry_consumer.py`), and its fold equals the ledger's answer.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ra_ledger_cdc::config::DeliveryMode;
use ra_ledger_cdc::registry::value_subject;
use ra_ledger_tests::api::TestApi;
use ra_ledger_tests::registry::registry;
use ra_ledger_tests::relay::{Collector, RunningRelay};
use ra_ledger_tests::{TestDatabase, TestTopics};
use serde::Deserialize;

use super::{framed_config, ledger_current, registry_client, stored_payloads, write_assignments};

/// What registry_consumer.py prints.
#[derive(Debug, Deserialize)]
struct Read {
    records: usize,
    schema_ids: Vec<u32>,
    index_bytes: Vec<u8>,
    event_ids: BTreeSet<String>,
    current: BTreeSet<[String; 4]>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafkas_protobuf_deserializer_reads_every_record_through_the_registry()
-> anyhow::Result<()> {
    let python = std::env::var("LEDGER_PYTHON").map_err(|_| {
        anyhow::anyhow!(
            "LEDGER_PYTHON is not set: run this test through deploy/test, which makes the venv"
        )
    })?;
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
    write_assignments(&api, 90).await?;
    let client = database.connect().await?;
    let stored = stored_payloads(&client, "assignment").await?;
    let expected: HashSet<String> = stored.keys().cloned().collect();
    let mut collector = Collector::new(&topics)?;
    assert!(
        collector
            .until_all(Duration::from_secs(120), &expected)
            .await
    );
    relay.stop().await?;

    let topic = config.topic("assignment");
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../proto/consumers/python/registry_consumer.py");
    let output = tokio::task::spawn_blocking({
        let (brokers, url, topic) = (
            topics.brokers.clone(),
            registry().ccompat_url(),
            topic.clone(),
        );
        move || {
            Command::new(python)
                .arg(script)
                .args(["--brokers", &brokers, "--registry", &url, "--topic", &topic])
                .output()
        }
    })
    .await??;
    assert!(
        output.status.success(),
        "registry_consumer.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let read: Read = serde_json::from_slice(&output.stdout)?;
    let schema_id = registry_client()
        .latest_id(&value_subject(&topic))
        .await?
        .expect("registered");
    assert_eq!(read.schema_ids, [schema_id]);
    assert_eq!(read.index_bytes, [0]);
    assert!(read.records >= stored.len(), "{} records", read.records);
    assert_eq!(
        read.event_ids,
        expected.into_iter().collect::<BTreeSet<_>>()
    );
    let ledger = ledger_current(&client).await?;
    assert!(!ledger.is_empty());
    assert_eq!(
        read.current, ledger,
        "the fold differs from the ledger's current assignments"
    );
    eprintln!(
        "Python: {} records, {} events, {} current assignments, as the ledger has them",
        read.records,
        read.event_ids.len(),
        read.current.len()
    );
    Ok(())
}
