//! Production connections against real servers: a PostgreSQL that accepts TLS only, and an
//! Apache Kafka broker that speaks TLS itself (with mutual TLS, and with SASL/SCRAM).

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use pgwire_replication::ReplicationClient;
use ra_ledger_cdc::config::RelayConfig;
use ra_ledger_tests::broker::{BrokerServer, Security};
use ra_ledger_tests::relay::{Collector, RunningRelay, insert_backlog, parse_lsn, test_config};
use ra_ledger_tests::stack::{private_broker_with, run_dir, unstarted_tls_postgres};
use ra_ledger_tests::tls::Pki;
use ra_ledger_tests::worker::{self, RunningWorker, wait_for_run};
use ra_ledger_tests::{TestDatabase, TestTopics, random_suffix};

use crate::reassignment::{assert_all_moved, completed, seeded, supersede};

/// A fresh test PKI in the run's folder.
fn pki() -> anyhow::Result<Pki> {
    // The shared stack clears the run folder when it starts: start it first.
    ra_ledger_tests::stack();
    Pki::generate(&run_dir().join(format!("pki-{}", random_suffix())))
}

/// `url` (a test database's, on 127.0.0.1) pointed at `host`, with TLS `params`.
fn tls_url(url: &str, host: &str, params: &str) -> String {
    format!(
        "{}?{params}",
        url.replace("@127.0.0.1:", &format!("@{host}:"))
    )
}

/// What connecting with `url` says, SQL first, then the replication stream.
async fn refusals(url: &str) -> (String, String) {
    let sql = match ra_ledger::db::connect(url, "tls-test").await {
        Ok(_) => "connected".to_owned(),
        Err(error) => error.to_string(),
    };
    let settings = ra_ledger_cdc::infra::pg::config(url, "tls-test").expect("a URL");
    let stream = ra_ledger_cdc::infra::pg::ReplicationTarget::of(&settings).stream("none", "none");
    // The client connects on a task of its own: a refusal shows on the first read.
    let replication = match ReplicationClient::connect(stream).await {
        Ok(mut client) => {
            match tokio::time::timeout(Duration::from_secs(10), client.recv()).await {
                Ok(Err(error)) => error.to_string(),
                _ => "connected".to_owned(),
            }
        }
        Err(error) => error.to_string(),
    };
    (sql, replication)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_tls_only_runs_the_whole_flow_with_verify_full_and_refuses_the_rest()
-> anyhow::Result<()> {
    let pki = pki()?;
    let server = unstarted_tls_postgres()?;
    server.require_tls(&pki)?;
    server.start()?;
    let mut database = TestDatabase::on(&server.admin_url()).await?;
    let ca = pki.ca.display().to_string();
    database.url = tls_url(
        &database.url,
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );

    // The normal flow, every connection verify-full: the API's pool, the relay's SQL
    // connection and replication stream, the worker.
    let mut topics = TestTopics::new();
    let relay = RunningRelay::start(test_config(&database, &mut topics).await?);
    let worker = RunningWorker::start(worker::test_config(&database, &topics));
    let seeded = seeded(&database, 300).await?;
    let (run_id, new) = supersede(&seeded.api, seeded.contact_id, 100).await;
    let status = wait_for_run(&database, run_id, Duration::from_secs(120), completed).await?;
    assert_eq!((status.replaced, status.pages), (300, 4), "{status:#?}");
    assert_all_moved(&seeded, seeded.contact_id, new).await;
    // Every connection to the database, the relay's walsender included, is encrypted.
    let connections = seeded
        .client
        .query(
            "SELECT a.backend_type, a.application_name, s.ssl \
               FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
              WHERE a.datname = current_database()",
            &[],
        )
        .await?;
    let described: Vec<(String, String, bool)> = connections
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    assert!(
        described.iter().any(|(kind, ..)| kind == "walsender"),
        "{described:?}"
    );
    assert!(described.iter().all(|(.., ssl)| *ssl), "{described:?}");
    worker.stop().await?;
    relay.stop().await?;

    // Plaintext: the server refuses it, and the error says what to do.
    let base = database
        .url
        .split('?')
        .next()
        .unwrap_or_default()
        .to_owned();
    let (sql, replication) = refusals(&format!("{base}?sslmode=disable")).await;
    assert!(
        sql.contains("no pg_hba.conf entry") && sql.contains("accepts only TLS connections"),
        "{sql}"
    );
    assert!(replication.contains("no encryption"), "{replication}");

    // The wrong CA fails verify-full, on both kinds of connection.
    let other_ca = pki.other_ca.display().to_string();
    let (sql, replication) = refusals(&format!(
        "{base}?sslmode=verify-full&sslrootcert={other_ca}"
    ))
    .await;
    assert!(
        sql.contains("UnknownIssuer") && sql.contains("not signed by a CA in sslrootcert"),
        "{sql}"
    );
    assert!(replication.contains("UnknownIssuer"), "{replication}");

    // The wrong host name: the certificate names localhost, not 127.0.0.1.
    let by_address = base.replace("@localhost:", "@127.0.0.1:");
    let (sql, replication) = refusals(&format!(
        "{by_address}?sslmode=verify-full&sslrootcert={ca}"
    ))
    .await;
    assert!(
        sql.contains("not valid for name") && sql.contains("does not name this host"),
        "{sql}"
    );
    assert!(replication.contains("127.0.0.1"), "{replication}");
    // verify-ca checks the chain only: the same address passes.
    let (sql, _) = refusals(&format!("{by_address}?sslmode=verify-ca&sslrootcert={ca}")).await;
    assert_eq!(sql, "connected");
    Ok(())
}

/// A broker of its own whose client listener speaks TLS with `pki`'s certificate
/// (`mutual`: client certificates required), or SASL_SSL with SCRAM-SHA-512 `users`.
fn broker_over_tls(
    pki: &Pki,
    mutual: bool,
    users: &[(&str, &str)],
) -> anyhow::Result<BrokerServer> {
    let security = if users.is_empty() {
        Security::Ssl {
            pki: pki.clone(),
            mutual,
        }
    } else {
        Security::SaslSsl {
            pki: pki.clone(),
            users: users
                .iter()
                .map(|(name, password)| ((*name).to_owned(), (*password).to_owned()))
                .collect(),
        }
    };
    private_broker_with(security)
}

fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect()
}

