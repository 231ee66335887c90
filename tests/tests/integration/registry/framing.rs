//! The relay with topics framed for the registry: every record in Confluent's wire format
//! with the id the registry gave, in both delivery modes, and the topic left in the old
//! format unchanged; a registry down at start, or refusing the schema, stops the relay
//! before it publishes; a registry gone after the start changes nothing, and the relay asks
//! it nothing per record.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ra_ledger_cdc::config::DeliveryMode;
use ra_ledger_cdc::confluent_wire::Framed;
use ra_ledger_cdc::consumer::event_router;
use ra_ledger_cdc::registry::{COMPATIBILITY, RegistryError, value_subject};
use ra_ledger_cdc::relay::RelayError;
use ra_ledger_proto::EVENTS_PROTO;
use ra_ledger_tests::api::TestApi;
use ra_ledger_tests::process::free_port;
use ra_ledger_tests::relay::{Collector, RunningRelay, refusal_once_the_registry_answers};
use ra_ledger_tests::{TestDatabase, TestTopics};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::contracts::asyncapi::{Contract, Seen};

use super::{
    assign_businesses, framed_config, read_topic, registry_client, stored_payloads,
    write_assignments,
};

/// In `delivery`: assignments and reassignments framed, contacts left in the old format.
/// Every assignment record is the stored envelope behind the magic byte, the id the
/// registry holds for the topic's subject and the envelope's message index; the subject is
/// `BACKWARD_TRANSITIVE` and its schema is events.proto. Every contact record is, to a
/// consumer of Debezium's Event Router shape, exactly the stored bytes.
async fn framed_topics_scenario(delivery: DeliveryMode) -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let mut topics = TestTopics::new();
    let config = framed_config(
        &database,
        &mut topics,
        delivery,
        &["assignment", "reassignment"],
    )
    .await?;
    let relay = RunningRelay::start(config.clone());
    write_assignments(&api, 30).await?;

    let client = database.connect().await?;
    let assignments = stored_payloads(&client, "assignment").await?;
    let contacts = stored_payloads(&client, "contact").await?;
    let expected: HashSet<String> = assignments.keys().chain(contacts.keys()).cloned().collect();
    let mut collector = Collector::new(&topics)?;
    assert!(
        collector
            .until_all(Duration::from_secs(120), &expected)
            .await,
        "{} of {} events reached Kafka",
        collector.distinct_ids().len(),
        expected.len()
    );
    relay.stop().await?;

    let registry = registry_client();
    let assignment_topic = config.topic("assignment");
    let subject = value_subject(&assignment_topic);
    let schema_id = registry
        .latest_id(&subject)
        .await?
        .expect("the relay registered the assignment topic's subject");
    assert_eq!(registry.compatibility(&subject).await?, COMPATIBILITY);
    assert_eq!(registry.schema(schema_id).await?, EVENTS_PROTO);
    assert!(
        registry
            .latest_id(&value_subject(&config.topic("contact")))
            .await?
            .is_none(),
        "the unframed topic's subject was registered"
    );

    // 0x00, the id in 4 bytes big-endian, the envelope's message index 0.
    let mut prefix = vec![0u8];
    prefix.extend_from_slice(&schema_id.to_be_bytes());
    prefix.push(0);
    let mut framed = 0;
    for message in collector
        .received
        .iter()
        .filter(|m| m.topic == assignment_topic)
    {
        let parsed = Framed::parse(&message.payload)?;
        assert_eq!(parsed.schema_id, schema_id, "{}", message.id());
        assert_eq!(parsed.indexes, vec![0], "{}", message.id());
        assert_eq!(&message.payload[..6], prefix.as_slice(), "{}", message.id());
        assert_eq!(
            parsed.payload,
            assignments[message.id()].as_slice(),
            "{}: not the stored envelope",
            message.id()
        );
        framed += 1;
    }
    assert!(framed >= assignments.len(), "{framed} framed records");

    // The old format, read as a consumer of Debezium's Event Router reads it.
    let contact_records = read_topic(&topics, &config.topic("contact"))?;
    assert!(!contact_records.is_empty());
    for record in &contact_records {
        let routed = event_router::read(record)?;
        assert_eq!(
            routed.payload,
            contacts[routed.id].as_slice(),
            "{}: the default format changed",
            routed.id
        );
    }
    // And as docs/asyncapi.yaml describes them: the framed message on the framed topic, the
    // protobuf one on the other.
    let contract = Contract::load()?;
    for message in &collector.received {
        let seen = Seen {
            topic: message.topic[topics.prefix.len() + 1..].to_owned(),
            partition: message.partition,
            offset: message.offset,
            key: Some(message.key.clone()),
            headers: message.headers.clone().into_iter().collect(),
            payload: message.payload.clone(),
        };
        let (_, name) = contract.identify(&seen).map_err(anyhow::Error::msg)?;
        let expected = if message.topic == assignment_topic {
            "AssignmentEventRegistry"
        } else {
            "ContactEvent"
        };
        assert_eq!(name, expected, "{}", message.id());
    }
    eprintln!(
        "{delivery:?}: {framed} framed records under schema id {schema_id}, {} contact records unchanged",
        contact_records.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framed_values_at_least_once() -> anyhow::Result<()> {
    framed_topics_scenario(DeliveryMode::AtLeastOnce).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framed_values_exactly_once() -> anyhow::Result<()> {
    framed_topics_scenario(DeliveryMode::ExactlyOnce).await
}

/// Nothing at all reached the test's topics within a few seconds.
async fn nothing_published(topics: &TestTopics) -> anyhow::Result<()> {
    let mut collector = Collector::new(topics)?;
    collector
        .until(Duration::from_secs(3), |received| !received.is_empty())
        .await;
    assert!(
        collector.received.is_empty(),
        "published: {:?}",
        collector
            .received
            .iter()
            .map(|m| m.id())
            .collect::<Vec<_>>()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_down_at_start_stops_the_relay_before_it_publishes() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let mut topics = TestTopics::new();
    let mut config = framed_config(
        &database,
        &mut topics,
        DeliveryMode::AtLeastOnce,
        &["assignment"],
    )
    .await?;
    // Nothing listens there.
    let down = format!("http://127.0.0.1:{}/apis/ccompat/v7", free_port()?);
    config.schema_registry_url = Some(down.clone());
    write_assignments(&api, 3).await?;
    let error = RunningRelay::start(config)
        .refusal(Duration::from_secs(60))
        .await?;
    assert!(
        matches!(&error, RelayError::Registry(RegistryError::Unreachable { url, .. }) if *url == down),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains(&format!("the schema registry at {down} did not answer"))
            && message.contains("while looking up events.proto under subject")
            && message.contains(
                "The relay publishes nothing until it has every framed topic's schema id"
            ),
        "{message}"
    );
    nothing_published(&topics).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_the_registry_refuses_stops_the_relay_with_the_registrys_reason()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let mut topics = TestTopics::new();
    let config = framed_config(
        &database,
        &mut topics,
        DeliveryMode::AtLeastOnce,
        &["assignment"],
    )
    .await?;
    // The subject already holds a version this build's events.proto breaks: there,
    // stream_version was a string.
    let subject = value_subject(&config.topic("assignment"));
    let registry = registry_client();
    registry.set_compatibility(&subject, COMPATIBILITY).await?;
    let older = EVENTS_PROTO.replace("int64 stream_version = 3;", "string stream_version = 3;");
    assert_ne!(older, EVENTS_PROTO);
    registry.register(&subject, &older).await?;
    write_assignments(&api, 3).await?;

    let error = refusal_once_the_registry_answers(&config, Duration::from_secs(60)).await?;
    // Kept for the verdict's "refused start", as any refusal is.
    let recorded: Option<String> = database
        .connect()
        .await?
        .query_opt(
            "SELECT refused FROM relay_lag_reports WHERE slot_name = $1",
            &[&config.slot],
        )
        .await?
        .and_then(|row| row.get(0));
    assert!(
        recorded
            .as_deref()
            .is_some_and(|text| text.contains("Incompatible artifact")),
        "{recorded:?}"
    );
    let RelayError::Registry(RegistryError::Incompatible {
        subject: refused,
        level,
        reason,
        ..
    }) = &error
    else {
        panic!("not refused as incompatible: {error:?}");
    };
    assert_eq!(refused, &subject);
    assert_eq!(level, COMPATIBILITY);
    // Apicurio's own words.
    assert!(
        reason.contains("Incompatible artifact") && reason.contains("Field type changed"),
        "{reason}"
    );
    assert!(error.to_string().contains(reason.as_str()), "{error}");
    nothing_published(&topics).await
}

/// A TCP path to the registry that counts the HTTP requests through it and can be cut.
struct CuttablePath {
    port: u16,
    requests: Arc<AtomicUsize>,
    connections: JoinSet<()>,
}

impl CuttablePath {
    async fn to(upstream: String) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let requests = Arc::new(AtomicUsize::new(0));
        let mut connections = JoinSet::new();
        let counted = Arc::clone(&requests);
        connections.spawn(async move {
            let mut open = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let counted = Arc::clone(&counted);
                open.spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        let _ = relay_counting(client, server, counted).await;
                    }
                });
            }
        });
        Ok(Self {
            port,
            requests,
            connections,
        })
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/apis/ccompat/v7", self.port)
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Closes the listener and every connection through it.
    fn cut(&mut self) {
        self.connections.abort_all();
    }
}

