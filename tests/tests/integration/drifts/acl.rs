//! An ACL removed: a broker of its own with SASL/SCRAM and KRaft's StandardAuthorizer, the
//! relay's user allowed to write, read and describe the test's topics (a prefixed ACL), and
//! its WRITE removed while it streams. Kafka then refuses each produce with
//! TOPIC_AUTHORIZATION_FAILED; the relay holds on it (neither exits nor confirms), says at
//! `error` what it lacks and the grant that mends it ([`ra_ledger_cdc::relay::lacking`]),
//! and goes on by itself once the ACL is back. Nothing is lost.

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use ra_ledger_cdc::metrics::{SESSIONS, STREAMING};
use ra_ledger_tests::broker::{BrokerServer, Security};
use ra_ledger_tests::relay::{Collector, Tally, insert_backlog, parse_lsn, test_config};
use ra_ledger_tests::stack::run_dir;
use ra_ledger_tests::tls::Pki;
use ra_ledger_tests::{TestDatabase, TestTopics, metric, random_suffix};

use super::{LoggedRelay, slot_confirmed, wait_for};

const ADMIN: (&str, &str) = ("ledger-admin", "admin-password-for-tests");
const RELAY: (&str, &str) = ("ledger-relay", "relay-password-for-tests");

/// A broker of its own over SASL_SSL (SCRAM-SHA-512) that authorizes every request with
/// StandardAuthorizer: `ADMIN` is a super user (so is the plaintext inter-broker and
/// controller listeners' ANONYMOUS), `RELAY` may do only what an ACL grants.
fn authorizing_broker(pki: &Pki) -> anyhow::Result<BrokerServer> {
    let dir = run_dir().join(format!("kafka-acl-{}", random_suffix()));
    let users = [ADMIN, RELAY]
        .iter()
        .map(|(name, password)| ((*name).to_owned(), (*password).to_owned()))
        .collect();
    let mut broker = BrokerServer::new(
        &dir,
        Security::SaslSsl {
            pki: pki.clone(),
            users,
        },
    )?;
    broker.more_properties = format!(
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n\
         super.users=User:{};User:ANONYMOUS\n",
        ADMIN.0
    );
    broker.start()?;
    Ok(broker)
}

