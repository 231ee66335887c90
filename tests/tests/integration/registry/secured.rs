//! A registry behind basic auth and TLS, as the database and Kafka are (issue 57, items 1,
//! 2 and 4): the run's Apicurio started by the harness with Quarkus' own HTTPS listener
//! and users ([`OwnRegistry::secured`]), a certificate made by openssl for the test. A
//! relay with the wrong CA, the wrong password or read-only credentials before the schema
//! is registered stops naming the fix; `ledger relay register` registers from "CI" with a
//! user that may write, setting the compatibility only where a subject has none; the relay
//! then runs with read-only credentials and frames its topics. No password reaches a log
//! line, an error or the open `/status`, which tells an operator the whole refusal.

use std::process::Stdio;
use std::time::Duration;

use ra_ledger_cdc::confluent_wire::Framed;
use ra_ledger_cdc::registry::{
    COMPATIBILITY, RegistryAccess, RegistryError, SchemaRegistry, value_subject,
};
use ra_ledger_cdc::relay::RelayError;
use ra_ledger_tests::api::{OPERATOR, TestApi};
use ra_ledger_tests::registry::{OwnRegistry, RegistryUser};
use ra_ledger_tests::relay::{Collector, refusal_once_the_registry_answers};
use ra_ledger_tests::stack::run_dir;
use ra_ledger_tests::tls::Pki;
use ra_ledger_tests::{TestDatabase, TestTopics, random_suffix};
use reqwest::Method;

use super::{framed_config, write_assignments};

/// The password of the user CI registers with.
const WRITER_SECRET: &str = "registry-writer-Qe7vX2";
/// The password of the relay's read-only user.
const READER_SECRET: &str = "registry-reader-Jm5tB8";

fn assert_hidden(what: &str, text: &str, secrets: &[&str]) {
    for secret in secrets.iter().filter(|secret| !secret.is_empty()) {
        assert!(!text.contains(secret), "{what} shows {secret}:\n{text}");
    }
}

