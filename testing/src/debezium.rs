//! Debezium beside the relay (`ledger-bench peers`, the peers integration test,
//! docs/peers.md): Kafka Connect standalone with the PostgreSQL connector and the Outbox
//! Event Router, configured on the same outbox table as the relay (its own slot and
//! publication, its own topics) and tuned as the relay is: batches of up to 10 ms,
//! idempotent producer, acks from all replicas, five requests in flight, no compression,
//! positions confirmed every second. `deploy/peers connect WORKER CONNECTOR` runs it.

use std::path::Path;

use ra_ledger_cdc::infra::pg::ReplicationTarget;

/// The worker's settings that are not addresses or paths.
pub const WORKER_SETTINGS: &[(&str, &str)] = &[
    // The record key (the aggregate id) as UTF-8, the value (the payload bytes) unchanged.
    (
        "key.converter",
        "org.apache.kafka.connect.storage.StringConverter",
    ),
    (
        "value.converter",
        "org.apache.kafka.connect.converters.ByteArrayConverter",
    ),
    // Source offsets (Debezium's LSN) are written, and the slot confirmed, every second: the
    // relay's status_interval_ms.
    ("offset.flush.interval.ms", "1000"),
    // The producer as the relay's (cdc/src/config.rs): librdkafka's linger.ms 10,
    // batch.size 1,000,000 bytes, no compression, idempotence, acks=all, 5 in flight.
    ("producer.linger.ms", "10"),
    ("producer.batch.size", "1000000"),
    ("producer.compression.type", "none"),
    ("producer.enable.idempotence", "true"),
    ("producer.acks", "all"),
    ("producer.max.in.flight.requests.per.connection", "5"),
    // 64 MB of records buffered, as librdkafka's queue.buffering.max.kbytes.
    ("producer.buffer.memory", "67108864"),
];

/// The connector's settings that are not addresses, names or secrets.
pub const CONNECTOR_SETTINGS: &[(&str, &str)] = &[
    (
        "connector.class",
        "io.debezium.connector.postgresql.PostgresConnector",
    ),
    ("tasks.max", "1"),
    ("plugin.name", "pgoutput"),
    // Slot and publication exist before the backlog is written: made by the bench.
    ("publication.autocreate.mode", "disabled"),
    ("table.include.list", "public.outbox"),
    // Stream from the slot; do not copy the table first.
    ("snapshot.mode", "no_data"),
    // Tuned: Debezium's defaults are 500 ms, 2,048 and 8,192. The relay reads the slot as
    // fast as it comes and bounds 50,000 messages in flight.
    ("poll.interval.ms", "10"),
    ("max.batch.size", "20480"),
    ("max.queue.size", "81920"),
    // A restarted connector whose slot is still held by its killed predecessor's walsender
    // tries again every second, and for a minute (defaults 10 s and 6 tries): the relay
    // retries with a backoff from 100 ms and never gives up.
    ("slot.retry.delay.ms", "1000"),
    ("slot.max.retries", "60"),
    // The outbox is insert-only (its publication too): no tombstones.
    ("tombstones.on.delete", "false"),
    ("transforms", "outbox"),
    (
        "transforms.outbox.type",
        "io.debezium.transforms.outbox.EventRouter",
    ),
    // Our columns for the Event Router's (id, aggregateid, payload, aggregatetype).
    ("transforms.outbox.table.field.event.id", "event_id"),
    ("transforms.outbox.table.field.event.key", "aggregate_id"),
    ("transforms.outbox.table.field.event.payload", "payload"),
    ("transforms.outbox.route.by.field", "aggregate_type"),
    (
        "transforms.outbox.table.fields.additional.placement",
        "event_type:header:event_type",
    ),
];

/// Creates the insert-only publication `name` of the outbox, as the relay's (migration V1).
pub async fn create_publication(
    client: &tokio_postgres::Client,
    name: &str,
) -> Result<(), tokio_postgres::Error> {
    client
        .batch_execute(&format!(
            "CREATE PUBLICATION {name} FOR TABLE outbox WITH (publish = 'insert')"
        ))
        .await
}

/// Where one run of Connect keeps its files and what it connects to.
#[derive(Debug, Clone)]
pub struct ConnectSetup<'a> {
    /// The scratch database's replication target (host, port, user, password, database).
    pub database: &'a ReplicationTarget,
    /// Kafka bootstrap servers.
    pub brokers: &'a str,
    /// The connector's name and topic prefix.
    pub name: &'a str,
    /// Its replication slot.
    pub slot: &'a str,
    /// Its publication.
    pub publication: &'a str,
    /// Topic of aggregate type T: `<topic_prefix>T`.
    pub topic_prefix: &'a str,
    /// The folder of the properties and offsets files.
    pub dir: &'a Path,
    /// Port of the worker's REST listener (loopback).
    pub rest_port: u16,
}

impl ConnectSetup<'_> {
    /// Writes `worker.properties` and `connector.properties` into the folder; returns their
    /// paths. The database password goes into the connector file only (mode 0600).
    pub fn write(&self) -> std::io::Result<(std::path::PathBuf, std::path::PathBuf)> {
        let worker = self.dir.join("worker.properties");
        let connector = self.dir.join("connector.properties");
        let offsets = self.dir.join("offsets.dat");
        let mut worker_lines = vec![
            ("bootstrap.servers".to_owned(), self.brokers.to_owned()),
            (
                "offset.storage.file.filename".to_owned(),
                offsets.display().to_string(),
            ),
            (
                "listeners".to_owned(),
                format!("http://127.0.0.1:{}", self.rest_port),
            ),
        ];
        worker_lines.extend(owned(WORKER_SETTINGS));
        let mut connector_lines = vec![
            ("name".to_owned(), self.name.to_owned()),
            ("topic.prefix".to_owned(), self.name.to_owned()),
            ("database.hostname".to_owned(), self.database.host.clone()),
            ("database.port".to_owned(), self.database.port.to_string()),
            ("database.user".to_owned(), self.database.user.clone()),
            (
                "database.password".to_owned(),
                self.database.password.clone(),
            ),
            ("database.dbname".to_owned(), self.database.database.clone()),
            ("slot.name".to_owned(), self.slot.to_owned()),
            ("publication.name".to_owned(), self.publication.to_owned()),
            (
                "transforms.outbox.route.topic.replacement".to_owned(),
                format!("{}${{routedByValue}}", self.topic_prefix),
            ),
        ];
        connector_lines.extend(owned(CONNECTOR_SETTINGS));
        write_properties(&worker, &worker_lines)?;
        write_properties(&connector, &connector_lines)?;
        Ok((worker, connector))
    }
}

fn owned(settings: &[(&str, &str)]) -> impl Iterator<Item = (String, String)> {
    settings
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
}

/// A Java properties file of `lines`, readable by its owner only.
fn write_properties(path: &Path, lines: &[(String, String)]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)?;
    for (key, value) in lines {
        // Properties escapes: a backslash, and `:`/`=` never appear in our keys.
        writeln!(file, "{key}={}", value.replace('\\', "\\\\"))?;
    }
    Ok(())
}
