//! `ledger worker`'s settings: [`WorkerConfig`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ra_ledger_cdc::infra::kafka::{BOOTSTRAP_SERVERS, KafkaSettings};
use ra_ledger_cdc::infra::settings::{
    ConfigError, DatabaseUrl, EnvVar, KafkaMaps, Settings, env, flag, listen, local, non_empty,
    number, within,
};

use crate::reassign;

ra_ledger_cdc::settings! {
    const WORKER_ENV;
    /// Everything `ledger worker` needs.
    #[derive(Clone)]
    pub struct WorkerConfig {
        /// The ledger database (`LEDGER_DATABASE_URL`).
        database_url: DatabaseUrl = local::DATABASE_URL.into(),
            env env::DATABASE_URL => |c, v| c.database_url = v.into();
        /// File holding the password of `database_url`'s role
        /// (`LEDGER_DATABASE_PASSWORD_FILE`), so the URL needs none.
        database_password_file: Option<PathBuf> = None,
            env env::DATABASE_PASSWORD_FILE => |c, v| c.database_password_file = Some(v.into());
        /// The reassignment topic (`LEDGER_REASSIGNMENT_TOPIC`).
        topic: String = local::REASSIGNMENT_TOPIC.into(),
            env env::REASSIGNMENT_TOPIC => |c, v| c.topic = v.to_owned();
        /// Consumer group every worker shares (`LEDGER_WORKER_GROUP`).
        group_id: String = local::WORKER_GROUP.into(),
            env env::WORKER_GROUP => |c, v| c.group_id = v.to_owned();
        /// Whole-page attempts before a failing page runs row by row
        /// (`LEDGER_WORKER_MAX_ATTEMPTS`).
        max_attempts: u32 = reassign::DEFAULT_MAX_ATTEMPTS,
            env env::WORKER_MAX_ATTEMPTS => |c, v| c.max_attempts = number(v)?;
        /// Where to serve `/metrics`; `None` to disable (`LEDGER_WORKER_METRICS_LISTEN`,
        /// empty to disable).
        metrics_listen: Option<SocketAddr> = local::WORKER_METRICS.parse().ok(),
            env env::WORKER_METRICS_LISTEN => |c, v| c.metrics_listen = listen(v)?;
        /// Longest pause between retries of a failing page.
        retry_backoff_max_ms: u64 = 5_000;
        /// This worker's stable identity in the group (`group.instance.id`,
        /// `LEDGER_WORKER_INSTANCE_ID`, blank for none): restarted within its session, it
        /// takes its partitions back at once, without a rebalance. A stopped or dead
        /// worker's partitions then move when its session times out (`session.timeout.ms`,
        /// 6 s), as a static member does not leave the group when it stops. Unique per
        /// worker: Kafka fences the older of two members with the same id. Unset,
        /// membership is dynamic.
        instance_id: Option<String> = None,
            env env::WORKER_INSTANCE_ID => |c, v| c.instance_id = Some(v)
                .filter(|id| !id.trim().is_empty())
                .map(str::to_owned);
        /// A run without progress for this long gets its page request raised again
        /// (`LEDGER_WORKER_STALL_AFTER_MS`); 0 never.
        stall_after_ms: u64 = reassign::STALL_AFTER.as_millis() as u64,
            env env::WORKER_STALL_AFTER_MS => |c, v| c.stall_after_ms = number(v)?;
        /// Run a page's next page here, straight after it commits, instead of waiting for
        /// its request to come back through the relay and Kafka
        /// (`LEDGER_WORKER_CONTINUE_CHAIN`, `true` or `false`). The request is published
        /// either way; its copy is then dropped. Still one page at a time per run.
        continue_chain: bool = true,
            env env::WORKER_CONTINUE_CHAIN => |c, v| c.continue_chain = flag(v)?;
        /// How long a worker keeps running one chain's pages straight after each other
        /// before it reads its consumer again (other runs' requests wait meanwhile; the chain
        /// then goes on through Kafka): `LEDGER_WORKER_CONTINUE_CHAIN_MS`, 1 to 60000.
        continue_chain_ms: u64 = 20_000,
            env env::WORKER_CONTINUE_CHAIN_MS => |c, v| c.continue_chain_ms = number(v)?;
        /// librdkafka consumer settings, as the relay's: `bootstrap.servers`
        /// (`LEDGER_KAFKA_BROKERS`), `security.protocol`, `ssl.ca.location`, ..., and the
        /// `LEDGER_KAFKA_*` variables.
        kafka: BTreeMap<String, String> =
            BTreeMap::from([(BOOTSTRAP_SERVERS.into(), local::KAFKA_BROKERS.into())]),
            env env::KAFKA_BROKERS => |c, v| c.kafka.insert(BOOTSTRAP_SERVERS.into(), v.to_owned()),
            shown keys;
        /// Secret librdkafka settings read from files, e.g.
        /// `{ "sasl.password" = "/run/secrets/kafka-password" }`.
        kafka_secret_files: BTreeMap<String, PathBuf> = BTreeMap::new();
        /// The schema registry the relay registers framed topics in (its
        /// Confluent-compatible API, `LEDGER_SCHEMA_REGISTRY_URL`): a replay this worker runs
        /// frames the events of a live topic whose subject it holds, as the relay frames
        /// the live topic. Unset, replays publish the stored bytes on every topic.
        schema_registry_url: Option<String> = None,
            env env::SCHEMA_REGISTRY_URL => |c, v| c.schema_registry_url = non_empty(v).map(str::to_owned);
        /// The registry's user (basic auth, `LEDGER_SCHEMA_REGISTRY_USER`), as the relay's;
        /// replays only read.
        schema_registry_user: Option<String> = None,
            env env::SCHEMA_REGISTRY_USER => |c, v| c.schema_registry_user = non_empty(v).map(str::to_owned);
        /// File holding that user's password (`LEDGER_SCHEMA_REGISTRY_PASSWORD_FILE`).
        schema_registry_password_file: Option<PathBuf> = None,
            env env::SCHEMA_REGISTRY_PASSWORD_FILE => |c, v| c.schema_registry_password_file = non_empty(v).map(PathBuf::from);
        /// The CA (PEM) of the registry's certificate (`LEDGER_SCHEMA_REGISTRY_CA_FILE`).
        schema_registry_ca_file: Option<PathBuf> = None,
            env env::SCHEMA_REGISTRY_CA_FILE => |c, v| c.schema_registry_ca_file = non_empty(v).map(PathBuf::from);
    }
}

