//! The relay's topics as `ledger topics create` makes them: once, with explicit configs the
//! broker reports back.

use std::collections::BTreeMap;

use ra_ledger::topics::{self, Outcome};
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

    let first = topics::create_missing(&namespace.brokers, &no_settings, &specs).await?;
    assert!(
        first
            .iter()
            .all(|(_, outcome)| *outcome == Outcome::Created),
        "{first:?}"
    );
    // Again: nothing is created twice, nothing fails.
    let again = topics::create_missing(&namespace.brokers, &no_settings, &specs).await?;
    assert!(
        again
            .iter()
            .all(|(_, outcome)| *outcome == Outcome::Existed),
        "{again:?}"
    );

    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &namespace.brokers)
        .create()?;
    let resources: Vec<ResourceSpecifier> = specs
        .iter()
        .map(|spec| ResourceSpecifier::Topic(&spec.name))
        .collect();
    let described = admin
        .describe_configs(&resources, &AdminOptions::new())
        .await?;
    for (spec, result) in specs.iter().zip(described) {
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
