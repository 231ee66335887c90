//! Relay configuration: a TOML file (optional) plus environment overrides, validated once
//! before anything starts; declared and loaded as every config is
//! ([`crate::infra::settings::declare`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::infra::kafka::{BOOTSTRAP_SERVERS, KafkaSettings};
use crate::infra::registry_access::{AccessError, RegistryAccess};
use crate::infra::settings::{
    ConfigError, DatabaseUrl, EnvVar, KafkaMaps, Settings, check_identifier, env, listen, local,
    non_empty,
};
use crate::value_format::ValueFormat;

/// librdkafka settings the relay owns: changing them would break its guarantees.
const FIXED_KAFKA_SETTINGS: [(&str, &str); 4] = [
    ("enable.idempotence", "true"),
    ("acks", "all"),
    // Never give up on a message: while the broker is down the relay stops reading and
    // waits, rather than failing messages it would then have to re-order.
    ("message.timeout.ms", "0"),
    ("max.in.flight.requests.per.connection", "5"),
];

/// The transactional producer's `retry.backoff.ms` unless set: how soon the first
/// AddPartitionsToTxn after a commit is retried while the commit's markers are written.
const TRANSACTIONAL_RETRY_BACKOFF_MS: &str = "2";

/// How the relay delivers to Kafka (`delivery` in the file, `LEDGER_RELAY_DELIVERY`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryMode {
    /// Idempotent producer, slot confirmed behind Kafka's acknowledgements: nothing is
    /// lost, a crash resends what the slot had not confirmed (consumers deduplicate on the
    /// event id). The default: see `docs/exactly-once.md` for why exactly once is not yet.
    #[default]
    AtLeastOnce,
    /// Transactional producer: whole PostgreSQL transactions committed in Kafka
    /// transactions together with the relay's position, so a `read_committed` consumer
    /// sees each event once (see `docs/exactly-once.md` and [`crate::relay`]).
    ExactlyOnce,
}

impl DeliveryMode {
    /// Parses `exactly_once` or `at_least_once` (also with dashes).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "exactly_once" => Some(Self::ExactlyOnce),
            "at_least_once" => Some(Self::AtLeastOnce),
            _ => None,
        }
    }

    /// The name configuration files use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AtLeastOnce => "at_least_once",
            Self::ExactlyOnce => "exactly_once",
        }
    }
}

/// What a relay with `slot_failover` does while the primary has no standby that could take
/// over with a copy of its slot (`without_standby`): the state a promotion leaves until a
/// new standby is built. [`crate::relay::gate`] has the rules; `docs/operators.md`
/// ("After a promotion that left no standby") argues the default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WithoutStandby {
    /// Stream without the standby gate (the slot's failover turned off: PostgreSQL gates
    /// only failover slots) and page (`ra_relay_streaming_without_standby`); back behind
    /// the gate by itself once a standby's physical slot exists. The default: with no
    /// standby, no promotion can happen, so the gate has nobody to protect.
    #[default]
    Stream,
    /// Publish nothing until a standby is built with the slot `synchronized_standby_slots`
    /// names and has confirmed the WAL: the gate's promise kept for the next failover, at
    /// the price of CDC stopped until then.
    Hold,
}

impl WithoutStandby {
    /// The name configuration files use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stream => "stream",
            Self::Hold => "hold",
        }
    }
}

/// The suffix of the relay's position topic: `<topic_prefix>relay-position` unless
/// `position_topic` names another. A hyphen, which aggregate types do not use, keeps it
/// apart from the event topics.
pub const POSITION_TOPIC_SUFFIX: &str = "relay-position";

/// The position topic of the relay publishing under `topic_prefix` (what
/// `ledger topics create` creates, compacted, one partition).
pub fn position_topic(topic_prefix: &str) -> String {
    format!("{topic_prefix}{POSITION_TOPIC_SUFFIX}")
}

