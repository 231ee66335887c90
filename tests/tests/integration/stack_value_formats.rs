//! `deploy/stack`'s value formats (deploy/value_formats.sh): `up` refuses a format other than
//! the running relay's (the relay reads it only when it starts), a switch is recorded with
//! the topics' end offsets on the run's real broker (where the new format starts), and
//! `status` shows each topic's format from that record.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use ra_ledger_tests::{TestTopics, random_suffix};
use rdkafka::producer::{FutureProducer, FutureRecord};

/// Runs `script` in bash with deploy/lib.sh and deploy/value_formats.sh sourced, and `args`
/// as its positional parameters.
fn shell(script: &str, args: &[&str]) -> anyhow::Result<Output> {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    Ok(Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {0}/lib.sh && source {0}/value_formats.sh && {script}",
            deploy.display()
        ))
        .arg("bash")
        .args(args)
        .output()?)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_owned()
}

#[test]
fn up_refuses_another_format_than_the_running_relays_and_keeps_it_when_none_is_given()
-> anyhow::Result<()> {
    let verdict = |running: &str, requested: &str| {
        shell(
            r#"value_format_for_up "$1" "$2" /run/relay.pid"#,
            &[running, requested],
        )
    };
    for (running, requested, format) in [
        ("", "", "protobuf"),
        ("", "json", "json"),
        ("confluent_protobuf", "", "confluent_protobuf"),
        ("json", "json", "json"),
    ] {
        let output = verdict(running, requested)?;
        assert!(
            output.status.success(),
            "{running:?} {requested:?}: {output:?}"
        );
        assert_eq!(text(&output.stdout), format, "{running:?} {requested:?}");
    }
    let refused = verdict("protobuf", "confluent_protobuf")?;
    assert!(!refused.status.success());
    assert_eq!(text(&refused.stdout), "");
    let error = text(&refused.stderr);
    for needed in [
        "the relay runs with values protobuf",
        "RA_VALUE_FORMAT=confluent_protobuf takes effect only when the relay starts",
        "Stop it first",
        "deploy/stack down",
    ] {
        assert!(error.contains(needed), "{needed:?} is not in {error:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_is_recorded_with_where_the_new_format_starts_and_status_shows_it()
-> anyhow::Result<()> {
    let mut topics = TestTopics::new();
    let topic = topics.create_with_partitions("assignment", 2).await?;
    let producer: FutureProducer = topics.client_config().create()?;
    for (partition, records) in [(0, 3), (1, 1)] {
        for _ in 0..records {
            producer
                .send(
                    FutureRecord::<(), _>::to(&topic)
                        .partition(partition)
                        .payload("bare"),
                    Duration::from_secs(30),
                )
                .await
                .map_err(|(error, _)| error)?;
        }
    }
    let folder = std::env::temp_dir().join(format!("ra-ledger-formats-{}", random_suffix()));
    std::fs::create_dir_all(&folder)?;
    let file = folder.join("relay-value-formats");
    let file = file.to_str().expect("a UTF-8 path");
    let pattern = format!("^{}$", regex::escape(&topic));
    let record = |format: &str| {
        shell(
            r#"value_format_record "$1" "$2" "$3" "$4" && value_format_status "$1""#,
            &[file, format, &topics.brokers, &pattern],
        )
    };
    let first = record("protobuf")?;
    assert!(first.status.success(), "{first:?}");
    let switched = record("confluent_protobuf")?;
    assert!(switched.status.success(), "{switched:?}");
    let again = record("confluent_protobuf")?;
    let lines: Vec<String> = std::fs::read_to_string(file)?
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        lines.len(),
        2,
        "one line per switch, none for the same format: {lines:?}"
    );
    assert!(
        lines[1].contains(" confluent_protobuf ")
            && lines[1].contains(&format!("{topic}:0:3"))
            && lines[1].contains(&format!("{topic}:1:1")),
        "{lines:?}"
    );
    let status = text(&again.stdout);
    assert!(
        status.contains("confluent_protobuf")
            && status.contains(&format!("{topic} since "))
            && status.contains("partition:first offset 0:3 1:1 (protobuf before)"),
        "{status}"
    );
    std::fs::remove_dir_all(&folder)?;
    Ok(())
}
