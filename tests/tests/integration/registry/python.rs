//! confluent-kafka's `ProtobufDeserializer`, with its `SchemaRegistryClient` pointed at the
//! run's Apicurio Registry, reads every record of a framed topic
//! (`proto/consumers/python/registry_consumer.py`), and its fold equals the ledger's answer.

use std::path::Path;
use std::process::Command;

use ra_ledger_cdc::config::DeliveryMode;
use ra_ledger_cdc::registry::value_subject;
use ra_ledger_tests::registry::registry;

use super::{FramedRead, published_assignments, registry_client};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafkas_protobuf_deserializer_reads_every_record_through_the_registry()
-> anyhow::Result<()> {
    let python = std::env::var("LEDGER_PYTHON").map_err(|_| {
        anyhow::anyhow!(
            "LEDGER_PYTHON is not set: run this test through deploy/test, which makes the venv"
        )
    })?;
    let published = published_assignments(DeliveryMode::AtLeastOnce, 90).await?;
    let topic = published.topic.clone();
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../proto/consumers/python/registry_consumer.py");
    let output = tokio::task::spawn_blocking({
        let (brokers, url, topic) = (
            published.topics.brokers.clone(),
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
    let read: FramedRead = serde_json::from_slice(&output.stdout)?;
    let schema_id = registry_client()
        .latest_id(&value_subject(&topic))
        .await?
        .expect("registered");
    assert_eq!(read.schema_ids, [schema_id]);
    assert_eq!(read.index_bytes, [0]);
    published.check("Python", &read.folded).await
}