impl Settings for WorkerConfig {
    const ENV: &'static [EnvVar<Self>] = WORKER_ENV;

    // Before the relay's shape was the worker's too, its brokers were a key of their own.
    const MOVED: &'static [(&'static str, &'static str)] =
        &[("brokers", "kafka.\"bootstrap.servers\" (as the relay's)")];

    fn kafka_maps(&mut self) -> Option<KafkaMaps<'_>> {
        Some((&mut self.kafka, &mut self.kafka_secret_files))
    }
}

impl WorkerConfig {
    /// [`Settings::read`]: the defaults, then the file at `path`, then the environment
    /// ([`WORKER_ENV`], and the librdkafka settings' `LEDGER_KAFKA_*` variables). The
    /// command line may change fields after this; then [`WorkerConfig::resolve_secrets`] and
    /// [`WorkerConfig::validate`].
    pub fn load(path: Option<&str>) -> Result<Self, ConfigError> {
        Self::read(path)
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
        if self
            .kafka
            .get(BOOTSTRAP_SERVERS)
            .is_none_or(|servers| servers.trim().is_empty())
        {
            return Err(ConfigError::invalid(
                "kafka.\"bootstrap.servers\"",
                "",
                "the worker needs at least one broker",
            ));
        }
        for (field, value) in [
            ("topic", self.topic.as_str()),
            ("group_id", self.group_id.as_str()),
        ] {
            if value.trim().is_empty() {
                return Err(ConfigError::invalid(field, value, "must not be empty"));
            }
        }
        within("max_attempts", self.max_attempts, 1..=100)?;
        self.kafka_settings().validate()?;
        if self.retry_backoff_max_ms == 0 {
            return Err(ConfigError::invalid(
                "retry_backoff_max_ms",
                "0",
                "must be at least 1",
            ));
        }
        // Past a minute the consumer would come close to librdkafka's max.poll.interval.ms.
        within("continue_chain_ms", self.continue_chain_ms, 1..=60_000)?;
        self.schema_registry()?;
        Ok(())
    }

