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
//! Replication comes from the cluster ([`Replication::FromCluster`]): three copies, or one
//! per broker on a smaller cluster, counted in the cluster's metadata when the topics are
//! created, with `min.insync.replicas` set beside it ([`min_insync_replicas`]). A factor
//! asked for explicitly is refused when the cluster has fewer brokers.
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

/// The copies of each partition a topic gets when none are asked for, on a cluster of this
/// many brokers or more: the relay produces with `acks=all`, and three copies with
/// `min.insync.replicas=2` keep every acknowledged record through the loss of any one broker.
/// A smaller cluster gets one copy per broker.
pub const PREFERRED_REPLICATION: i32 = 3;

/// How many copies of each partition a topic gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// One per broker of the cluster, at most [`PREFERRED_REPLICATION`] (counted when the
    /// topic is created).
    FromCluster,
    /// Exactly this many; refused when the cluster has fewer brokers.
    Exactly(i32),
}

impl Replication {
    /// The factor on a cluster whose metadata lists `brokers` brokers, or `None` when it
    /// asks for more copies than there are brokers to hold them. Kafka would refuse such a
    /// topic too, but with a code ("INVALID_REPLICATION_FACTOR"), not the count.
    pub fn factor(self, brokers: i32) -> Option<i32> {
        match self {
            Self::FromCluster => Some(brokers.clamp(1, PREFERRED_REPLICATION)),
            Self::Exactly(factor) => (factor <= brokers).then_some(factor),
        }
    }
}

/// `min.insync.replicas` for a topic of `factor` copies, unless its configs set one: one
/// fewer than the factor, between 1 and 2. With three copies an `acks=all` write is on two
/// brokers before it is acknowledged and the topic still takes writes with one broker
/// down; with two down, writes are refused (NOT_ENOUGH_REPLICAS) rather than kept on one
/// broker only. The broker's own default is 1, which would acknowledge a write the leader
/// alone holds.
pub fn min_insync_replicas(factor: i32) -> i32 {
    (factor - 1).clamp(1, 2)
}

/// The topic config of the fewest copies an `acks=all` write must reach.
pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";

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
    /// Copies of each partition.
    pub replication: Replication,
    /// Topic configs (`cleanup.policy`, `retention.ms`, ...).
    pub configs: BTreeMap<String, String>,
}

impl TopicSpec {
    /// `name` with `partitions` partitions replicated as the cluster allows
    /// ([`Replication::FromCluster`]), and the broker's default configs (the scratch topics
    /// of tests and benchmarks).
    pub fn plain(name: &str, partitions: i32) -> Self {
        Self {
            name: name.to_owned(),
            partitions,
            replication: Replication::FromCluster,
            configs: BTreeMap::new(),
        }
    }

    /// This spec on a cluster of `brokers` brokers: its replication as a fixed factor, and
    /// `min.insync.replicas` among its configs unless it sets one.
    fn settled(&self, brokers: i32) -> Result<Self, TopicError> {
        let factor = self
            .replication
            .factor(brokers)
            .ok_or_else(|| TopicError::TooFewBrokers {
                topic: self.name.clone(),
                asked: match self.replication {
                    Replication::Exactly(factor) => factor,
                    Replication::FromCluster => PREFERRED_REPLICATION,
                },
                brokers,
            })?;
        let mut settled = self.clone();
        settled.replication = Replication::Exactly(factor);
        settled
            .configs
            .entry(MIN_INSYNC_REPLICAS.to_owned())
            .or_insert_with(|| min_insync_replicas(factor).to_string());
        Ok(settled)
    }

    /// The factor of a settled spec (what [`create`] returns).
    pub fn replication_factor(&self) -> Option<i32> {
        match self.replication {
            Replication::Exactly(factor) => Some(factor),
            Replication::FromCluster => None,
        }
    }
}

