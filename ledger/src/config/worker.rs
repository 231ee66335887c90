//! `ledger worker`'s settings: [`WorkerConfig`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ra_ledger_cdc::infra::kafka::KafkaSettings;
use ra_ledger_cdc::infra::settings::{
    ConfigError, check_database_url, local, read_file, with_password_file,
};
use serde::Deserialize;

use super::{EnvVar, flag, listen, number, overlay_env, within};
use crate::reassign;

/// Everything `ledger worker` needs.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConfig {
    /// The ledger database (`LEDGER_DATABASE_URL`).
    pub database_url: String,
    /// File holding the password of `database_url`'s role
    /// (`LEDGER_DATABASE_PASSWORD_FILE`), so the URL needs none.
    pub database_password_file: Option<PathBuf>,
    /// Kafka bootstrap servers (`LEDGER_KAFKA_BROKERS`).
    pub brokers: String,
    /// The reassignment topic (`LEDGER_REASSIGNMENT_TOPIC`).
    pub topic: String,
    /// Consumer group every worker shares (`LEDGER_WORKER_GROUP`).
    pub group_id: String,
    /// Whole-page attempts before a failing page runs row by row
    /// (`LEDGER_WORKER_MAX_ATTEMPTS`).
    pub max_attempts: u32,
    /// Where to serve `/metrics`; `None` to disable (`LEDGER_WORKER_METRICS_LISTEN`, empty
    /// to disable).
    pub metrics_listen: Option<SocketAddr>,
    /// Longest pause between retries of a failing page.
    pub retry_backoff_max_ms: u64,
    /// This worker's stable identity in the group (`group.instance.id`,
    /// `LEDGER_WORKER_INSTANCE_ID`): restarted within its session, it takes its partitions
    /// back at once, without a rebalance. A stopped or dead worker's partitions then move
    /// when its session times out (`session.timeout.ms`, 6 s), as a static member does not
    /// leave the group when it stops. Unique per worker: Kafka fences the older of two
    /// members with the same id. Unset, membership is dynamic.
    pub instance_id: Option<String>,
    /// A run without progress for this long gets its page request raised again
    /// (`LEDGER_WORKER_STALL_AFTER_MS`); 0 never.
    pub stall_after_ms: u64,
    /// Run a page's next page here, straight after it commits, instead of waiting for its
    /// request to come back through the relay and Kafka (`LEDGER_WORKER_CONTINUE_CHAIN`,
    /// `true` or `false`). The request is published either way; its copy is then dropped.
    /// Still one page at a time per run.
    pub continue_chain: bool,
    /// How long a worker keeps running one chain's pages straight after each other before it
    /// reads its consumer again (other runs' requests wait meanwhile; the chain then goes on
    /// through Kafka): `LEDGER_WORKER_CONTINUE_CHAIN_MS`, 1 to 60000.
    pub continue_chain_ms: u64,
    /// Other librdkafka consumer settings (`security.protocol`, `ssl.ca.location`, ...).
    pub kafka: BTreeMap<String, String>,
    /// Secret librdkafka settings read from files, e.g.
    /// `{ "sasl.password" = "/run/secrets/kafka-password" }`.
    pub kafka_secret_files: BTreeMap<String, PathBuf>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            database_url: local::DATABASE_URL.into(),
            database_password_file: None,
            brokers: local::KAFKA_BROKERS.into(),
            topic: local::REASSIGNMENT_TOPIC.into(),
            group_id: local::WORKER_GROUP.into(),
            max_attempts: reassign::DEFAULT_MAX_ATTEMPTS,
            metrics_listen: local::WORKER_METRICS.parse().ok(),
            retry_backoff_max_ms: 5_000,
            instance_id: None,
            stall_after_ms: reassign::STALL_AFTER.as_millis() as u64,
            continue_chain: true,
            continue_chain_ms: 20_000,
            kafka: BTreeMap::new(),
            kafka_secret_files: BTreeMap::new(),
        }
    }
}