/// Copies bytes both ways, counting requests from the client: each HTTP/1.1 request carries
/// one `Host` header.
async fn relay_counting(
    client: TcpStream,
    server: TcpStream,
    requests: Arc<AtomicUsize>,
) -> std::io::Result<()> {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upload = async move {
        let mut buffer = vec![0u8; 16 * 1024];
        let mut tail: Vec<u8> = Vec::new();
        loop {
            let read = client_read.read(&mut buffer).await?;
            if read == 0 {
                return server_write.shutdown().await;
            }
            let mut seen = std::mem::take(&mut tail);
            seen.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&seen).to_ascii_lowercase();
            requests.fetch_add(text.matches("\r\nhost:").count(), Ordering::SeqCst);
            // Keep the last bytes: a header split between two reads still counts once.
            tail = seen[seen.len().saturating_sub(6)..].to_vec();
            server_write.write_all(&buffer[..read]).await?;
        }
    };
    let download = tokio::io::copy(&mut server_read, &mut client_write);
    let (up, down) = tokio::join!(upload, download);
    up?;
    down.map(drop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_asks_the_registry_once_at_start_and_publishes_on_without_it()
-> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let api = TestApi::new(&database)?;
    let mut topics = TestTopics::new();
    let mut config = framed_config(
        &database,
        &mut topics,
        DeliveryMode::AtLeastOnce,
        &["contact", "assignment", "reassignment"],
    )
    .await?;
    let registry = ra_ledger_tests::registry::registry();
    let mut path = CuttablePath::to(registry.root.trim_start_matches("http://").to_owned()).await?;
    config.schema_registry_url = Some(path.url());
    let relay = RunningRelay::start(config.clone());
    write_assignments(&api, 3).await?;
    let client = database.connect().await?;
    let before = stored_payloads(&client, "assignment").await?;
    let first: HashSet<String> = before.keys().cloned().collect();
    let mut collector = Collector::new(&topics)?;
    assert!(collector.until_all(Duration::from_secs(60), &first).await);
    // Per framed subject, new: events.proto looked up (not there), the subject's own level
    // read (none), its compatibility set, events.proto registered.
    assert_eq!(path.requests(), 3 * 4, "requests to the registry at start");

    path.cut();
    assign_businesses(&api, 60).await?;
    let assignments = stored_payloads(&client, "assignment").await?;
    let expected: HashSet<String> = assignments
        .keys()
        .filter(|id| !before.contains_key(*id))
        .cloned()
        .collect();
    assert!(
        collector
            .until_all(Duration::from_secs(120), &expected)
            .await,
        "published {} of {} with the registry cut",
        collector.distinct_ids().intersection(&expected).count(),
        expected.len()
    );
    relay.stop().await?;
    let schema_id = registry_client()
        .latest_id(&value_subject(&config.topic("assignment")))
        .await?
        .expect("registered");
    for message in collector
        .received
        .iter()
        .filter(|m| expected.contains(m.id()))
    {
        let parsed = Framed::parse(&message.payload)?;
        assert_eq!(
            (parsed.schema_id, parsed.payload),
            (schema_id, assignments[message.id()].as_slice())
        );
    }
    assert_eq!(path.requests(), 3 * 4, "the relay asked the registry again");
    eprintln!(
        "{} records framed with the registry cut; 12 requests in all, at start",
        collector.received.len()
    );
    Ok(())
}