/// The open verdict and the operator's, from the service.
async fn verdicts(api: &TestApi) -> (String, String) {
    let open = api.call(Method::GET, "/status", None, None).await;
    let operator = api.call(Method::GET, "/status", Some(OPERATOR), None).await;
    (open.text, operator.text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secured_registry_takes_ci_registering_and_a_read_only_relay_and_no_secret_leaks()
-> anyhow::Result<()> {
    // The shared stack clears the run folder when it starts: before the files go there.
    ra_ledger_tests::stack();
    let dir = run_dir().join(format!("registry-secured-{}", random_suffix()));
    let pki = Pki::generate(&dir.join("pki"))?;
    let users = [
        RegistryUser {
            name: "ci".into(),
            password: WRITER_SECRET.into(),
            writes: true,
        },
        RegistryUser {
            name: "relay".into(),
            password: READER_SECRET.into(),
            writes: false,
        },
    ];
    let own = OwnRegistry::secured(&pki, &users)?;
    let url = own.server.ccompat_url();
    let file = |name: &str, content: &str| -> anyhow::Result<std::path::PathBuf> {
        let path = dir.join(name);
        std::fs::write(&path, format!("{content}\n"))?;
        Ok(path)
    };
    let writer_file = file("ci-password", WRITER_SECRET)?;
    let reader_file = file("relay-password", READER_SECRET)?;
    let wrong_file = file("wrong-password", "not-the-password")?;

    let database = TestDatabase::new().await?;
    let mut topics = TestTopics::new();
    let mut config = framed_config(
        &database,
        &mut topics,
        ra_ledger_cdc::config::DeliveryMode::AtLeastOnce,
        &["assignment", "contact"],
    )
    .await?;
    config.schema_registry_url = Some(url.clone());
    config.schema_registry_user = Some("relay".into());
    config.schema_registry_password_file = Some(reader_file.clone());
    config.schema_registry_ca_file = Some(pki.ca.clone());
    config.validate()?;
    let api = TestApi::with_relay_slot(&database, &config.slot)?;
    write_assignments(&api, 3).await?;
    let database_password = database
        .url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(credentials, _)| credentials.split_once(':'))
        .map(|(_, password)| password.to_owned())
        .unwrap_or_default();
    let secrets = [WRITER_SECRET, READER_SECRET, database_password.as_str()];
    let refusal = |config: ra_ledger_cdc::config::RelayConfig| async move {
        let error = refusal_once_the_registry_answers(&config, Duration::from_secs(60)).await?;
        assert_hidden("a relay's error", &format!("{error} {error:?}"), &secrets);
        anyhow::Ok(error)
    };

    // TLS verified: a CA that did not sign the registry's certificate.
    let mut wrong_ca = config.clone();
    wrong_ca.schema_registry_ca_file = Some(pki.other_ca.clone());
    let error = refusal(wrong_ca).await?;
    assert!(
        matches!(&error, RelayError::Registry(RegistryError::Unreachable { reason, .. })
            if reason.contains("certificate") || reason.contains("UnknownIssuer")),
        "{error}"
    );
    // The wrong password: 401, naming the settings.
    let mut wrong_password = config.clone();
    wrong_password.schema_registry_password_file = Some(wrong_file);
    let error = refusal(wrong_password).await?;
    assert!(
        matches!(
            &error,
            RelayError::Registry(RegistryError::Denied { status: 401, .. })
        ) && error.to_string().contains(
            "check schema_registry_user and the password in schema_registry_password_file"
        ),
        "{error}"
    );
    // Read-only credentials, nothing registered yet: the relay may not write, and says
    // what to run.
    let error = refusal(config.clone()).await?;
    assert!(
        matches!(
            &error,
            RelayError::Registry(RegistryError::Denied { status: 403, .. })
        ) && error.to_string().contains("`ledger relay register`"),
        "{error}"
    );

    // The open verdict says the relay refused, and nothing of what it refused; an
    // operator reads it whole.
    let (open, operator) = verdicts(&api).await;
    assert!(
        open.contains("\"state\":\"failing\"") && open.contains("why is for operators"),
        "{open}"
    );
    let port = reqwest::Url::parse(&url)?
        .port()
        .unwrap_or_default()
        .to_string();
    for inside in ["localhost", &port, "ccompat", &config.slot, "403"] {
        assert!(
            !open.contains(inside),
            "the open /status shows {inside}: {open}"
        );
    }
    assert!(
        operator.contains(&format!("the schema registry at {url} answered 403")),
        "{operator}"
    );
    assert_hidden("/status", &format!("{open} {operator}"), &secrets);

    // CI registers, with the user that may write; the contact subject holds the schema
    // already and an admin raised its level, which stays.
    let ci = SchemaRegistry::connect(&RegistryAccess {
        url: url.clone(),
        user: Some("ci".into()),
        password_file: Some(writer_file.clone()),
        ca_file: Some(pki.ca.clone()),
    })?;
    let contact_subject = value_subject(&config.topic("contact"));
    let assignment_subject = value_subject(&config.topic("assignment"));
    ci.register(&contact_subject, ra_ledger_proto::EVENTS_PROTO)
        .await?;
    ci.set_compatibility(&contact_subject, "FULL_TRANSITIVE")
        .await?;
    let writer_path = writer_file.display().to_string();
    let ca_path = pki.ca.display().to_string();
    let formats = "assignment=confluent_protobuf,contact=confluent_protobuf";
    let registered = ra_ledger_tests::cli::ledger_printing(
        &["relay", "register"],
        &[
            ("LEDGER_TOPIC_PREFIX", config.topic_prefix.as_str()),
            ("LEDGER_VALUE_FORMATS", formats),
            ("LEDGER_SCHEMA_REGISTRY_URL", url.as_str()),
            ("LEDGER_SCHEMA_REGISTRY_USER", "ci"),
            ("LEDGER_SCHEMA_REGISTRY_PASSWORD_FILE", writer_path.as_str()),
            ("LEDGER_SCHEMA_REGISTRY_CA_FILE", ca_path.as_str()),
            ("RUST_LOG", "debug"),
        ],
        ra_ledger_tests::cli::Stdout::Read,
    )
    .await?;
    assert_eq!(registered.code, Some(0), "{registered:?}");
    assert_hidden(
        "ledger relay register",
        &format!("{} {}", registered.stdout, registered.stderr),
        &secrets,
    );
    let schema_id = ci
        .look_up(&assignment_subject, ra_ledger_proto::EVENTS_PROTO)
        .await?
        .expect("registered");
    assert!(
        registered.stdout.contains(&format!(
            "subject {contact_subject}: events.proto is schema id {schema_id}; its compatibility FULL_TRANSITIVE left as set"
        )) && registered.stdout.contains(&format!(
            "subject {assignment_subject}: events.proto is schema id {schema_id}; compatibility {COMPATIBILITY} set (it had none of its own)"
        )),
        "{}",
        registered.stdout
    );
    assert_eq!(
        ci.own_compatibility(&contact_subject).await?.as_deref(),
        Some("FULL_TRANSITIVE")
    );
    assert_eq!(
        ci.own_compatibility(&assignment_subject).await?.as_deref(),
        Some(COMPATIBILITY)
    );

    // With no topic framed there is nothing to register: refused, saying so.
    let nothing = ra_ledger_tests::cli::ledger_printing(
        &["relay", "register"],
        &[
            ("LEDGER_VALUE_FORMATS", ""),
            ("LEDGER_SCHEMA_REGISTRY_URL", url.as_str()),
        ],
        ra_ledger_tests::cli::Stdout::Read,
    )
    .await?;
    assert!(
        nothing.code == Some(78) && nothing.stderr.contains("no topic is framed for registries"),
        "{nothing:?}"
    );

    // The relay, as a process with read-only credentials and everything logged: it looks
    // its ids up and frames; its log holds no password.
    let log_path = dir.join("relay.log");
    let log = std::fs::File::create(&log_path)?;
    let reader_path = reader_file.display().to_string();
    let mut relay = tokio::process::Command::new(env!("CARGO_BIN_EXE_relay-under-test"))
        .env_remove("LEDGER_RELAY_CONFIG")
        .env("RUST_LOG", "debug")
        .env("LEDGER_DATABASE_URL", &database.url)
        .env("LEDGER_KAFKA_BROKERS", &topics.brokers)
        .env("LEDGER_TOPIC_PREFIX", &config.topic_prefix)
        .env("LEDGER_RELAY_SLOT", &config.slot)
        .env("LEDGER_METRICS_LISTEN", "")
        .env("LEDGER_VALUE_FORMATS", formats)
        .env("LEDGER_SCHEMA_REGISTRY_URL", &url)
        .env("LEDGER_SCHEMA_REGISTRY_USER", "relay")
        .env("LEDGER_SCHEMA_REGISTRY_PASSWORD_FILE", &reader_path)
        .env("LEDGER_SCHEMA_REGISTRY_CA_FILE", &ca_path)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()?;
    let mut collector = Collector::new(&topics)?;
    let assignment_topic = config.topic("assignment");
    let framed = collector
        .until(Duration::from_secs(120), |received| {
            received
                .iter()
                .filter(|message| message.topic == assignment_topic)
                .count()
                >= 3
        })
        .await;
    relay.start_kill()?;
    relay.wait().await?;
    let text = std::fs::read_to_string(&log_path)?;
    assert!(
        framed,
        "the read-only relay published no framed records:\n{text}"
    );
    for message in collector
        .received
        .iter()
        .filter(|message| message.topic == assignment_topic)
    {
        assert_eq!(Framed::parse(&message.payload)?.schema_id, schema_id);
    }
    assert!(text.contains("events.proto found registered"), "{text}");
    assert_hidden("the relay's log", &text, &secrets);

    // A URL with the credentials in it is refused before anything is logged of it.
    let with_password = url.replacen("https://", &format!("https://relay:{READER_SECRET}@"), 1);
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_relay-under-test"))
        .env_remove("LEDGER_RELAY_CONFIG")
        .env("RUST_LOG", "debug")
        .env("LEDGER_DATABASE_URL", &database.url)
        .env("LEDGER_VALUE_FORMATS", formats)
        .env("LEDGER_SCHEMA_REGISTRY_URL", &with_password)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), output).await??;
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{text}");
    assert!(
        text.contains("a registry URL carries no credentials") && text.contains("<redacted>@"),
        "{text}"
    );
    assert_hidden("a refused URL's error", &text, &secrets);
    Ok(())
}
