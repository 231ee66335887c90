//! The topics the relay publishes to, created with explicit configs rather than whatever
//! a broker defaults to (Apache Kafka deletes after 7 days unless told otherwise).
//!
//! - The event topics (`contact`, `assignment`) keep everything: consuming teams rebuild
//!   their projections from them.
//! - The reassignment topic carries page requests, worthless once their page ran: it
//!   deletes records after 7 days.
//! - The relay's position topic (`relay-position`, exactly-once delivery) holds one record
//!   per slot that matters, the newest: compacted, one partition (the relay reads it back
//!   to its end at start). The relay never creates it itself.
//!
//! - A replay topic (`crate::replay`) has as many partitions as its live topic, and keeps
//!   its records a week: time enough to bootstrap from it.
//!
//! Any config can be changed per topic (`ledger topics create --config topic:key=value`).
//! Every topic the ledger or its tooling creates goes through [`create`]: the stack's, a
//! replay's, and the scratch topics of tests and benchmarks.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;

use crate::domain::{ASSIGNMENT_AGGREGATE, CONTACT_AGGREGATE, REASSIGNMENT_AGGREGATE};

/// The replication factor asked for when none is given: `-1`, the cluster's own
/// `default.replication.factor` (Kafka 2.4 and later). A fixed 1 would leave every topic
/// with a single copy on a cluster of many brokers, however the relay's `acks=all` waits;
/// the cluster's operator sets its default (and `min.insync.replicas`) once for all topics.
pub const BROKER_DEFAULT_REPLICATION: i32 = -1;

/// How long the reassignment topic keeps page requests: a week, for looking into a run.
pub const REASSIGNMENT_RETENTION_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// How long a replay topic keeps its records: a week to bootstrap from it.
pub const REPLAY_RETENTION_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// One topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    /// Its name.
    pub name: String,
    /// Partitions.
    pub partitions: i32,
    /// Replicas of each partition; [`BROKER_DEFAULT_REPLICATION`] for the cluster's default.
    pub replication_factor: i32,
    /// Topic configs (`cleanup.policy`, `retention.ms`, ...).
    pub configs: BTreeMap<String, String>,
}

impl TopicSpec {
    /// `name` with `partitions` partitions of `replication_factor` replicas, and the
    /// broker's default configs (the scratch topics of tests and benchmarks).
    pub fn plain(name: &str, partitions: i32, replication_factor: i32) -> Self {
        Self {
            name: name.to_owned(),
            partitions,
            replication_factor,
            configs: BTreeMap::new(),
        }
    }
}

/// A replay topic: `partitions` (its live topic's), replicated as the cluster's default
/// (as the live topics are by default), records deleted after [`REPLAY_RETENTION_MS`].
pub fn replay(name: &str, partitions: i32) -> TopicSpec {
    TopicSpec {
        configs: BTreeMap::from([
            ("cleanup.policy".to_owned(), "delete".to_owned()),
            ("retention.ms".to_owned(), REPLAY_RETENTION_MS.to_string()),
        ]),
        ..TopicSpec::plain(name, partitions, BROKER_DEFAULT_REPLICATION)
    }
}

/// The relay's topics under `prefix` (`outbox.event.` by default), each with `partitions`
/// partitions and its default configs.
pub fn plan(prefix: &str, partitions: i32) -> Vec<TopicSpec> {
    let keep_everything = BTreeMap::from([("retention.ms".to_owned(), "-1".to_owned())]);
    let delete_after_a_week = BTreeMap::from([
        ("cleanup.policy".to_owned(), "delete".to_owned()),
        (
            "retention.ms".to_owned(),
            REASSIGNMENT_RETENTION_MS.to_string(),
        ),
    ]);
    [
        (CONTACT_AGGREGATE, keep_everything.clone()),
        (ASSIGNMENT_AGGREGATE, keep_everything.clone()),
        (REASSIGNMENT_AGGREGATE, delete_after_a_week),
        // Signed digests: auditors' copies outside the database, kept for good.
        (crate::digest::build::AGGREGATE_TYPE, keep_everything),
    ]
    .into_iter()
    .map(|(aggregate, configs)| TopicSpec {
        name: format!("{prefix}{aggregate}"),
        partitions,
        replication_factor: BROKER_DEFAULT_REPLICATION,
        configs,
    })
    .chain([TopicSpec {
        name: ra_ledger_cdc::config::position_topic(prefix),
        partitions: 1,
        replication_factor: BROKER_DEFAULT_REPLICATION,
        configs: BTreeMap::from([
            ("cleanup.policy".to_owned(), "compact".to_owned()),
            // Small segments so compaction keeps the tail the relay reads at start short.
            ("segment.ms".to_owned(), "3600000".to_owned()),
        ]),
    }])
    .collect()
}

