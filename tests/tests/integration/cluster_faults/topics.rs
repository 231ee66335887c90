//! `ledger topics create` on three brokers: three copies and `min.insync.replicas=2` when
//! none are asked for; a factor larger than the cluster refused before anything is made;
//! with a broker down, only the brokers in the metadata count.

use std::collections::BTreeMap;
use std::time::Duration;

use ra_ledger::topics::{self, Outcome, Replication, TopicError};
use ra_ledger_tests::cluster::QuorumLayout;
use ra_ledger_tests::stack::private_cluster;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;

use super::blocking;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "on three brokers: deploy/test-cluster runs it (CI time)"]
async fn topics_get_three_copies_two_in_sync_and_no_more_copies_than_brokers() -> anyhow::Result<()>
{
    let cluster = blocking(|| private_cluster(3, QuorumLayout::OnTheBrokers))?;
    let brokers = cluster.brokers();
    let no_settings = BTreeMap::new();
    let plan = |prefix: &str| topics::plan(&format!("{prefix}.outbox.event."), 3);

    let mut too_many = plan("four");
    for spec in &mut too_many {
        spec.replication = Replication::Exactly(4);
    }
    let refused = topics::create_missing(&brokers, &no_settings, &too_many)
        .await
        .expect_err("four copies on three brokers");
    println!("four copies on three brokers: {refused}");
    assert!(
        matches!(
            refused,
            TopicError::TooFewBrokers {
                asked: 4,
                brokers: 3,
                ..
            }
        ),
        "{refused}"
    );
    let names: Vec<String> = blocking(|| cluster.metadata())?
        .topics()
        .iter()
        .map(|topic| topic.name().to_owned())
        .collect();
    assert!(
        !names.iter().any(|name| name.starts_with("four.")),
        "{names:?}"
    );

    let created = topics::create_missing(&brokers, &no_settings, &plan("three")).await?;
    assert_eq!(created.brokers, 3);
    assert!(
        created
            .topics
            .iter()
            .all(|(_, outcome)| *outcome == Outcome::Created)
    );
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create()?;
    let resources: Vec<ResourceSpecifier> = created
        .topics
        .iter()
        .map(|(spec, _)| ResourceSpecifier::Topic(&spec.name))
        .collect();
    for ((spec, _), result) in created.topics.iter().zip(
        admin
            .describe_configs(&resources, &AdminOptions::new())
            .await?,
    ) {
        let resource = result.map_err(|code| anyhow::anyhow!("{}: {code}", spec.name))?;
        let min_isr = resource
            .get(topics::MIN_INSYNC_REPLICAS)
            .and_then(|entry| entry.value.clone());
        assert_eq!(min_isr.as_deref(), Some("2"), "{}", spec.name);
        let replicas = blocking(|| cluster.replicas(&spec.name))?;
        assert!(
            replicas.iter().all(|r| r.len() == 3),
            "{}: {replicas:?}",
            spec.name
        );
    }

    // One broker down: the metadata lists two, and two copies is all a topic can get.
    blocking(|| cluster.node(3).kill())?;
    blocking(|| {
        cluster.wait_for(Duration::from_secs(60), "two brokers listed", |metadata| {
            metadata.brokers().len() == 2
        })
    })?;
    let degraded = topics::create_missing(&brokers, &no_settings, &plan("two")).await?;
    println!(
        "with a broker down: {} brokers listed, {:?} copies",
        degraded.brokers,
        degraded
            .topics
            .first()
            .map(|(spec, _)| spec.replication_factor())
    );
    assert_eq!(degraded.brokers, 2);
    assert!(
        degraded
            .topics
            .iter()
            .all(|(spec, _)| spec.replication_factor() == Some(2)
                && spec.configs[topics::MIN_INSYNC_REPLICAS] == "1")
    );
    let mut three = plan("three-again");
    for spec in &mut three {
        spec.replication = Replication::Exactly(3);
    }
    let refused = topics::create_missing(&brokers, &no_settings, &three)
        .await
        .expect_err("three copies with a broker down");
    assert!(
        matches!(
            refused,
            TopicError::TooFewBrokers {
                asked: 3,
                brokers: 2,
                ..
            }
        ),
        "{refused}"
    );
    Ok(())
}
