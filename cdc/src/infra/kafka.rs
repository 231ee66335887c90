//! Kafka client settings every process of the project shares: the relay, the worker, the
//! example consumer, the CLI's tools and the benches build their librdkafka clients here.
//!
//! Settings are librdkafka properties (`security.protocol`, `sasl.mechanism`,
//! `ssl.ca.location`, ...). Secrets (`sasl.password`, `ssl.key.password`) may instead come
//! from files: `kafka_secret_files` in a TOML config, or `LEDGER_KAFKA_SASL_PASSWORD_FILE`
//! and `LEDGER_KAFKA_SSL_KEY_PASSWORD_FILE`. A file's content is read when the client is
//! built, never printed, and its trailing newline is dropped.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rdkafka::ClientConfig;

use super::settings::ConfigError;
use super::settings::env;

/// Environment variables that set a librdkafka property, for every Kafka client.
pub const ENV_SETTINGS: [(&str, &str); 6] = [
    (env::KAFKA_SECURITY_PROTOCOL, "security.protocol"),
    (env::KAFKA_SASL_MECHANISM, "sasl.mechanism"),
    (env::KAFKA_SASL_USERNAME, "sasl.username"),
    (env::KAFKA_SSL_CA_LOCATION, "ssl.ca.location"),
    (
        env::KAFKA_SSL_CERTIFICATE_LOCATION,
        "ssl.certificate.location",
    ),
    (env::KAFKA_SSL_KEY_LOCATION, "ssl.key.location"),
];

/// Environment variables that name a file holding a secret librdkafka property.
pub const ENV_SECRET_FILES: [(&str, &str); 2] = [
    (env::KAFKA_SASL_PASSWORD_FILE, "sasl.password"),
    (env::KAFKA_SSL_KEY_PASSWORD_FILE, "ssl.key.password"),
];

/// Applies the `LEDGER_KAFKA_*` security variables over `properties` and `secret_files`
/// (a blank variable changes nothing).
pub fn apply_env(
    properties: &mut BTreeMap<String, String>,
    secret_files: &mut BTreeMap<String, PathBuf>,
) {
    for (variable, key) in ENV_SETTINGS {
        if let Some(value) = env::read(variable).filter(|value| !value.trim().is_empty()) {
            properties.insert(key.into(), value);
        }
    }
    for (variable, key) in ENV_SECRET_FILES {
        if let Some(path) = env::read(variable).filter(|value| !value.trim().is_empty()) {
            secret_files.insert(key.into(), path.into());
        }
    }
}

/// librdkafka's property of the brokers.
pub const BOOTSTRAP_SERVERS: &str = "bootstrap.servers";

/// Kafka bootstrap servers: `host:port` pairs separated by commas, as librdkafka's
/// `bootstrap.servers` takes them. The one shape of a broker list: the worker's `brokers`,
/// `LEDGER_KAFKA_BROKERS`, and what the relay's `kafka."bootstrap.servers"` holds
/// ([`KafkaSettings::brokers`]); [`KafkaSettings::with_brokers`] is how a list joins a
/// client's settings.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct Brokers(String);

impl Brokers {
    /// The list as librdkafka takes it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the list names no broker (empty or blank).
    pub fn is_empty(&self) -> bool {
        self.0.trim().is_empty()
    }
}

impl std::fmt::Display for Brokers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::ops::Deref for Brokers {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Brokers {
    // For a child process's environment.
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_ref()
    }
}

impl From<&str> for Brokers {
    fn from(brokers: &str) -> Self {
        Self(brokers.to_owned())
    }
}

impl From<String> for Brokers {
    fn from(brokers: String) -> Self {
        Self(brokers)
    }
}

impl From<&String> for Brokers {
    fn from(brokers: &String) -> Self {
        Self(brokers.clone())
    }
}

const PROTOCOLS: [&str; 4] = ["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"];
const MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

/// librdkafka properties, and secret ones to read from files.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KafkaSettings {
    /// Properties, e.g. `bootstrap.servers`, `security.protocol`.
    pub properties: BTreeMap<String, String>,
    /// Property -> file holding its value, e.g. `sasl.password` -> `/run/secrets/kafka`.
    pub secret_files: BTreeMap<String, PathBuf>,
}

impl std::fmt::Debug for KafkaSettings {
    // Keys only: values may be secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSettings")
            .field("properties", &self.properties.keys().collect::<Vec<_>>())
            .field("secret_files", &self.secret_files)
            .finish()
    }
}