/// Runs Kafka's `kafka-acls` (`org.apache.kafka.tools.AclCommand`) as `ADMIN` with `args`.
fn acls(broker: &BrokerServer, pki: &Pki, args: &[&str]) -> anyhow::Result<()> {
    let properties = broker.dir.join("admin-client.properties");
    std::fs::write(
        &properties,
        format!(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
             username=\"{}\" password=\"{}\";\n\
             ssl.truststore.type=PEM\nssl.truststore.location={}\n",
            ADMIN.0,
            ADMIN.1,
            pki.ca.display()
        ),
    )?;
    let output = Command::new("java")
        .args(broker.jvm_logging())
        .arg("org.apache.kafka.tools.AclCommand")
        .args(["--bootstrap-server", &broker.brokers(), "--command-config"])
        .arg(&properties)
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    anyhow::ensure!(
        output.status.success(),
        "kafka-acls {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// The arguments of an ACL allowing `RELAY` `operations` on every topic named `prefix…`.
fn on_prefixed_topics<'a>(
    principal: &'a str,
    prefix: &'a str,
    operations: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec!["--allow-principal", principal];
    for operation in operations {
        args.extend(["--operation", operation]);
    }
    args.extend(["--topic", prefix, "--resource-pattern-type", "prefixed"]);
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_acl_removed_holds_the_relay_until_it_is_granted_again() -> anyhow::Result<()> {
    ra_ledger_tests::stack(); // the shared stack clears the run folder when it starts
    let pki = Pki::generate(&run_dir().join(format!("pki-{}", random_suffix())))?;
    let broker = authorizing_broker(&pki)?;
    let scram = |(user, password): (&str, &str)| {
        [
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", user),
            ("sasl.password", password),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .chain([("ssl.ca.location".to_owned(), pki.ca.display().to_string())])
        .collect()
    };
    let mut topics = TestTopics::on(broker.brokers());
    topics.client = scram(ADMIN); // the harness's topics and collector: the super user
    let database = TestDatabase::new().await?;
    let mut config = test_config(&database, &mut topics).await?;
    config.kafka.extend(scram(RELAY));
    let principal = format!("User:{}", RELAY.0);
    let prefix = format!("{}.", topics.prefix);
    let mut grant = vec!["--add"];
    grant.extend(on_prefixed_topics(
        &principal,
        &prefix,
        &["Write", "Read", "Describe"],
    ));
    acls(&broker, &pki, &grant)?;

    let relay = LoggedRelay::start(&config, &broker.dir.join("relay"))?;
    let mut collector = Collector::on(&topics, &broker.brokers())?;
    let client = database.connect().await?;
    let mut expected: HashSet<String> = insert_backlog(&client, 5, 20, 64)
        .await?
        .into_iter()
        .collect();
    anyhow::ensure!(
        collector
            .until_all(Duration::from_secs(90), &expected)
            .await,
        "the relay did not publish with its grant; its log:\n{}",
        relay.log()
    );

    let mut revoke = vec!["--remove", "--force"];
    revoke.extend(on_prefixed_topics(&principal, &prefix, &["Write"]));
    acls(&broker, &pki, &revoke)?;
    let held: Vec<String> = insert_backlog(&client, 5, 20, 64).await?;
    let written: String = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await?
        .get(0);
    expected.extend(held.iter().cloned());
    // It names what it lacks, and holds: tries again, neither stops nor confirms.
    relay
        .until_logged("TOPIC_AUTHORIZATION_FAILED", Duration::from_secs(60))
        .await?;
    let log = relay.log();
    assert!(
        log.contains(&principal) && log.contains("WRITE ACL") && log.contains(&prefix),
        "the relay's log does not name the principal, the grant and the topic:\n{log}"
    );
    let sessions = metric(&relay.scrape().await, SESSIONS.name);
    let watched = &relay;
    wait_for(
        "the relay trying again",
        Duration::from_secs(60),
        move || async move { Ok(metric(&watched.scrape().await, SESSIONS.name) >= sessions + 2) },
    )
    .await?;
    let held_ids: HashSet<&str> = held.iter().map(String::as_str).collect();
    let arrived = collector
        .until(Duration::from_secs(5), |received| {
            received.iter().any(|r| held_ids.contains(r.id()))
        })
        .await;
    assert!(!arrived, "an event reached Kafka without the WRITE ACL");
    let confirmed = slot_confirmed(&client, &config.slot).await?;
    assert!(
        parse_lsn(&confirmed) < parse_lsn(&written),
        "the slot confirmed {confirmed}, past rows Kafka refused (written up to {written})"
    );
    let mut relay = relay;
    assert!(relay.running()?, "the relay exited:\n{}", relay.log());

    let mut regrant = vec!["--add"];
    regrant.extend(on_prefixed_topics(&principal, &prefix, &["Write"]));
    acls(&broker, &pki, &regrant)?;
    let done = collector
        .until_all(Duration::from_secs(120), &expected)
        .await;
    let tally = Tally::of(
        "the WRITE ACL removed, then granted again",
        &expected,
        &collector.received,
    );
    assert!(
        done && tally.lost == 0,
        "{} events lost; the relay's log:\n{}",
        tally.lost,
        relay.log()
    );
    let (sql, slot, written) = (&client, &config.slot, parse_lsn(&written));
    wait_for(
        "the slot confirmed past the held rows",
        Duration::from_secs(60),
        move || async move { Ok(parse_lsn(&slot_confirmed(sql, slot).await?) >= written) },
    )
    .await?;
    assert_eq!(metric(&relay.scrape().await, STREAMING.name), 1);
    relay.stop()?;
    Ok(())
}