impl std::fmt::Debug for WorkerConfig {
    // The database URL carries a password: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerConfig")
            .field("database_password_file", &self.database_password_file)
            .field("brokers", &self.brokers)
            .field("topic", &self.topic)
            .field("group_id", &self.group_id)
            .field("max_attempts", &self.max_attempts)
            .field("metrics_listen", &self.metrics_listen)
            .field("instance_id", &self.instance_id)
            .field("stall_after_ms", &self.stall_after_ms)
            .field("continue_chain", &self.continue_chain)
            .field("continue_chain_ms", &self.continue_chain_ms)
            .field("kafka", &self.kafka.keys().collect::<Vec<_>>())
            .field("kafka_secret_files", &self.kafka_secret_files)
            .finish_non_exhaustive()
    }
}

impl WorkerConfig {
    /// The defaults, then the file at `path`, then the environment ([`WORKER_ENV`], and the
    /// librdkafka settings' `LEDGER_KAFKA_*` variables). The command line may change fields
    /// after this; then [`WorkerConfig::resolve_secrets`] and [`WorkerConfig::validate`].
    pub fn load(path: Option<&str>) -> Result<Self, ConfigError> {
        let mut config: Self = read_file(path)?;
        overlay_env(&mut config, WORKER_ENV)?;
        let mut kafka = config.kafka_settings();
        kafka.apply_env();
        config.kafka = kafka.properties;
        config.kafka_secret_files = kafka.secret_files;
        Ok(config)
    }

    /// Puts the password of `database_password_file` into `database_url`; again after the
    /// URL changed (idempotent).
    pub fn resolve_secrets(&mut self) -> Result<(), ConfigError> {
        self.database_url =
            with_password_file(&self.database_url, self.database_password_file.as_deref())?;
        Ok(())
    }

    /// Checks every field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_database_url(&self.database_url)?;
        for (field, value) in [
            ("brokers", &self.brokers),
            ("topic", &self.topic),
            ("group_id", &self.group_id),
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
        Ok(())
    }

    /// How long a worker runs one chain's pages straight after each other.
    pub fn continue_chain_for(&self) -> Duration {
        Duration::from_millis(self.continue_chain_ms)
    }

    /// The consumer's own librdkafka settings and secret files (the brokers and the group
    /// settings are added by the worker).
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

/// The environment variables of `ledger worker`, each with the field it sets. An empty
/// `LEDGER_WORKER_METRICS_LISTEN` turns /metrics off; a blank `LEDGER_WORKER_INSTANCE_ID`
/// leaves the generated one.
pub const WORKER_ENV: &[EnvVar<WorkerConfig>] = &[
    ("LEDGER_DATABASE_URL", |c, v| {
        c.database_url = v.to_owned();
        Ok(())
    }),
    ("LEDGER_DATABASE_PASSWORD_FILE", |c, v| {
        c.database_password_file = Some(v.into());
        Ok(())
    }),
    ("LEDGER_KAFKA_BROKERS", |c, v| {
        c.brokers = v.to_owned();
        Ok(())
    }),
    ("LEDGER_REASSIGNMENT_TOPIC", |c, v| {
        c.topic = v.to_owned();
        Ok(())
    }),
    ("LEDGER_WORKER_GROUP", |c, v| {
        c.group_id = v.to_owned();
        Ok(())
    }),
    ("LEDGER_WORKER_MAX_ATTEMPTS", |c, v| {
        c.max_attempts = number(v)?;
        Ok(())
    }),
    ("LEDGER_WORKER_METRICS_LISTEN", |c, v| {
        c.metrics_listen = listen(v)?;
        Ok(())
    }),
    ("LEDGER_WORKER_INSTANCE_ID", |c, v| {
        c.instance_id = Some(v)
            .filter(|id| !id.trim().is_empty())
            .map(str::to_owned);
        Ok(())
    }),
    ("LEDGER_WORKER_STALL_AFTER_MS", |c, v| {
        c.stall_after_ms = number(v)?;
        Ok(())
    }),
    ("LEDGER_WORKER_CONTINUE_CHAIN_MS", |c, v| {
        c.continue_chain_ms = number(v)?;
        Ok(())
    }),
    ("LEDGER_WORKER_CONTINUE_CHAIN", |c, v| {
        c.continue_chain = flag(v)?;
        Ok(())
    }),
];

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
    }
}