/// How long a Kafka transaction may stay open before the broker aborts it
/// (`transaction.timeout.ms`), by default; also how long the relay waits for a commit or an
/// abort. `transaction_timeout_ms` sets it.
pub const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// The broker's default `transaction.max.timeout.ms`: the most a producer may ask for.
pub const BROKER_MAX_TRANSACTION_TIMEOUT_MS: u64 = 900_000;

crate::settings! {
    const RELAY_ENV;
    /// Everything the relay needs.
    #[derive(Clone)]
    pub struct RelayConfig {
        /// PostgreSQL URL of a role with REPLICATION that may read the outbox
        /// (`LEDGER_DATABASE_URL`).
        database_url: DatabaseUrl = local::DATABASE_URL.into(),
            env env::DATABASE_URL => |c, v| c.database_url = v.into();
        /// File holding the password of `database_url`'s role
        /// (`LEDGER_DATABASE_PASSWORD_FILE`), so the URL needs none.
        database_password_file: Option<PathBuf> = None,
            env env::DATABASE_PASSWORD_FILE => |c, v| c.database_password_file = Some(v.into());
        /// Logical replication slot (created with pgoutput when missing;
        /// `LEDGER_RELAY_SLOT`).
        slot: String = local::SLOT.into(),
            env env::RELAY_SLOT => |c, v| c.slot = v.to_owned();
        /// Publication of the outbox table (created insert-only when missing).
        publication: String = local::PUBLICATION.into();
        /// Topic of an aggregate type: `<topic_prefix><aggregate_type>` unless `topics` maps
        /// it (`LEDGER_TOPIC_PREFIX`). The default follows Debezium's outbox EventRouter
        /// (`outbox.event.<type>`).
        topic_prefix: String = local::TOPIC_PREFIX.into(),
            env env::TOPIC_PREFIX => |c, v| c.topic_prefix = v.to_owned();
        /// Explicit topic per aggregate type, e.g. `{ contact = "ra.contacts" }`.
        topics: BTreeMap<String, String> = BTreeMap::new();
        /// The value format of an aggregate type's topic, `protobuf` (the default), `json`
        /// (the proto3 canonical JSON of the same envelope) or `confluent_protobuf` (the
        /// protobuf in Confluent's wire format, its schema in `schema_registry_url`), e.g.
        /// `{ assignment = "json" }`; for `contact`, `assignment` and `reassignment` (see
        /// [`crate::value_format`]). `LEDGER_VALUE_FORMATS` sets the whole map:
        /// `assignment=confluent_protobuf,contact=confluent_protobuf`.
        value_formats: BTreeMap<String, ValueFormat> = BTreeMap::new(),
            env env::VALUE_FORMATS => |c, v| c.value_formats = value_formats(v)?;
        /// The Confluent-compatible API of the schema registry where the relay registers
        /// events.proto for every `confluent_protobuf` topic when it starts, e.g.
        /// `http://127.0.0.1:18081/apis/ccompat/v7` (Apicurio's; `LEDGER_SCHEMA_REGISTRY_URL`).
        /// Required when a topic is `confluent_protobuf`; contacted only at start
        /// ([`crate::registry`]).
        schema_registry_url: Option<String> = None,
            env env::SCHEMA_REGISTRY_URL => |c, v| c.schema_registry_url = non_empty(v).map(str::to_owned);
        /// The user the registry knows the relay as (basic auth;
        /// `LEDGER_SCHEMA_REGISTRY_USER`), with `schema_registry_password_file`. Read-only
        /// credentials do when the schema is registered already (`ledger relay register`).
        schema_registry_user: Option<String> = None,
            env env::SCHEMA_REGISTRY_USER => |c, v| c.schema_registry_user = non_empty(v).map(str::to_owned);
        /// File holding that user's password (`LEDGER_SCHEMA_REGISTRY_PASSWORD_FILE`); the
        /// URL carries no credentials.
        schema_registry_password_file: Option<PathBuf> = None,
            env env::SCHEMA_REGISTRY_PASSWORD_FILE => |c, v| c.schema_registry_password_file = non_empty(v).map(PathBuf::from);
        /// The CA (PEM) that signed the registry's certificate, trusted instead of the
        /// built-in roots (`LEDGER_SCHEMA_REGISTRY_CA_FILE`); the certificate is always
        /// verified.
        schema_registry_ca_file: Option<PathBuf> = None,
            env env::SCHEMA_REGISTRY_CA_FILE => |c, v| c.schema_registry_ca_file = non_empty(v).map(PathBuf::from);
        /// librdkafka settings passed through, e.g. `bootstrap.servers`
        /// (`LEDGER_KAFKA_BROKERS`), `linger.ms`, `security.protocol`, `ssl.ca.location`
        /// (and the other `LEDGER_KAFKA_*` variables, [`crate::infra::kafka::ENV_SETTINGS`]).
        kafka: BTreeMap<String, String> =
            BTreeMap::from([(BOOTSTRAP_SERVERS.into(), local::KAFKA_BROKERS.into())]),
            env env::KAFKA_BROKERS => |c, v| c.kafka.insert(BOOTSTRAP_SERVERS.into(), v.to_owned()),
            shown keys;
        /// Secret librdkafka settings read from files, e.g.
        /// `{ "sasl.password" = "/run/secrets/kafka-password" }`.
        kafka_secret_files: BTreeMap<String, PathBuf> = BTreeMap::new();
        /// How often to emit a heartbeat through the slot, so an idle outbox does not pin
        /// WAL.
        heartbeat_interval_ms: u64 = 10_000;
        /// Most messages in flight to Kafka before the relay stops reading the slot.
        max_in_flight: usize = 50_000;
        /// How long SIGTERM waits for in-flight deliveries before exiting.
        shutdown_grace_ms: u64 = 10_000;
        /// Where `/metrics` listens; empty string to disable (`LEDGER_METRICS_LISTEN`).
        metrics_listen: Option<SocketAddr> = local::RELAY_METRICS.parse().ok(),
            env env::METRICS_LISTEN => |c, v| c.metrics_listen = listen(v)?;
        /// Longest wait between reconnect attempts.
        reconnect_backoff_max_ms: u64 = 30_000;
        /// How often the confirmed position is repeated to PostgreSQL while the relay
        /// confirms nothing new; a newer one is reported within 10 ms
        /// (`relay::connect::STATUS_PROMPT`).
        status_interval_ms: u64 = 1_000;
        /// `at_least_once` (the default) or `exactly_once` (`LEDGER_RELAY_DELIVERY`).
        delivery: DeliveryMode = DeliveryMode::AtLeastOnce,
            env env::RELAY_DELIVERY => |c, v| c.delivery = DeliveryMode::parse(v)
                .ok_or("expected exactly_once or at_least_once")?;
        /// Exactly once: a Kafka transaction closes at the first PostgreSQL transaction
        /// boundary at which it holds this many messages. A PostgreSQL transaction is never
        /// split, so one larger than this is committed whole.
        transaction_max_messages: usize = 50_000;
        /// Exactly once: the same bound in payload bytes.
        transaction_max_bytes: usize = 32 * 1024 * 1024;
        /// Exactly once: the longest a Kafka transaction stays open while the slot streams
        /// without a pause (the relay commits at once whenever it has read all the server
        /// sent).
        transaction_max_ms: u64 = 250;
        /// Exactly once: the compacted one-partition topic of the relay's position; default
        /// `<topic_prefix>relay-position`.
        position_topic: Option<String> = None;
        /// PostgreSQL 17 and later: the slot is a failover slot, synchronized to the standbys
        /// that run `sync_replication_slots`, so that it survives a promotion. The relay
        /// creates the slot with `FAILOVER` (or turns it on for an existing slot), and
        /// streams only behind the primary's `synchronized_standby_slots` naming the
        /// standbys' physical slots: without that gate it could publish what a promoted
        /// standby never had. It holds while the gate is wrong, and `without_standby` says
        /// what it does while there is no standby (docs/operators.md, "Failover").
        slot_failover: bool = false;
        /// With `slot_failover`: what the relay does while the primary has no standby (no
        /// persistent physical replication slot), as right after a promotion that left
        /// none: `stream` (the default) streams without the standby gate, its slot's
        /// failover off, and pages; `hold` publishes nothing until a standby is built with
        /// the slot `synchronized_standby_slots` names (docs/operators.md, "After a
        /// promotion that left no standby").
        without_standby: WithoutStandby = WithoutStandby::Stream;
        /// How often the relay checks what holds decoding back (the standby gate), whether
        /// the primary has a standby, and whether the standbys of a multi-host URL have the
        /// slot ready to take over.
        health_check_interval_ms: u64 = 5_000;
        /// pgoutput's `binary` option: every column in its type's binary form, so the
        /// outbox's `bytea` payload travels as its bytes, not as twice as many hex digits,
        /// and a uuid as 16 bytes. `false` asks for text (docs/benchmarks.md has both
        /// measured).
        pgoutput_binary: bool = true;
        /// At least once: when the relay has read all the server sent, it flushes the
        /// producer (librdkafka's flush sends at once what lingers), so a quiet stream's last
        /// messages do not wait out `linger.ms`; a busy stream never goes idle and keeps its
        /// batches, and so does a drain: the relay does not flush while the newest
        /// transaction it read committed a second ago or more. Exactly once always commits,
        /// and so flushes, when idle.
        flush_when_idle: bool = true;
        /// Exactly once: `transaction.timeout.ms`, how long one Kafka transaction may take
        /// before the broker aborts it. A PostgreSQL transaction is never split, so the
        /// largest one must publish within it (a Kafka transaction that times out holding
        /// one is refused, naming this setting). At most the broker's
        /// `transaction.max.timeout.ms` (15 minutes).
        transaction_timeout_ms: u64 = TRANSACTION_TIMEOUT.as_millis() as u64;
    }
}