    /// The registry of `schema_registry_url`, when set.
    pub fn schema_registry(
        &self,
    ) -> Result<Option<ra_ledger_cdc::registry::SchemaRegistry>, ConfigError> {
        use ra_ledger_cdc::registry::{RegistryAccess, RegistryError, SchemaRegistry};
        let Some(url) = &self.schema_registry_url else {
            return Ok(None);
        };
        SchemaRegistry::connect(&RegistryAccess {
            url: url.clone(),
            user: self.schema_registry_user.clone(),
            password_file: self.schema_registry_password_file.clone(),
            ca_file: self.schema_registry_ca_file.clone(),
        })
        .map(Some)
        .map_err(|error| match error {
            RegistryError::Setting {
                field,
                value,
                reason,
            } => ConfigError::invalid(field, value, reason),
            other => ConfigError::invalid("schema_registry_url", "", other.to_string()),
        })
    }

    /// How long a worker runs one chain's pages straight after each other.
    pub fn continue_chain_for(&self) -> Duration {
        Duration::from_millis(self.continue_chain_ms)
    }

    /// The settings of the worker's Kafka clients: its librdkafka settings, the brokers
    /// among them, and secret files (the group settings are added by the worker).
    pub fn kafka_settings(&self) -> KafkaSettings {
        KafkaSettings {
            properties: self.kafka.clone(),
            secret_files: self.kafka_secret_files.clone(),
        }
    }

    /// Longest pause between retries of a failing page.
    pub fn retry_backoff_max(&self) -> Duration {
        Duration::from_millis(self.retry_backoff_max_ms)
    }

    /// How long a run may go without progress before its page is raised again.
    pub fn stall_after(&self) -> Option<Duration> {
        (self.stall_after_ms > 0).then(|| Duration::from_millis(self.stall_after_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_config_refuses_what_cannot_work() {
        WorkerConfig::default().validate().unwrap();
        let none = WorkerConfig {
            max_attempts: 0,
            ..WorkerConfig::default()
        };
        assert!(
            none.validate()
                .unwrap_err()
                .to_string()
                .contains("max_attempts")
        );
        let nameless = WorkerConfig {
            group_id: " ".into(),
            ..WorkerConfig::default()
        };
        assert!(
            nameless
                .validate()
                .unwrap_err()
                .to_string()
                .contains("group_id")
        );
        assert!(toml::from_str::<WorkerConfig>("topik = \"x\"").is_err());
        let brokerless = WorkerConfig {
            kafka: BTreeMap::from([(BOOTSTRAP_SERVERS.into(), " ".into())]),
            ..WorkerConfig::default()
        };
        assert!(
            brokerless
                .validate()
                .unwrap_err()
                .to_string()
                .contains("bootstrap.servers")
        );
    }

    /// A file of the worker's older shape is refused, saying where its key went.
    #[test]
    fn a_moved_key_is_refused_naming_its_new_place() {
        let file = std::env::temp_dir().join(format!("worker-moved-{}.toml", std::process::id()));
        std::fs::write(&file, "brokers = \"kafka-1:9093\"\n").unwrap();
        let error = WorkerConfig::load(file.to_str()).unwrap_err().to_string();
        std::fs::remove_file(&file).unwrap();
        assert!(error.contains("unknown field `brokers`"), "{error}");
        assert!(
            error.contains("`brokers` is now kafka.\"bootstrap.servers\""),
            "{error}"
        );
        let file = std::env::temp_dir().join(format!("worker-new-{}.toml", std::process::id()));
        std::fs::write(&file, "[kafka]\n\"bootstrap.servers\" = \"kafka-1:9093\"\n").unwrap();
        let config = WorkerConfig::load(file.to_str()).unwrap();
        std::fs::remove_file(&file).unwrap();
        assert_eq!(config.kafka[BOOTSTRAP_SERVERS], "kafka-1:9093");
    }
}