impl KafkaSettings {
    /// `brokers` and the security settings of the environment: what tools use.
    pub fn from_env(brokers: &str) -> Result<Self, ConfigError> {
        let mut settings = Self::default().with_brokers(&brokers.into());
        settings.apply_env();
        settings.validate()?;
        Ok(settings)
    }

    /// These settings with `brokers` as `bootstrap.servers` (replacing any).
    pub fn with_brokers(mut self, brokers: &Brokers) -> Self {
        self.properties
            .insert(BOOTSTRAP_SERVERS.into(), brokers.as_str().into());
        self
    }

    /// The brokers these settings name, if any.
    pub fn brokers(&self) -> Option<Brokers> {
        self.properties
            .get(BOOTSTRAP_SERVERS)
            .map(|brokers| brokers.into())
    }

    /// Applies the `LEDGER_KAFKA_*` security variables over these settings.
    pub fn apply_env(&mut self) {
        apply_env(&mut self.properties, &mut self.secret_files);
    }

    /// Checks the security settings: known protocol and mechanism, credentials for SASL,
    /// readable files. Errors name the setting, never a secret's value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let protocol = self
            .properties
            .get("security.protocol")
            .map(|value| value.to_ascii_lowercase())
            .unwrap_or_else(|| "plaintext".into());
        if !PROTOCOLS.contains(&protocol.as_str()) {
            return Err(ConfigError::invalid(
                "kafka.\"security.protocol\"",
                &protocol,
                "expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
            ));
        }
        if protocol.starts_with("sasl") {
            let mechanism = self
                .properties
                .get("sasl.mechanism")
                .or_else(|| self.properties.get("sasl.mechanisms"))
                .map(String::as_str)
                .unwrap_or("GSSAPI");
            if !MECHANISMS.contains(&mechanism) {
                return Err(ConfigError::invalid(
                    "kafka.\"sasl.mechanism\"",
                    mechanism,
                    "expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (this build has no GSSAPI)",
                ));
            }
            if !self.properties.contains_key("sasl.username") {
                return Err(ConfigError::invalid(
                    "kafka.\"sasl.username\"",
                    "",
                    "SASL needs a user name",
                ));
            }
            if !self.properties.contains_key("sasl.password")
                && !self.secret_files.contains_key("sasl.password")
            {
                return Err(ConfigError::invalid(
                    "kafka_secret_files.\"sasl.password\"",
                    "",
                    "SASL needs a password: name a file holding it (LEDGER_KAFKA_SASL_PASSWORD_FILE)",
                ));
            }
        }
        for key in [
            "ssl.ca.location",
            "ssl.certificate.location",
            "ssl.key.location",
        ] {
            if let Some(path) = self.properties.get(key)
                && let Err(error) = std::fs::metadata(path)
            {
                return Err(ConfigError::invalid(
                    &format!("kafka.\"{key}\""),
                    path,
                    format!("cannot read it: {error}"),
                ));
            }
        }
        for (key, path) in &self.secret_files {
            read_secret(key, path)?;
        }
        Ok(())
    }

    /// Whether this connects without TLS to a broker that is not on this machine.
    pub fn weakness(&self) -> Option<String> {
        let protocol = self
            .properties
            .get("security.protocol")
            .map(|value| value.to_ascii_lowercase())
            .unwrap_or_else(|| "plaintext".into());
        let brokers = self.properties.get(BOOTSTRAP_SERVERS)?;
        let remote = brokers.split(',').any(|broker| {
            let host = broker
                .trim()
                .rsplit_once(':')
                .map_or(broker, |(host, _)| host);
            let host = host.trim_matches(|c| c == '[' || c == ']');
            !(host == "localhost"
                || host
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback()))
        });
        if !remote {
            return None;
        }
        if !protocol.ends_with("ssl") {
            return Some(format!(
                "Kafka brokers {brokers} are reached with security.protocol={protocol}: \
                 unencrypted; set SSL or SASL_SSL unless the network is trusted"
            ));
        }
        // Encrypted, but is the broker checked? As PostgreSQL's sslmode below verify-full.
        let setting = |key: &str| {
            self.properties
                .get(key)
                .map(|value| value.trim().to_ascii_lowercase())
        };
        if setting("enable.ssl.certificate.verification").as_deref() == Some("false") {
            return Some(format!(
                "Kafka brokers {brokers}: enable.ssl.certificate.verification=false, so their \
                 certificates are not verified and anyone on the path can pose as them; remove \
                 it and set ssl.ca.location unless the network is trusted"
            ));
        }
        if setting("ssl.endpoint.identification.algorithm").as_deref() == Some("none") {
            return Some(format!(
                "Kafka brokers {brokers}: ssl.endpoint.identification.algorithm=none, so a \
                 certificate is not checked against the broker's name (any certificate of the CA \
                 passes); set it to https unless the network is trusted"
            ));
        }
        None
    }

    /// A librdkafka configuration: the properties, then the secrets read from their files.
    pub fn client_config(&self) -> Result<ClientConfig, ConfigError> {
        let mut config = ClientConfig::new();
        for (key, value) in &self.properties {
            config.set(key, value);
        }
        for (key, path) in &self.secret_files {
            config.set(key, read_secret(key, path)?);
        }
        Ok(config)
    }
}

