//! A JVM consumer on Apicurio's own Kafka deserializer (tests/jvm/RegistryConsumer.java, the
//! envelope's class generated with protoc from events.proto) reads every record of a framed
//! topic through the run's registry, and its fold equals the ledger's answer.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ra_ledger_cdc::config::DeliveryMode;
use ra_ledger_tests::api::TestApi;
use ra_ledger_tests::registry::registry;
use ra_ledger_tests::relay::{Collector, RunningRelay};
use ra_ledger_tests::{TestDatabase, TestTopics};
use serde::Deserialize;

use super::{framed_config, ledger_current, stored_payloads, write_assignments};

/// What RegistryConsumer prints.
#[derive(Debug, Deserialize)]
struct Read {
    records: usize,
    event_ids: BTreeSet<String>,
    current: BTreeSet<[String; 4]>,
}

/// Runs `command`, failing with its output when it fails.
fn run(command: &mut Command) -> anyhow::Result<Vec<u8>> {
    let output = command.output()?;
    anyhow::ensure!(
        output.status.success(),
        "{command:?} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(output.stdout)
}

/// Generates the envelope's Java class with the protoc of the serde's folder and compiles
/// it with the consumer into `out`; the class path to run it.
fn build_consumer(libs: &Path, out: &Path) -> anyhow::Result<String> {
    let protoc = std::fs::read_dir(libs)?
        .flatten()
        .map(|entry| entry.path())
        .find(|path| {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with("protoc-") && name.ends_with(".exe")
        })
        .ok_or_else(|| anyhow::anyhow!("no protoc in {}", libs.display()))?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let generated = out.join("generated");
    let classes = out.join("classes");
    std::fs::create_dir_all(&generated)?;
    std::fs::create_dir_all(&classes)?;
    run(Command::new(protoc)
        .arg(format!("-I{}", root.join("proto/proto").display()))
        .arg(format!("--java_out={}", generated.display()))
        .arg(ra_ledger_proto::EVENTS_PROTO_PATH))?;
    let jars = format!("{}/*", libs.display());
    run(Command::new("javac")
        .args(["-nowarn", "-d"])
        .arg(&classes)
        .args(["-cp", &jars])
        .arg(generated.join("ra/ledger/v1/Events.java"))
        .arg(root.join("tests/jvm/RegistryConsumer.java")))?;
    Ok(format!("{}:{jars}", classes.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apicurios_kafka_deserializer_reads_every_record_through_the_registry() -> anyhow::Result<()>
{
    let libs = PathBuf::from(std::env::var("LEDGER_REGISTRY_SERDE_LIBS").map_err(|_| {
        anyhow::anyhow!(
            "LEDGER_REGISTRY_SERDE_LIBS is not set: run this test through deploy/test (ensure_registry_serde)"
        )
    })?);
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let mut topics = TestTopics::new();
    let config = framed_config(
        &database,
        &mut topics,
        DeliveryMode::ExactlyOnce,
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

    let out =
        ra_ledger_tests::stack::run_dir().join(format!("jvm-{}", ra_ledger_tests::random_suffix()));
    let brokers = topics.brokers.clone();
    let topic = config.topic("assignment");
    let stdout = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<u8>> {
        let classpath = build_consumer(&libs, &out)?;
        run(Command::new("java").args([
            "-cp",
            &classpath,
            "RegistryConsumer",
            &brokers,
            &registry().v2_url(),
            &topic,
        ]))
    })
    .await??;
    let read: Read = serde_json::from_slice(&stdout)?;
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
        "JVM: {} records, {} events, {} current assignments, as the ledger has them",
        read.records,
        read.event_ids.len(),
        read.current.len()
    );
    Ok(())
}
