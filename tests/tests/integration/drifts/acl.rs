//! An ACL removed: a broker of its own with SASL/SCRAM and KRaft's StandardAuthorizer, the
//! relay's user allowed to read and describe the test's topics and the position reader's
//! group, and to write each topic it writes; its WRITE on the contact topic removed while it
//! streams. Kafka then refuses each produce with
//! TOPIC_AUTHORIZATION_FAILED; the relay holds on it (neither exits nor confirms), says at
//! `error` what it lacks and the grant that mends it ([`ra_ledger_cdc::relay::lacking`]),
//! and goes on by itself once the ACL is back. Nothing is lost.
//!
//! Found on the way: the relay's principal needs READ on the group
//! `ra-ledger-relay-position` too (librdkafka looks the group's coordinator up for the
//! position reader, which otherwise fails with GROUP_AUTHORIZATION_FAILED: the relay holds);
//! and with no WRITE left on any topic, Kafka refuses the idempotent producer its id
//! (CLUSTER_AUTHORIZATION_FAILED, librdkafka's fatal error): the same hold.

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use ra_ledger_cdc::metrics::{SESSIONS, STREAMING};
use ra_ledger_tests::broker::{BrokerServer, Security};
use ra_ledger_tests::relay::{Collector, insert_backlog, parse_lsn, test_config};
use ra_ledger_tests::stack::run_dir;
use ra_ledger_tests::tls::Pki;
use ra_ledger_tests::{TestDatabase, TestTopics, metric, random_suffix, wait_for};

use super::{LoggedRelay, ids_of_type, tally_after_all};
use crate::failover_harness::confirmed_flush;

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

/// The arguments of an ACL allowing `principal` `operations` on `resources` (`--topic`,
/// `--group` and their names), of `pattern` (`literal`, `prefixed`).
fn allow<'a>(
    principal: &'a str,
    operations: &[&'a str],
    resources: &[&'a str],
    pattern: &'a str,
) -> Vec<&'a str> {
    let mut args = vec!["--allow-principal", principal];
    for operation in operations {
        args.extend(["--operation", operation]);
    }
    args.extend(resources);
    args.extend(["--resource-pattern-type", pattern]);
    args
}

// Longer than our usual function on purpose: one scenario read top to bottom (the drift,
// what the system does meanwhile, the drift undone, every event counted); split into
// pieces, the order of its steps would be harder to follow.
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
    // What a relay's principal needs, as production grants it: READ and DESCRIBE on its
    // topics and on the position reader's group (librdkafka looks its coordinator up), and
    // WRITE on each topic it writes, the position topic's included.
    let group = "ra-ledger-relay-position";
    let mut read = vec!["--add"];
    read.extend(allow(
        &principal,
        &["Read", "Describe"],
        &["--topic", &prefix, "--group", group],
        "prefixed",
    ));
    acls(&broker, &pki, &read)?;
    let contact = config.topic("contact");
    let written_topics: Vec<String> = [
        contact.clone(),
        config.topic("assignment"),
        config.topic("reassignment"),
        config.position_topic(),
    ]
    .into();
    let mut resources = Vec::new();
    for topic in &written_topics {
        resources.extend(["--topic", topic.as_str()]);
    }
    let mut write = vec!["--add"];
    write.extend(allow(&principal, &["Write"], &resources, "literal"));
    acls(&broker, &pki, &write)?;

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

    // WRITE on the contact topic removed: every transaction of insert_backlog has contact rows.
    let mut revoke = vec!["--remove", "--force"];
    revoke.extend(allow(
        &principal,
        &["Write"],
        &["--topic", &contact],
        "literal",
    ));
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
        log.contains(&principal) && log.contains("WRITE ACL") && log.contains(&contact),
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
    let held_ids: HashSet<&str> = ids_of_type(&held, &client, "contact").await?;
    let arrived = collector
        .until(Duration::from_secs(5), |received| {
            received.iter().any(|r| held_ids.contains(r.id()))
        })
        .await;
    assert!(
        !arrived,
        "a contact event reached Kafka without the WRITE ACL"
    );
    let confirmed = confirmed_flush(&client, &config.slot).await?;
    assert!(
        parse_lsn(&confirmed) < parse_lsn(&written),
        "the slot confirmed {confirmed}, past rows Kafka refused (written up to {written})"
    );
    let mut relay = relay;
    assert!(relay.running()?, "the relay exited:\n{}", relay.log());

    let mut regrant = vec!["--add"];
    regrant.extend(allow(
        &principal,
        &["Write"],
        &["--topic", &contact],
        "literal",
    ));
    acls(&broker, &pki, &regrant)?;
    let tally = tally_after_all(
        &mut collector,
        &expected,
        "the WRITE ACL removed, then granted again",
    )
    .await;
    assert!(
        tally.lost == 0,
        "{} events lost; the relay's log:\n{}",
        tally.lost,
        relay.log()
    );
    let (sql, slot, written) = (&client, &config.slot, parse_lsn(&written));
    wait_for(
        "the slot confirmed past the held rows",
        Duration::from_secs(60),
        move || async move { Ok(parse_lsn(&confirmed_flush(sql, slot).await?) >= written) },
    )
    .await?;
    assert_eq!(metric(&relay.scrape().await, STREAMING.name), 1);
    relay.stop()?;
    Ok(())
}
