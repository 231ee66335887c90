//! A Go consumer on franz-go (`kgo`) and its `sr.Serde` (`proto/consumers/go`) reads every
//! record of a framed topic through the run's registry, as a Go team builds it from the docs:
//! `go build` of its pinned modules from the Go module proxy, the envelope's Go type
//! generated from events.proto by protoc-gen-go (the version go.mod pins, through the
//! `go_package` events.proto declares), with the protoc of the Python consumer's venv
//! (`grpcio-tools`). Its fold equals the ledger's answer, and it decoded as many records as
//! the topic holds.

use std::path::{Path, PathBuf};
use std::process::Command;

use ra_ledger_cdc::config::DeliveryMode;
use ra_ledger_cdc::registry::value_subject;
use ra_ledger_tests::registry::registry;

use super::{FramedRead, published_assignments, read_topic, registry_client, run};

/// Copies the consumer's module into `out`, generates the envelope's Go code there with
/// docs/consumers.md's command and builds the consumer; its path.
fn build_consumer(python: &str, out: &Path) -> anyhow::Result<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let module = root.join("proto/consumers/go");
    std::fs::create_dir_all(out.join("gen"))?;
    for file in ["go.mod", "go.sum", "main.go"] {
        std::fs::copy(module.join(file), out.join(file))?;
    }
    let plugin = out.join("bin/protoc-gen-go");
    run(Command::new("go")
        .current_dir(out)
        .args(["build", "-o"])
        .arg(&plugin)
        .arg("google.golang.org/protobuf/cmd/protoc-gen-go"))?;
    run(Command::new(python)
        .current_dir(out)
        .args(["-m", "grpc_tools.protoc"])
        .arg(format!("--plugin=protoc-gen-go={}", plugin.display()))
        .arg(format!("-I{}", root.join("proto/proto").display()))
        .args(["--go_out=gen", "--go_opt=paths=source_relative"])
        .arg(ra_ledger_proto::EVENTS_PROTO_PATH))?;
    let consumer = out.join("bin/go-consumer");
    run(Command::new("go")
        .current_dir(out)
        .args(["build", "-o"])
        .arg(&consumer)
        .arg("."))?;
    Ok(consumer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn franz_gos_serde_reads_every_record_through_the_registry() -> anyhow::Result<()> {
    let python = std::env::var("LEDGER_PYTHON").map_err(|_| {
        anyhow::anyhow!(
            "LEDGER_PYTHON is not set: run this test through deploy/test, which makes the venv whose protoc generates the Go code"
        )
    })?;
    let published = published_assignments(DeliveryMode::ExactlyOnce, 90).await?;
    let out =
        ra_ledger_tests::stack::run_dir().join(format!("go-{}", ra_ledger_tests::random_suffix()));
    let (brokers, topic) = (published.topics.brokers.clone(), published.topic.clone());
    let stdout = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<u8>> {
        let consumer = build_consumer(&python, &out)?;
        run(Command::new(consumer).args([
            "--brokers",
            &brokers,
            "--registry",
            &registry().ccompat_url(),
            "--topic",
            &topic,
        ]))
    })
    .await??;
    let read: FramedRead = serde_json::from_slice(&stdout)?;
    let schema_id = registry_client()
        .latest_id(&value_subject(&published.topic))
        .await?
        .expect("registered");
    assert_eq!(read.schema_ids, [schema_id]);
    assert_eq!(read.index_bytes, [0]);
    let on_topic = read_topic(&published.topics, &published.topic)?.len();
    assert_eq!(
        read.folded.records, on_topic,
        "the Go consumer decoded {} records of the {on_topic} on the topic",
        read.folded.records
    );
    published.check("Go", &read.folded).await
}
