//! Production connections against real servers: a PostgreSQL that accepts TLS only, and a
//! broker behind a TLS terminator (with mutual TLS, and with SASL/SCRAM).

use std::time::Duration;

use pgwire_replication::ReplicationClient;
use ra_ledger_tests::relay::{RunningRelay, test_config};
use ra_ledger_tests::stack::{run_dir, unstarted_postgres};
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
    let settings = ra_ledger_cdc::pg::config(url, "tls-test").expect("a URL");
    let stream = ra_ledger_cdc::pg::ReplicationTarget::of(&settings).stream("none", "none");
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
    let server = unstarted_postgres()?;
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