async fn confirmed_lsn(database: &TestDatabase, slot: &str) -> anyhow::Result<u64> {
    let row = database
        .connect()
        .await?
        .query_one(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?;
    Ok(parse_lsn(&row.get::<_, String>(0)))
}

/// What a metadata request with `config` gets (within 10 s).
async fn metadata(
    config: rdkafka::ClientConfig,
) -> anyhow::Result<Result<(), rdkafka::error::KafkaError>> {
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        config.create()?;
    Ok(tokio::task::spawn_blocking(move || {
        admin
            .inner()
            .fetch_metadata(None, Duration::from_secs(10))
            .map(|_| ())
    })
    .await?)
}

/// A relay with `refused` settings, which Kafka turns away, while a backlog is written:
/// nothing reaches Kafka and the slot stays behind it. Then the same relay with `accepted`
/// settings delivers every event, and the slot moves past them.
async fn refused_then_delivered(
    database: &TestDatabase,
    topics: &TestTopics,
    refused: RelayConfig,
    accepted: RelayConfig,
) -> anyhow::Result<()> {
    let slot = accepted.slot.clone();
    let relay = RunningRelay::start(refused);
    let client = database.connect().await?;
    let ids: HashSet<String> = insert_backlog(&client, 20, 10, 64)
        .await?
        .into_iter()
        .collect();
    let written: String = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await?
        .get(0);
    tokio::time::sleep(Duration::from_secs(8)).await;
    let confirmed = confirmed_lsn(database, &slot).await?;
    assert!(
        confirmed < parse_lsn(&written),
        "the slot confirmed {confirmed:X} past events Kafka refused (written up to {written})"
    );
    let mut collector = Collector::new(topics)?;
    assert!(
        !collector
            .until(Duration::from_secs(3), |received| !received.is_empty())
            .await,
        "nothing may reach Kafka from a refused client"
    );
    // Stopped with deliveries pending: whatever it returns, it confirmed nothing.
    let _ = relay.stop().await;
    let relay = RunningRelay::start(accepted);
    assert!(
        collector.until_all(Duration::from_secs(90), &ids).await,
        "{} of {} events arrived",
        collector.distinct_ids().len(),
        ids.len()
    );
    relay.stop().await?;
    assert!(confirmed_lsn(database, &slot).await? >= parse_lsn(&written));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_over_mutual_tls_refuses_a_client_without_a_certificate_and_loses_nothing()
-> anyhow::Result<()> {
    let pki = pki()?;
    let broker = broker_over_tls(&pki, true, &[])?;
    let mut topics = TestTopics::on(broker.brokers());
    topics.client = settings(&[
        ("security.protocol", "SSL"),
        ("ssl.ca.location", &pki.ca.display().to_string()),
        (
            "ssl.certificate.location",
            &pki.client_cert.display().to_string(),
        ),
        ("ssl.key.location", &pki.client_key.display().to_string()),
    ]);
    let database = TestDatabase::new().await?;
    let config = test_config(&database, &mut topics).await?;

    // A relay that verifies the server but has no certificate of its own: the broker
    // refuses the handshake, and the slot does not move past what Kafka never acknowledged.
    let mut anonymous = config.clone();
    anonymous.kafka.remove("ssl.certificate.location");
    anonymous.kafka.remove("ssl.key.location");
    anonymous.shutdown_grace_ms = 500;
    refused_then_delivered(&database, &topics, anonymous, config).await?;

    // A client that trusts another CA cannot even read the metadata.
    let mut wrong_ca = topics.client_config();
    wrong_ca.set("ssl.ca.location", pki.other_ca.display().to_string());
    assert!(
        metadata(wrong_ca).await?.is_err(),
        "the wrong CA was accepted"
    );
    Ok(())
}

const SCRAM_USER: &str = "ledger-relay";
const SCRAM_PASSWORD: &str = "scram-password-for-tests";

/// The relay and the worker over SASL_SSL (SCRAM-SHA-512) with the password in a file.
fn scram_settings(
    pki: &Pki,
    password: &str,
) -> anyhow::Result<(BTreeMap<String, String>, std::path::PathBuf)> {
    let password_file = pki.dir.join(format!("kafka-password-{}", random_suffix()));
    std::fs::write(&password_file, format!("{password}\n"))?;
    let client = settings(&[
        ("security.protocol", "SASL_SSL"),
        ("sasl.mechanism", "SCRAM-SHA-512"),
        ("sasl.username", SCRAM_USER),
        ("ssl.ca.location", &pki.ca.display().to_string()),
    ]);
    Ok((client, password_file))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_scram_over_tls_carries_a_supersede_through_relay_and_worker() -> anyhow::Result<()> {
    let pki = pki()?;
    let broker = broker_over_tls(&pki, false, &[(SCRAM_USER, SCRAM_PASSWORD)])?;
    let (client, password_file) = scram_settings(&pki, SCRAM_PASSWORD)?;
    let mut topics = TestTopics::on(broker.brokers());
    // The harness's own clients (topics, collector) take the password inline.
    topics.client = client.clone();
    topics
        .client
        .insert("sasl.password".into(), SCRAM_PASSWORD.into());
    let database = TestDatabase::new().await?;
    let mut relay_config = test_config(&database, &mut topics).await?;
    // The relay and the worker read it from a file, as in production.
    relay_config.kafka.remove("sasl.password");
    relay_config
        .kafka_secret_files
        .insert("sasl.password".into(), password_file.clone());
    relay_config.validate()?;
    let mut worker_config = worker::test_config(&database, &topics);
    worker_config.kafka.remove("sasl.password");
    worker_config
        .kafka_secret_files
        .insert("sasl.password".into(), password_file);
    worker_config.validate()?;
    let relay = RunningRelay::start(relay_config);
    let worker = RunningWorker::start(worker_config);
    let seeded = seeded(&database, 250).await?;
    let (run_id, new) = supersede(&seeded.api, seeded.contact_id, 100).await;
    let status = wait_for_run(&database, run_id, Duration::from_secs(120), completed).await?;
    assert_eq!((status.replaced, status.pages), (250, 3), "{status:#?}");
    assert_all_moved(&seeded, seeded.contact_id, new).await;
    let mut collector = Collector::new(&topics)?;
    assert!(
        collector
            .until(Duration::from_secs(60), |received| received.len() >= 3)
            .await
    );
    worker.stop().await?;
    relay.stop().await?;
    Ok(())
}

// Apache Kafka checks the client's SCRAM proof and refuses it (SaslAuthenticationFailed):
// the login fails at the broker, before librdkafka would check the server's signature. A
// relay with the wrong password confirms nothing; with the right one it delivers it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_scram_refuses_a_wrong_password_and_the_slot_waits_for_the_right_one()
-> anyhow::Result<()> {
    let pki = pki()?;
    let broker = broker_over_tls(&pki, false, &[(SCRAM_USER, SCRAM_PASSWORD)])?;
    let (mut client, _) = scram_settings(&pki, SCRAM_PASSWORD)?;
    client.insert("sasl.password".into(), SCRAM_PASSWORD.into());
    let mut topics = TestTopics::on(broker.brokers());
    topics.client = client;
    let database = TestDatabase::new().await?;
    let config = test_config(&database, &mut topics).await?;

    // An admin client with the wrong password cannot even read the metadata.
    let mut wrong = topics.client_config();
    wrong.set("sasl.password", "not-the-password");
    let refused = metadata(wrong).await?;
    println!("metadata with a wrong password: {refused:?}");
    assert!(refused.is_err(), "a wrong SCRAM password was accepted");
    let log = std::fs::read_to_string(broker.dir.join("kafka.log"))?;
    assert!(
        log.contains("Authentication failed") || log.contains("authentication failed"),
        "the broker logged no refused login"
    );

    // The relay with the wrong password, then with the right one.
    let mut refused_config = config.clone();
    refused_config
        .kafka
        .insert("sasl.password".into(), "not-the-password".into());
    refused_config.shutdown_grace_ms = 500;
    refused_then_delivered(&database, &topics, refused_config, config).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_serves_https_with_rustls_and_refuses_plain_http_on_that_port() -> anyhow::Result<()>
{
    use ra_ledger::api::{Role, token_entry};
    let pki = pki()?;
    let database = TestDatabase::new().await?;
    let config = ra_ledger::config::ServeConfig {
        database_url: database.url.as_str().into(),
        tokens: token_entry(Role::Auditor, "audit", "an-auditor-token-for-https"),
        tls_cert_file: Some(pki.server_cert.clone()),
        tls_key_file: Some(pki.server_key.clone()),
        ..Default::default()
    };
    let tls = config.validate()?.tls.expect("TLS configured");
    let api = ra_ledger_tests::api::TestApi::new(&database)?;
    let address = api.serve_tls(tls).await?;
    let url = format!("https://localhost:{}/readyz", address.port());
    let trusting = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(&pki.ca)?)?)
        .build()?;
    let ready = trusting.get(&url).send().await?;
    assert_eq!(ready.status(), 200);
    // Another CA: the client refuses the server.
    let other = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(
            &pki.other_ca,
        )?)?)
        .build()?;
    assert!(other.get(&url).send().await.is_err());
    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = reqwest::Client::new()
        .get(format!("http://localhost:{}/readyz", address.port()))
        .timeout(Duration::from_secs(15))
        .send()
        .await;
    assert!(plain.is_err(), "{plain:?}");
    // A key that does not belong to the certificate is refused at start, naming the file.
    let mismatched = ra_ledger::config::ServeConfig {
        tls_key_file: Some(pki.client_key.clone()),
        ..config
    };
    let error = mismatched
        .validate()
        .expect_err("a foreign key")
        .to_string();
    assert!(
        error.contains("tls_key_file") && error.contains("client.key"),
        "{error}"
    );
    Ok(())
}