/// Reads the secret `key` from `path`.
fn read_secret(key: &str, path: &std::path::Path) -> Result<String, ConfigError> {
    super::settings::read_secret(&format!("kafka_secret_files.\"{key}\""), path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> KafkaSettings {
        KafkaSettings {
            properties: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            secret_files: BTreeMap::new(),
        }
    }

    #[test]
    fn sasl_needs_a_known_mechanism_a_user_and_a_password() {
        let base = [
            ("bootstrap.servers", "k:9093"),
            ("security.protocol", "SASL_SSL"),
        ];
        let error = settings(&base).validate().unwrap_err().to_string();
        assert!(error.contains("sasl.mechanism"), "{error}");
        let mut with_mechanism = base.to_vec();
        with_mechanism.push(("sasl.mechanism", "SCRAM-SHA-512"));
        let error = settings(&with_mechanism)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(error.contains("sasl.username"), "{error}");
        with_mechanism.push(("sasl.username", "relay"));
        let error = settings(&with_mechanism)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(error.contains("LEDGER_KAFKA_SASL_PASSWORD_FILE"), "{error}");
        let mut complete = settings(&with_mechanism);
        let file = std::env::temp_dir().join(format!("ra-kafka-secret-{}", std::process::id()));
        std::fs::write(&file, "s3cret-pass\n").unwrap();
        complete
            .secret_files
            .insert("sasl.password".into(), file.clone());
        complete.validate().unwrap();
        let config = complete.client_config().unwrap();
        assert_eq!(config.get("sasl.password"), Some("s3cret-pass"));
        assert!(!format!("{complete:?}").contains("s3cret"));
        std::fs::remove_file(&file).unwrap();
        let error = complete.validate().unwrap_err().to_string();
        assert!(
            error.contains("sasl.password") && error.contains("ra-kafka-secret"),
            "{error}"
        );
        let error = settings(&[("security.protocol", "tls")])
            .validate()
            .unwrap_err()
            .to_string();
        assert!(error.contains("security.protocol"), "{error}");
    }

    #[test]
    fn plaintext_to_a_remote_broker_is_called_out() {
        assert!(
            settings(&[("bootstrap.servers", "127.0.0.1:9092,localhost:9093")])
                .weakness()
                .is_none()
        );
        assert!(
            settings(&[("bootstrap.servers", "kafka.internal:9092")])
                .weakness()
                .is_some()
        );
        assert!(
            settings(&[
                ("bootstrap.servers", "kafka.internal:9093"),
                ("security.protocol", "SSL")
            ])
            .weakness()
            .is_none()
        );
    }

    #[test]
    fn tls_that_verifies_nothing_is_called_out_too() {
        let remote_tls = |extra: (&'static str, &'static str)| {
            settings(&[
                ("bootstrap.servers", "kafka.internal:9093"),
                ("security.protocol", "SASL_SSL"),
                extra,
            ])
            .weakness()
        };
        let unverified = remote_tls(("enable.ssl.certificate.verification", "false")).unwrap();
        assert!(
            unverified.contains("enable.ssl.certificate.verification=false"),
            "{unverified}"
        );
        let unnamed = remote_tls(("ssl.endpoint.identification.algorithm", "none")).unwrap();
        assert!(
            unnamed.contains("identification.algorithm=none"),
            "{unnamed}"
        );
        assert!(remote_tls(("ssl.endpoint.identification.algorithm", "https")).is_none());
        // On this machine, as PostgreSQL's loopback hosts: nothing to say.
        assert!(
            settings(&[
                ("bootstrap.servers", "127.0.0.1:9093"),
                ("security.protocol", "SSL"),
                ("enable.ssl.certificate.verification", "false")
            ])
            .weakness()
            .is_none()
        );
    }
}