/// What became of one topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Created just now.
    Created,
    /// It existed already; left as it is.
    Existed,
}

/// Why topics could not be created.
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    /// The admin client failed.
    #[error("Kafka admin: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// The Kafka settings of the environment cannot work.
    #[error("{0}")]
    Settings(String),
    /// The broker refused a topic.
    #[error("cannot create topic {topic}: {code}")]
    Refused {
        /// The topic.
        topic: String,
        /// The broker's answer.
        code: RDKafkaErrorCode,
    },
}

/// Creates the topics of `specs` that do not exist yet on `brokers` (with `settings`,
/// other librdkafka settings such as TLS).
pub async fn create_missing(
    brokers: &str,
    settings: &BTreeMap<String, String>,
    specs: &[TopicSpec],
) -> Result<Vec<(String, Outcome)>, TopicError> {
    let mut config = ra_ledger_cdc::infra::kafka::KafkaSettings::from_env(brokers)
        .and_then(|kafka| kafka.client_config())
        .map_err(|error| TopicError::Settings(error.to_string()))?;
    for (key, value) in settings {
        config.set(key, value);
    }
    config.set("bootstrap.servers", brokers);
    create(&config, specs).await
}

/// Creates the topics of `specs` with an admin client made of `config`; one that exists
/// already is left as it is ([`Outcome::Existed`]).
pub async fn create(
    config: &ClientConfig,
    specs: &[TopicSpec],
) -> Result<Vec<(String, Outcome)>, TopicError> {
    let admin: AdminClient<DefaultClientContext> = config.create()?;
    let new_topics: Vec<NewTopic> = specs
        .iter()
        .map(|spec| {
            spec.configs.iter().fold(
                NewTopic::new(
                    &spec.name,
                    spec.partitions,
                    TopicReplication::Fixed(spec.replication_factor),
                ),
                |topic, (key, value)| topic.set(key, value),
            )
        })
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    admin
        .create_topics(&new_topics, &options)
        .await?
        .into_iter()
        .map(|result| match result {
            Ok(topic) => Ok((topic, Outcome::Created)),
            Err((topic, RDKafkaErrorCode::TopicAlreadyExists)) => Ok((topic, Outcome::Existed)),
            Err((topic, code)) => Err(TopicError::Refused { topic, code }),
        })
        .collect()
}

/// Applies `topic:key=value` overrides to a plan.
pub fn configure(specs: &mut [TopicSpec], overrides: &[String]) -> Result<(), String> {
    for text in overrides {
        let (topic, setting) = text
            .split_once(':')
            .ok_or_else(|| format!("{text:?} is not topic:key=value"))?;
        let (key, value) = setting
            .split_once('=')
            .filter(|(key, _)| !key.is_empty())
            .ok_or_else(|| format!("{text:?} is not topic:key=value"))?;
        let spec = specs
            .iter_mut()
            .find(|spec| spec.name == topic || spec.name.ends_with(&format!(".{topic}")))
            .ok_or_else(|| format!("{text:?}: no topic {topic:?} in the plan"))?;
        spec.configs.insert(key.to_owned(), value.to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_topics_keep_everything_and_page_requests_expire() {
        let mut specs = plan("outbox.event.", 3);
        let names: Vec<&str> = specs.iter().map(|spec| spec.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "outbox.event.contact",
                "outbox.event.assignment",
                "outbox.event.reassignment",
                "outbox.event.digest",
                "outbox.event.relay-position"
            ]
        );
        assert_eq!(specs[4].partitions, 1);
        assert_eq!(specs[4].configs["cleanup.policy"], "compact");
        assert_eq!(specs[1].configs["retention.ms"], "-1");
        assert_eq!(specs[2].configs["cleanup.policy"], "delete");
        configure(
            &mut specs,
            &[
                "assignment:retention.ms=86400000".into(),
                "outbox.event.contact:x=y".into(),
            ],
        )
        .unwrap();
        assert_eq!(specs[1].configs["retention.ms"], "86400000");
        assert_eq!(specs[0].configs["x"], "y");
        assert!(configure(&mut specs, &["nope:a=b".into()]).is_err());
        assert!(configure(&mut specs, &["assignment:novalue".into()]).is_err());
    }

    #[test]
    fn replay_topics_delete_after_a_week_and_replicate_as_the_cluster_does() {
        let spec = replay("outbox.event.assignment.replay.x", 3);
        assert_eq!(spec.partitions, 3);
        assert_eq!(spec.replication_factor, BROKER_DEFAULT_REPLICATION);
        assert_eq!(spec.configs["cleanup.policy"], "delete");
        assert_eq!(spec.configs["retention.ms"], "604800000");
        assert!(TopicSpec::plain("t", 1, 1).configs.is_empty());
    }
}
