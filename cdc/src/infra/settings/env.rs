//! Every environment variable the project reads, named once. A config binds a variable to
//! the field it sets in its declaration ([`crate::settings!`]); a command-line tool reads
//! one through clap's `env = ` with the name from here. A test of the source tree
//! (`tests/tests/integration/layout.rs`) fails on a variable's name written anywhere else
//! in the crates' code, so no setting is read in a second place that could drift.
//!
//! docs/operators.md lists what each one does; the configs' fields say which key of the
//! file each one overrides.

use std::path::PathBuf;

/// The value of environment variable `name`, when set (and valid UTF-8): the one place the
/// project's settings are read from the environment.
pub fn read(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The path in environment variable `name`, when set (any bytes).
pub fn read_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).map(PathBuf::from)
}

// The connection block, for every process and tool.

/// The ledger database's URL (`database_url`).
pub const DATABASE_URL: &str = "LEDGER_DATABASE_URL";
/// The file holding the password of the URL's role (`database_password_file`).
pub const DATABASE_PASSWORD_FILE: &str = "LEDGER_DATABASE_PASSWORD_FILE";

// Kafka, for every client.

/// Kafka bootstrap servers: the relay's `kafka."bootstrap.servers"`, the worker's
/// `brokers`, the tools' `--brokers`.
pub const KAFKA_BROKERS: &str = "LEDGER_KAFKA_BROKERS";
/// librdkafka's `security.protocol`.
pub const KAFKA_SECURITY_PROTOCOL: &str = "LEDGER_KAFKA_SECURITY_PROTOCOL";
/// librdkafka's `sasl.mechanism`.
pub const KAFKA_SASL_MECHANISM: &str = "LEDGER_KAFKA_SASL_MECHANISM";
/// librdkafka's `sasl.username`.
pub const KAFKA_SASL_USERNAME: &str = "LEDGER_KAFKA_SASL_USERNAME";
/// librdkafka's `ssl.ca.location`.
pub const KAFKA_SSL_CA_LOCATION: &str = "LEDGER_KAFKA_SSL_CA_LOCATION";
/// librdkafka's `ssl.certificate.location`.
pub const KAFKA_SSL_CERTIFICATE_LOCATION: &str = "LEDGER_KAFKA_SSL_CERTIFICATE_LOCATION";
/// librdkafka's `ssl.key.location`.
pub const KAFKA_SSL_KEY_LOCATION: &str = "LEDGER_KAFKA_SSL_KEY_LOCATION";
/// The file holding librdkafka's `sasl.password`.
pub const KAFKA_SASL_PASSWORD_FILE: &str = "LEDGER_KAFKA_SASL_PASSWORD_FILE";
/// The file holding librdkafka's `ssl.key.password`.
pub const KAFKA_SSL_KEY_PASSWORD_FILE: &str = "LEDGER_KAFKA_SSL_KEY_PASSWORD_FILE";
/// Topics are `<prefix><aggregate type>`: the relay's `topic_prefix`, the tools'
/// `--topic-prefix`.
pub const TOPIC_PREFIX: &str = "LEDGER_TOPIC_PREFIX";
/// The relay's replication slot: the relay's `slot`, `ledger serve`'s `relay_slot`, the
/// slot `ledger migrate` creates, `ledger outbox`'s `--slot`.
pub const RELAY_SLOT: &str = "LEDGER_RELAY_SLOT";

// The relay (`ledger relay`, `ledger reconcile`).

/// The relay's TOML file.
pub const RELAY_CONFIG: &str = "LEDGER_RELAY_CONFIG";
/// The relay's `delivery`.
pub const RELAY_DELIVERY: &str = "LEDGER_RELAY_DELIVERY";
/// The relay's `metrics_listen`.
pub const METRICS_LISTEN: &str = "LEDGER_METRICS_LISTEN";
/// The relay's `value_formats`, as `aggregate=format` pairs separated by commas.
pub const VALUE_FORMATS: &str = "LEDGER_VALUE_FORMATS";
/// The Confluent-compatible API of the schema registry: the relay's, `ledger serve`'s and
/// the worker's `schema_registry_url`.
pub const SCHEMA_REGISTRY_URL: &str = "LEDGER_SCHEMA_REGISTRY_URL";
/// The user the schema registry knows the process as (basic auth): the relay's and the
/// worker's `schema_registry_user`.
pub const SCHEMA_REGISTRY_USER: &str = "LEDGER_SCHEMA_REGISTRY_USER";
/// The file holding that user's password: `schema_registry_password_file`.
pub const SCHEMA_REGISTRY_PASSWORD_FILE: &str = "LEDGER_SCHEMA_REGISTRY_PASSWORD_FILE";
/// The CA (PEM) that signed the registry's certificate, trusted instead of the built-in
/// roots: `schema_registry_ca_file`.
pub const SCHEMA_REGISTRY_CA_FILE: &str = "LEDGER_SCHEMA_REGISTRY_CA_FILE";

// `ledger serve`.