impl Settings for RelayConfig {
    const ENV: &'static [EnvVar<Self>] = RELAY_ENV;

    fn kafka_maps(&mut self) -> Option<KafkaMaps<'_>> {
        Some((&mut self.kafka, &mut self.kafka_secret_files))
    }
}

impl RelayConfig {
    /// [`Settings::read`] (the file at `path`, then the environment: [`RELAY_ENV`] and the
    /// Kafka security variables), then the secrets and the checks: what a tool that takes
    /// the relay's config and no flag of it uses. `ledger relay` reads, applies its flags,
    /// then resolves and validates.
    pub fn load(path: Option<&str>) -> Result<Self, ConfigError> {
        let mut config = Self::read(path)?;
        config.resolve_secrets()?;
        config.validate()?;
        Ok(config)
    }

    /// Puts the password of `database_password_file` into `database_url`; again after the
    /// URL changed (idempotent).
    pub fn resolve_secrets(&mut self) -> Result<(), ConfigError> {
        self.database_url = self
            .database_url
            .with_password_file(self.database_password_file.as_deref())?;
        Ok(())
    }

    /// Checks every field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.database_url.check()?;
        check_identifier("slot", "slot", &self.slot)?;
        check_identifier("publication", "publication", &self.publication)?;
        if self
            .kafka
            .get(BOOTSTRAP_SERVERS)
            .is_none_or(|servers| servers.is_empty())
        {
            return Err(ConfigError::invalid(
                "kafka.\"bootstrap.servers\"",
                "",
                "the relay needs at least one broker",
            ));
        }
        for (key, required) in FIXED_KAFKA_SETTINGS {
            if let Some(value) = self.kafka.get(key)
                && value != required
            {
                return Err(ConfigError::invalid(
                    "kafka",
                    format!("{key}={value}"),
                    "the relay sets this itself; other values would break ordering or lose messages",
                ));
            }
        }
        if !(1_000..=BROKER_MAX_TRANSACTION_TIMEOUT_MS).contains(&self.transaction_timeout_ms) {
            return Err(ConfigError::invalid(
                "transaction_timeout_ms",
                self.transaction_timeout_ms.to_string(),
                format!(
                    "between 1000 and the broker's transaction.max.timeout.ms ({BROKER_MAX_TRANSACTION_TIMEOUT_MS} unless raised)"
                ),
            ));
        }
        self.kafka_settings().validate()?;
        crate::value_format::validate(&self.value_formats)?;
        self.check_registry()?;
        for (field, value) in [
            ("max_in_flight", self.max_in_flight as u64),
            ("heartbeat_interval_ms", self.heartbeat_interval_ms),
            ("status_interval_ms", self.status_interval_ms),
            (
                "transaction_max_messages",
                self.transaction_max_messages as u64,
            ),
            ("transaction_max_bytes", self.transaction_max_bytes as u64),
            ("transaction_max_ms", self.transaction_max_ms),
            ("health_check_interval_ms", self.health_check_interval_ms),
            ("transaction_timeout_ms", self.transaction_timeout_ms),
        ] {
            if value == 0 {
                return Err(ConfigError::invalid(field, "0", "must be at least 1"));
            }
        }
        Ok(())
    }

    /// A framed topic needs a registry, and the registry's URL must be one.
    fn check_registry(&self) -> Result<(), ConfigError> {
        let framed: Vec<&str> = self
            .value_formats
            .iter()
            .filter(|(_, format)| format.is_framed())
            .map(|(aggregate_type, _)| aggregate_type.as_str())
            .collect();
        match &self.schema_registry_url {
            None if !framed.is_empty() => Err(ConfigError::invalid(
                "schema_registry_url",
                "",
                format!(
                    "value_formats sets confluent_protobuf for {}: name the schema registry's Confluent-compatible API (LEDGER_SCHEMA_REGISTRY_URL), e.g. http://127.0.0.1:18081/apis/ccompat/v7",
                    framed.join(", ")
                ),
            )),
            None => Ok(()),
            Some(_) => self.registry_access().check().map(drop).map_err(
                |AccessError {
                     field,
                     value,
                     reason,
                 }| ConfigError::invalid(field, value, reason),
            ),
        }
    }

    /// How to reach the schema registry: `schema_registry_url` and its credentials.
    pub fn registry_access(&self) -> RegistryAccess {
        RegistryAccess {
            url: self.schema_registry_url.clone().unwrap_or_default(),
            user: self.schema_registry_user.clone(),
            password_file: self.schema_registry_password_file.clone(),
            ca_file: self.schema_registry_ca_file.clone(),
        }
    }

    /// The topic of an aggregate type.
    pub fn topic(&self, aggregate_type: &str) -> String {
        self.topics
            .get(aggregate_type)
            .cloned()
            .unwrap_or_else(|| format!("{}{aggregate_type}", self.topic_prefix))
    }

    /// The value format of an aggregate type's topic.
    pub fn value_format(&self, aggregate_type: &str) -> ValueFormat {
        self.value_formats
            .get(aggregate_type)
            .copied()
            .unwrap_or_default()
    }

    /// The librdkafka settings of the producer: the pass-through ones, then the fixed ones.
    pub fn producer_settings(&self) -> BTreeMap<String, String> {
        let mut settings = BTreeMap::from([
            // Batches of up to 10 ms: fewer, larger record batches are far less work for the
            // broker and its consumers. Measured at 2,000 events/s on the dev broker: p99
            // commit -> consumer receipt 36-40 ms with 10-20 ms, 93-134 ms with 1 ms, at a
            // cost of about 1 ms at the median.
            ("linger.ms".to_owned(), "10".to_owned()),
            // A broker back from a restart is reached within a second, as the Java client's
            // default does: librdkafka doubles its wait between attempts up to 10 s, so a
            // broker down for ten seconds or more (a kill and a JVM start) left the relay
            // idle up to 10 s after it answered again, with the slot's backlog growing.
            ("reconnect.backoff.max.ms".to_owned(), "1000".to_owned()),
            (
                "queue.buffering.max.messages".to_owned(),
                (self.max_in_flight * 2).max(100_000).to_string(),
            ),
        ]);
        settings.extend(self.kafka.clone());
        for (key, value) in FIXED_KAFKA_SETTINGS {
            settings.insert(key.into(), value.into());
        }
        settings
    }

    /// The transactional producer's settings (exactly once) for the relay reading the
    /// cluster `system_id`: the producer's, with its [`RelayConfig::transactional_id`], and
    /// messages that time out with the transaction rather than never (a message stuck past
    /// it fails, the transaction aborts, and the next session resends).
    pub fn transactional_producer_settings(&self, system_id: &str) -> KafkaSettings {
        let mut settings = self.kafka_settings();
        let timeout = self.transaction_timeout_ms.to_string();
        for (key, value) in [
            ("transactional.id", self.transactional_id(system_id)),
            ("transaction.timeout.ms", timeout.clone()),
            ("message.timeout.ms", timeout),
        ] {
            settings.properties.insert(key.into(), value);
        }
        // After a commit, the coordinator answers the next transaction's first
        // AddPartitionsToTxn with CONCURRENT_TRANSACTIONS until its markers are written (a
        // few milliseconds); the vendored librdkafka retries after `retry.backoff.ms` (at
        // most 20 ms, upstream's fixed wait, which was the exactly-once relay's p99:
        // vendor/rdkafka-sys/VENDORED.md). Unless the operator set it.
        settings
            .properties
            .entry("retry.backoff.ms".into())
            .or_insert_with(|| TRANSACTIONAL_RETRY_BACKOFF_MS.into());
        settings
    }

    /// `ra-ledger-relay-<system id>-<slot>`: the transactional id of the relay reading
    /// `slot` on the cluster `system_id` (`IDENTIFY_SYSTEM`'s). One per slot of a cluster,
    /// so a new instance fences the older one, also after a failover (a standby has its
    /// primary's system identifier); and two clusters whose slots share a name (two
    /// deployments of the same template on one Kafka) never fence each other. A slot name
    /// is unique within a cluster, so the database need not be in it.
    pub fn transactional_id(&self, system_id: &str) -> String {
        format!("ra-ledger-relay-{system_id}-{}", self.slot)
    }

    /// The topic of the relay's position (exactly once).
    pub fn position_topic(&self) -> String {
        self.position_topic
            .clone()
            .unwrap_or_else(|| position_topic(&self.topic_prefix))
    }

    /// Settings of the relay's own consumers (the position reader): the pass-through
    /// settings and secret files, without the producer's.
    pub fn consumer_settings(&self) -> KafkaSettings {
        KafkaSettings {
            properties: self.kafka.clone(),
            secret_files: self.kafka_secret_files.clone(),
        }
    }

    /// The producer's settings and secret files.
    pub fn kafka_settings(&self) -> KafkaSettings {
        KafkaSettings {
            properties: self.producer_settings(),
            secret_files: self.kafka_secret_files.clone(),
        }
    }

    /// Exactly once: how long a Kafka transaction may take (`transaction_timeout_ms`).
    pub fn transaction_timeout(&self) -> Duration {
        Duration::from_millis(self.transaction_timeout_ms)
    }

    /// The producer's `linger.ms`, as set or defaulted.
    pub fn linger_ms(&self) -> u64 {
        self.producer_settings()
            .get("linger.ms")
            .and_then(|linger| linger.parse().ok())
            .unwrap_or(0)
    }

    /// Heartbeat interval.
    pub fn heartbeat_interval(&self) -> Duration {
        Duration::from_millis(self.heartbeat_interval_ms)
    }
}