/// A replay topic: `partitions` (its live topic's), replicated as the cluster allows (as
/// the live topics are by default), records deleted after [`REPLAY_RETENTION_MS`].
pub fn replay(name: &str, partitions: i32) -> TopicSpec {
    TopicSpec {
        configs: BTreeMap::from([
            ("cleanup.policy".to_owned(), "delete".to_owned()),
            ("retention.ms".to_owned(), REPLAY_RETENTION_MS.to_string()),
        ]),
        ..TopicSpec::plain(name, partitions)
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
        (crate::digest::AGGREGATE_TYPE, keep_everything),
    ]
    .into_iter()
    .map(|(aggregate, configs)| TopicSpec {
        name: format!("{prefix}{aggregate}"),
        partitions,
        replication: Replication::FromCluster,
        configs,
    })
    .chain([TopicSpec {
        name: ra_ledger_cdc::config::position_topic(prefix),
        partitions: 1,
        replication: Replication::FromCluster,
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
    /// More copies asked for than the cluster has brokers.
    #[error(
        "cannot create topic {topic} with {asked} replicas: the cluster's metadata lists {brokers} \
         broker(s) now; start the missing brokers (a broker that is down is not listed), or ask \
         for --replication-factor {brokers}. Nothing was created"
    )]
    TooFewBrokers {
        /// The topic.
        topic: String,
        /// The replicas asked for.
        asked: i32,
        /// Brokers in the cluster's metadata.
        brokers: i32,
    },
}

/// What [`create`] did.
#[derive(Debug, Clone)]
pub struct Created {
    /// Brokers in the cluster's metadata, which the replication was settled for.
    pub brokers: i32,
    /// Each topic as settled (its factor fixed, `min.insync.replicas` among its configs),
    /// and what became of it.
    pub topics: Vec<(TopicSpec, Outcome)>,
}

/// Creates the topics of `specs` that do not exist yet on `brokers` (with `settings`,
/// other librdkafka settings such as TLS).
pub async fn create_missing(
    brokers: &str,
    settings: &BTreeMap<String, String>,
    specs: &[TopicSpec],
) -> Result<Created, TopicError> {
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
/// already is left as it is ([`Outcome::Existed`]). The replication is settled first for
/// the brokers the cluster's metadata lists; if any topic asks for more copies than that,
/// none is created ([`TopicError::TooFewBrokers`]).
pub async fn create(config: &ClientConfig, specs: &[TopicSpec]) -> Result<Created, TopicError> {
    let admin: AdminClient<DefaultClientContext> = config.create()?;
    let brokers = live_brokers(config.clone()).await?;
    let settled = specs
        .iter()
        .map(|spec| spec.settled(brokers))
        .collect::<Result<Vec<_>, _>>()?;
    let new_topics: Vec<NewTopic> = settled
        .iter()
        .map(|spec| {
            let factor = spec
                .replication_factor()
                .expect("a settled spec has a factor");
            spec.configs.iter().fold(
                NewTopic::new(&spec.name, spec.partitions, TopicReplication::Fixed(factor)),
                |topic, (key, value)| topic.set(key, value),
            )
        })
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let mut topics = Vec::with_capacity(settled.len());
    for result in admin.create_topics(&new_topics, &options).await? {
        let (name, outcome) = match result {
            Ok(topic) => (topic, Outcome::Created),
            Err((topic, RDKafkaErrorCode::TopicAlreadyExists)) => (topic, Outcome::Existed),
            Err((topic, code)) => return Err(TopicError::Refused { topic, code }),
        };
        if let Some(spec) = settled.iter().find(|spec| spec.name == name) {
            topics.push((spec.clone(), outcome));
        }
    }
    Ok(Created { brokers, topics })
}

/// The brokers the cluster's metadata lists now: the live ones (a broker that is down, or
/// not yet registered with the controller, is not among them).
async fn live_brokers(config: ClientConfig) -> Result<i32, TopicError> {
    tokio::task::spawn_blocking(move || {
        let client: AdminClient<DefaultClientContext> = config.create()?;
        // All topics (`None`): asking for one by name could auto-create it on a broker
        // that allows that.
        let metadata = client
            .inner()
            .fetch_metadata(None, Duration::from_secs(30))?;
        Ok(i32::try_from(metadata.brokers().len()).unwrap_or(i32::MAX))
    })
    .await
    .map_err(|_| TopicError::Kafka(rdkafka::error::KafkaError::Canceled))?
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
        assert_eq!(spec.replication, Replication::FromCluster);
        assert_eq!(spec.configs["cleanup.policy"], "delete");
        assert_eq!(spec.configs["retention.ms"], "604800000");
        assert!(TopicSpec::plain("t", 1).configs.is_empty());
    }

    #[test]
    fn replication_is_three_copies_or_one_per_broker_and_never_more_than_the_brokers() {
        let from_cluster: Vec<Option<i32>> = (1..=5)
            .map(|brokers| Replication::FromCluster.factor(brokers))
            .collect();
        assert_eq!(from_cluster, [Some(1), Some(2), Some(3), Some(3), Some(3)]);
        assert_eq!(Replication::Exactly(3).factor(3), Some(3));
        assert_eq!(Replication::Exactly(5).factor(9), Some(5));
        assert_eq!(Replication::Exactly(2).factor(1), None);
        let min_isr: Vec<i32> = (1..=5).map(min_insync_replicas).collect();
        assert_eq!(min_isr, [1, 1, 2, 2, 2]);
    }

    #[test]
    fn a_settled_spec_has_its_factor_and_min_insync_replicas_unless_it_set_one() {
        let spec = TopicSpec::plain("t", 3).settled(3).unwrap();
        assert_eq!(spec.replication_factor(), Some(3));
        assert_eq!(spec.configs[MIN_INSYNC_REPLICAS], "2");
        let mut own = TopicSpec::plain("t", 3);
        own.configs
            .insert(MIN_INSYNC_REPLICAS.to_owned(), "3".to_owned());
        assert_eq!(own.settled(5).unwrap().configs[MIN_INSYNC_REPLICAS], "3");
        let refused = TopicSpec {
            replication: Replication::Exactly(3),
            ..TopicSpec::plain("t", 3)
        }
        .settled(2)
        .unwrap_err()
        .to_string();
        assert!(
            refused.contains("with 3 replicas")
                && refused.contains("lists 2 broker(s)")
                && refused.contains("--replication-factor 2"),
            "{refused}"
        );
    }
}