/// `ledger serve`'s TOML file.
pub const SERVE_CONFIG: &str = "LEDGER_SERVE_CONFIG";
/// `listen`.
pub const LISTEN: &str = "LEDGER_LISTEN";
/// `tls_cert_file`.
pub const TLS_CERT_FILE: &str = "LEDGER_TLS_CERT_FILE";
/// `tls_key_file`.
pub const TLS_KEY_FILE: &str = "LEDGER_TLS_KEY_FILE";
/// `pool_size`.
pub const POOL_SIZE: &str = "LEDGER_POOL_SIZE";
/// `tokens`.
pub const TOKENS: &str = "LEDGER_TOKENS";
/// `tokens_file`.
pub const TOKENS_FILE: &str = "LEDGER_TOKENS_FILE";
/// `cursor_key`.
pub const CURSOR_KEY: &str = "LEDGER_CURSOR_KEY";
/// `cursor_key_file`.
pub const CURSOR_KEY_FILE: &str = "LEDGER_CURSOR_KEY_FILE";
/// `session_key_file`.
pub const SESSION_KEY_FILE: &str = "LEDGER_SESSION_KEY_FILE";
/// `session_key_previous_file`.
pub const SESSION_KEY_PREVIOUS_FILE: &str = "LEDGER_SESSION_KEY_PREVIOUS_FILE";
/// `session_key_previous_until`.
pub const SESSION_KEY_PREVIOUS_UNTIL: &str = "LEDGER_SESSION_KEY_PREVIOUS_UNTIL";
/// `lock_timeout_ms`.
pub const LOCK_TIMEOUT_MS: &str = "LEDGER_LOCK_TIMEOUT_MS";
/// `outbox_retention_interval_ms`.
pub const OUTBOX_RETENTION_INTERVAL_MS: &str = "LEDGER_OUTBOX_RETENTION_INTERVAL_MS";
/// `outbox_retention_batch`.
pub const OUTBOX_RETENTION_BATCH: &str = "LEDGER_OUTBOX_RETENTION_BATCH";
/// `watcher_relay_config`.
pub const WATCHER_RELAY_CONFIG: &str = "LEDGER_WATCHER_RELAY_CONFIG";
/// `watcher_lag_bound_ms`.
pub const WATCHER_LAG_BOUND_MS: &str = "LEDGER_WATCHER_LAG_BOUND_MS";
/// `watcher_interval_ms`.
pub const WATCHER_INTERVAL_MS: &str = "LEDGER_WATCHER_INTERVAL_MS";
/// `watcher_window`.
pub const WATCHER_WINDOW: &str = "LEDGER_WATCHER_WINDOW";
/// `digest_key_file`; `ledger verify --digests` also takes the public key from it.
pub const DIGEST_KEY_FILE: &str = "LEDGER_DIGEST_KEY_FILE";
/// `digest_interval_ms`.
pub const DIGEST_INTERVAL_MS: &str = "LEDGER_DIGEST_INTERVAL_MS";
/// `log_origin`.
pub const LOG_ORIGIN: &str = "LEDGER_LOG_ORIGIN";
/// `witness_policy_file`.
pub const WITNESS_POLICY_FILE: &str = "LEDGER_WITNESS_POLICY_FILE";
/// `witness_interval_ms`.
pub const WITNESS_INTERVAL_MS: &str = "LEDGER_WITNESS_INTERVAL_MS";
/// `witness_timeout_ms`.
pub const WITNESS_TIMEOUT_MS: &str = "LEDGER_WITNESS_TIMEOUT_MS";
/// `body_read_timeout_ms`.
pub const BODY_READ_TIMEOUT_MS: &str = "LEDGER_BODY_READ_TIMEOUT_MS";
/// `write_stall_timeout_ms`.
pub const WRITE_STALL_TIMEOUT_MS: &str = "LEDGER_WRITE_STALL_TIMEOUT_MS";
/// `secure_cookies`.
pub const SECURE_COOKIES: &str = "LEDGER_SECURE_COOKIES";
/// `max_connections`.
pub const MAX_CONNECTIONS: &str = "LEDGER_MAX_CONNECTIONS";
/// `ledger serve`'s `metrics_listen`.
pub const SERVE_METRICS_LISTEN: &str = "LEDGER_SERVE_METRICS_LISTEN";

// `ledger worker`.

/// `ledger worker`'s TOML file.
pub const WORKER_CONFIG: &str = "LEDGER_WORKER_CONFIG";
/// The worker's `topic`.
pub const REASSIGNMENT_TOPIC: &str = "LEDGER_REASSIGNMENT_TOPIC";
/// The worker's `group_id`.
pub const WORKER_GROUP: &str = "LEDGER_WORKER_GROUP";
/// The worker's `max_attempts`.
pub const WORKER_MAX_ATTEMPTS: &str = "LEDGER_WORKER_MAX_ATTEMPTS";
/// The worker's `metrics_listen`.
pub const WORKER_METRICS_LISTEN: &str = "LEDGER_WORKER_METRICS_LISTEN";
/// The worker's `instance_id`.
pub const WORKER_INSTANCE_ID: &str = "LEDGER_WORKER_INSTANCE_ID";
/// The worker's `stall_after_ms`.
pub const WORKER_STALL_AFTER_MS: &str = "LEDGER_WORKER_STALL_AFTER_MS";
/// The worker's `continue_chain`.
pub const WORKER_CONTINUE_CHAIN: &str = "LEDGER_WORKER_CONTINUE_CHAIN";
/// The worker's `continue_chain_ms`.
pub const WORKER_CONTINUE_CHAIN_MS: &str = "LEDGER_WORKER_CONTINUE_CHAIN_MS";

// The tools.

/// The ledger service's URL (`ledger-bench demo --api`).
pub const API_URL: &str = "LEDGER_API_URL";
/// A writer's bearer token (`ledger-bench demo --token`).
pub const WRITER_TOKEN: &str = "LEDGER_WRITER_TOKEN";
/// The digests' public key file (`ledger verify --public-key`).
pub const DIGEST_PUBLIC_KEY_FILE: &str = "LEDGER_DIGEST_PUBLIC_KEY_FILE";

// The example consumer (`ra-example-consumer`).

/// The consumer's own database.
pub const CONSUMER_DATABASE_URL: &str = "CONSUMER_DATABASE_URL";
/// The file holding the password of the consumer database's role.
pub const CONSUMER_DATABASE_PASSWORD_FILE: &str = "CONSUMER_DATABASE_PASSWORD_FILE";