/// `LEDGER_VALUE_FORMATS`: `aggregate=format` pairs separated by commas (empty: none).
fn value_formats(text: &str) -> Result<BTreeMap<String, ValueFormat>, &'static str> {
    const EXPECTED: &str = "expected aggregate=format pairs separated by commas, each format protobuf, json or confluent_protobuf";
    text.split(',')
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (aggregate_type, format) = pair.split_once('=').ok_or(EXPECTED)?;
            let format = ValueFormat::parse(format).ok_or(EXPECTED)?;
            Ok((aggregate_type.trim().to_owned(), format))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_debezium_layout_and_validate() {
        let config = RelayConfig::default();
        config.validate().unwrap();
        assert_eq!(config.topic("contact"), "outbox.event.contact");
        let settings = config.producer_settings();
        assert_eq!(settings["enable.idempotence"], "true");
        assert_eq!(settings["acks"], "all");
    }

    #[test]
    fn topics_can_be_mapped_and_settings_passed_through() {
        let config: RelayConfig = toml::from_str(
            r#"
            topic_prefix = "ra."
            topics = { contact = "contacts-v1" }
            kafka = { "bootstrap.servers" = "k:9092", "linger.ms" = "20", "compression.type" = "zstd" }
            "#,
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.topic("contact"), "contacts-v1");
        assert_eq!(config.topic("assignment"), "ra.assignment");
        let settings = config.producer_settings();
        assert_eq!(settings["linger.ms"], "20");
        assert_eq!(settings["compression.type"], "zstd");
        // The relay's own default, which a setting of the operator's would replace.
        assert_eq!(settings["reconnect.backoff.max.ms"], "1000");
    }

    #[test]
    fn refuses_settings_that_break_guarantees_and_unknown_fields() {
        let unsafe_acks: RelayConfig =
            toml::from_str(r#"kafka = { "bootstrap.servers" = "k:9092", acks = "1" }"#).unwrap();
        let error = unsafe_acks.validate().unwrap_err().to_string();
        assert!(error.contains("acks=1"), "{error}");
        assert!(toml::from_str::<RelayConfig>("slott = \"x\"").is_err());
        let bad_slot = RelayConfig {
            slot: "Bad-Slot".into(),
            ..RelayConfig::default()
        };
        assert!(
            bad_slot
                .validate()
                .unwrap_err()
                .to_string()
                .contains("slot")
        );
        let debug = format!("{:?}", RelayConfig::default());
        assert!(!debug.contains("ledger:ledger"), "{debug}");
    }

    #[test]
    fn value_formats_name_envelope_topics_and_known_formats() {
        let config: RelayConfig = toml::from_str(
            r#"
            value_formats = { assignment = "json", contact = "protobuf" }
            "#,
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.value_format("assignment"), ValueFormat::Json);
        assert_eq!(config.value_format("contact"), ValueFormat::Protobuf);
        assert_eq!(config.value_format("reassignment"), ValueFormat::Protobuf);
        let unknown_topic: RelayConfig =
            toml::from_str(r#"value_formats = { assignments = "json" }"#).unwrap();
        let error = unknown_topic.validate().unwrap_err().to_string();
        assert!(
            error.starts_with("config: value_formats = \"assignments\": not an aggregate type"),
            "{error}"
        );
        let unknown_format =
            toml::from_str::<RelayConfig>(r#"value_formats = { contact = "avro" }"#)
                .err()
                .map(|error| error.to_string())
                .unwrap_or_default();
        assert!(
            unknown_format.contains(
                "unknown value format `avro`, expected one of `protobuf`, `json`, `confluent_protobuf`"
            ),
            "{unknown_format}"
        );
    }

    #[test]
    fn a_framed_topic_needs_a_registry_url_that_is_one() {
        let framed: RelayConfig =
            toml::from_str(r#"value_formats = { assignment = "confluent_protobuf" }"#).unwrap();
        assert_eq!(
            framed.value_format("assignment"),
            ValueFormat::ConfluentProtobuf { schema_id: None }
        );
        let error = framed.validate().unwrap_err().to_string();
        assert!(
            error.starts_with(
                "config: schema_registry_url = \"\": value_formats sets confluent_protobuf for assignment"
            ),
            "{error}"
        );
        let registry = RelayConfig {
            schema_registry_url: Some("http://127.0.0.1:18081/apis/ccompat/v7".into()),
            ..framed.clone()
        };
        registry.validate().unwrap();
        let bad = RelayConfig {
            schema_registry_url: Some("127.0.0.1:18081".into()),
            ..framed
        };
        let error = bad.validate().unwrap_err().to_string();
        assert!(
            error.contains("schema_registry_url = \"127.0.0.1:18081\""),
            "{error}"
        );
        let mut from_env = RelayConfig::default();
        crate::infra::settings::overlay(&mut from_env, RELAY_ENV, |name| match name {
            "LEDGER_VALUE_FORMATS" => Some("assignment=confluent_protobuf, contact=json".into()),
            "LEDGER_SCHEMA_REGISTRY_URL" => Some("http://r:1/apis/ccompat/v7".into()),
            _ => None,
        })
        .unwrap();
        from_env.validate().unwrap();
        assert_eq!(from_env.value_format("contact"), ValueFormat::Json);
        assert!(from_env.value_format("assignment").is_framed());
        let mut typo = RelayConfig::default();
        let error = crate::infra::settings::overlay(&mut typo, RELAY_ENV, |name| {
            (name == "LEDGER_VALUE_FORMATS").then(|| "assignment:json".into())
        })
        .unwrap_err()
        .to_string();
        assert!(
            error.contains(
                "LEDGER_VALUE_FORMATS = \"assignment:json\": expected aggregate=format pairs"
            ),
            "{error}"
        );
    }

    #[test]
    fn without_a_standby_the_relay_streams_unless_told_to_hold() {
        assert_eq!(
            RelayConfig::default().without_standby,
            WithoutStandby::Stream
        );
        let hold: RelayConfig = toml::from_str(
            r#"
            slot_failover = true
            without_standby = "hold"
            "#,
        )
        .unwrap();
        hold.validate().unwrap();
        assert_eq!(hold.without_standby, WithoutStandby::Hold);
        assert_eq!(hold.without_standby.as_str(), "hold");
        let unknown = toml::from_str::<RelayConfig>(r#"without_standby = "wait""#)
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(unknown.contains("expected `stream` or `hold`"), "{unknown}");
    }

    #[test]
    fn exactly_once_uses_one_transactional_id_per_slot_and_its_position_topic() {
        let config: RelayConfig = toml::from_str(
            r#"
            delivery = "exactly_once"
            slot = "orders"
            topic_prefix = "ra."
            "#,
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.delivery, DeliveryMode::ExactlyOnce);
        assert_eq!(RelayConfig::default().delivery, DeliveryMode::AtLeastOnce);
        let settings = config.transactional_producer_settings("7321").properties;
        assert_eq!(settings["transactional.id"], "ra-ledger-relay-7321-orders");
        assert_eq!(settings["enable.idempotence"], "true");
        assert_eq!(
            settings["message.timeout.ms"],
            settings["transaction.timeout.ms"]
        );
        assert_eq!(
            settings["retry.backoff.ms"], "2",
            "the markers' wait, retried soon"
        );
        let mut chosen = config.clone();
        chosen.kafka.insert("retry.backoff.ms".into(), "50".into());
        assert_eq!(
            chosen.transactional_producer_settings("7321").properties["retry.backoff.ms"],
            "50",
            "the operator's setting wins"
        );
        assert_eq!(config.position_topic(), "ra.relay-position");
        assert_eq!(
            DeliveryMode::parse("at-least-once"),
            Some(DeliveryMode::AtLeastOnce)
        );
        assert_eq!(DeliveryMode::parse("twice"), None);
        assert!(toml::from_str::<RelayConfig>("delivery = \"twice\"").is_err());
        let no_bound = RelayConfig {
            transaction_max_ms: 0,
            ..RelayConfig::default()
        };
        assert!(no_bound.validate().is_err());
    }
}
