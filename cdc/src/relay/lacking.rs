//! What Kafka's refusal of a message says the environment lacks: its topic, or the relay's
//! right to write to it. Neither is the message's fault, so neither parks it
//! ([`crate::publish::classify`] calls both transient): the session ends, confirming nothing
//! past what Kafka acknowledged, and the next one sends again from the slot, until the
//! topic exists or the grant is back (issue 55, item 8: an ACL removed). The relay holds,
//! and says at `error`, at each try, what is missing and the command that mends it: a hold
//! an operator cannot see the cause of is a hold that lasts.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::config::RelayConfig;

/// What `error`, Kafka's answer to a message for `topic`, says the environment lacks, with
/// the fix; `None` for any other error. Pure.
pub fn lacking(error: &KafkaError, topic: &str, config: &RelayConfig) -> Option<String> {
    let principal = config.kafka.get("sasl.username").map_or_else(
        || "the relay's principal".to_owned(),
        |user| format!("User:{user}"),
    );
    match error.rdkafka_error_code()? {
        RDKafkaErrorCode::UnknownTopic | RDKafkaErrorCode::UnknownTopicOrPartition => {
            Some(format!(
                "topic {topic} does not exist; create it (`ledger topics create`: the relay never \
             auto-creates). The relay holds meanwhile: it confirms nothing and retries from the slot"
            ))
        }
        RDKafkaErrorCode::TopicAuthorizationFailed => Some(format!(
            "Kafka refuses {principal} the right to write to topic {topic} \
             (TOPIC_AUTHORIZATION_FAILED): it lacks the WRITE ACL on it. Grant it again, e.g. \
             `kafka-acls.sh --bootstrap-server <brokers> --add --allow-principal {principal} \
             --operation Write --operation Describe --topic {topic}`. The relay holds meanwhile: \
             it confirms nothing, retries from the slot, and goes on by itself once the grant is back"
        )),
        RDKafkaErrorCode::ClusterAuthorizationFailed => Some(format!(
            "Kafka refuses {principal} an idempotent producer while producing to {topic} \
             (CLUSTER_AUTHORIZATION_FAILED): since Kafka 2.8 that means it may WRITE no topic \
             at all (before 2.8: it lacks IDEMPOTENT_WRITE on the cluster). Grant it WRITE on \
             its topics; the relay holds and retries meanwhile"
        )),
        RDKafkaErrorCode::TransactionalIdAuthorizationFailed => Some(format!(
            "Kafka refuses {principal} its transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED): \
             exactly once needs WRITE and DESCRIBE on the relay's transactional id. Grant them; \
             the relay holds and retries meanwhile"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: RDKafkaErrorCode) -> KafkaError {
        KafkaError::MessageProduction(code)
    }

    #[test]
    fn a_missing_grant_names_the_principal_the_topic_and_the_grant() {
        let mut config = RelayConfig::default();
        config
            .kafka
            .insert("sasl.username".into(), "ledger-relay".into());
        let said = lacking(
            &refused(RDKafkaErrorCode::TopicAuthorizationFailed),
            "outbox.event.contact",
            &config,
        )
        .expect("a missing grant is named");
        for part in [
            "User:ledger-relay",
            "outbox.event.contact",
            "WRITE",
            "--operation Write",
            "holds",
        ] {
            assert!(said.contains(part), "{part:?} in {said}");
        }
        let missing = lacking(&refused(RDKafkaErrorCode::UnknownTopic), "t", &config);
        assert!(missing.is_some_and(|said| said.contains("does not exist")));
    }

    #[test]
    fn other_errors_lack_nothing_of_the_environment() {
        let config = RelayConfig::default();
        for code in [
            RDKafkaErrorCode::NotEnoughReplicas,
            RDKafkaErrorCode::MessageTimedOut,
            RDKafkaErrorCode::BrokerTransportFailure,
        ] {
            assert_eq!(lacking(&refused(code), "t", &config), None, "{code:?}");
        }
    }
}
