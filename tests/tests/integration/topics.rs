//! The relay's topics as `ledger topics create` makes them: once, with explicit configs the
//! broker reports back, replicated as the run's one broker allows (a factor beyond it is
//! refused). On three brokers: `cluster_faults::topics`.

use std::collections::BTreeMap;

use ra_ledger::topics::{self, Outcome, Replication, TopicError};
use ra_ledger_tests::TestTopics;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;

#[tokio::test]
async fn topics_are_created_once_with_the_configs_asked_for() -> anyhow::Result<()> {
    let namespace = TestTopics::new();
    let mut specs = topics::plan(&format!("{}.outbox.event.", namespace.prefix), 3);
    topics::configure(&mut specs, &["assignment:retention.ms=86400000".into()])
        .map_err(anyhow::Error::msg)?;
    let no_settings = BTreeMap::new();

    // More copies than the run's one broker can hold: refused, and nothing made.
    let mut too_many = specs.clone();
    for spec in &mut too_many {
        spec.replication = Replication::Exactly(2);
    }
    let refused = topics::create_missing(&namespace.brokers, &no_settings, &too_many)
        .await
        .expect_err("two replicas on one broker");
    assert!(
        matches!(
            refused,
            TopicError::TooFewBrokers {
                asked: 2,
                brokers: 1,
                ..
            }
        ),
        "{refused}"
    );

    let first = topics::create_missing(&namespace.brokers, &no_settings, &specs).await?;
    assert_eq!(first.brokers, 1);
    assert!(
        first
            .topics
            .iter()
            .all(|(spec, outcome)| *outcome == Outcome::Created
                && spec.replication_factor() == Some(1)
                && spec.configs[topics::MIN_INSYNC_REPLICAS] == "1"),
        "{first:?}"
    );
    // Again: nothing is created twice, nothing fails.
    let again = topics::create_missing(&namespace.brokers, &no_settings, &specs).await?;
    assert!(
        again
            .topics
            .iter()
            .all(|(_, outcome)| *outcome == Outcome::Existed),
        "{again:?}"
    );

    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &namespace.brokers)
        .create()?;
    // As settled: with the min.insync.replicas that went with their factor.
    let settled: Vec<_> = first.topics.iter().map(|(spec, _)| spec).collect();
    let resources: Vec<ResourceSpecifier> = settled
        .iter()
        .map(|spec| ResourceSpecifier::Topic(&spec.name))
        .collect();
    let described = admin
        .describe_configs(&resources, &AdminOptions::new())
        .await?;
    for (spec, result) in settled.iter().zip(described) {
        let resource = result.map_err(|code| anyhow::anyhow!("{}: {code}", spec.name))?;
        for (key, value) in &spec.configs {
            let reported = resource.get(key).and_then(|entry| entry.value.as_deref());
            assert_eq!(reported, Some(value.as_str()), "{} {key}", spec.name);
        }
    }
    let reassignment = &specs[2].configs;
    assert_eq!(reassignment["cleanup.policy"], "delete");
    assert_eq!(specs[1].configs["retention.ms"], "86400000");
    Ok(())
}
