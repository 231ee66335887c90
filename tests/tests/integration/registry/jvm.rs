//! A JVM consumer on Apicurio's own Kafka deserializer (tests/jvm/RegistryConsumer.java, the
//! envelope's class generated with protoc from events.proto) reads every record of a framed
//! topic through the run's registry, and its fold equals the ledger's answer.

use std::path::{Path, PathBuf};
use std::process::Command;

use ra_ledger_cdc::config::DeliveryMode;
use ra_ledger_tests::registry::registry;

use super::{Folded, published_assignments, run};

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
    let published = published_assignments(DeliveryMode::ExactlyOnce, 90).await?;
    let out =
        ra_ledger_tests::stack::run_dir().join(format!("jvm-{}", ra_ledger_tests::random_suffix()));
    let brokers = published.topics.brokers.clone();
    let topic = published.topic.clone();
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
    let folded: Folded = serde_json::from_slice(&stdout)?;
    published.check("JVM", &folded).await
}
