//! The schema registry of the topics framed for registries (`value_formats` set to
//! `confluent_protobuf`): the relay registers events.proto under each such topic's subject
//! once, when it starts, and frames every value with the id it got ([`register_topics`]).
//!
//! The rules, in the order [`register_topics`] applies them:
//!
//! 1. A topic's subject is `<topic>-value`: Confluent's default `TopicNameStrategy`, the
//!    one every deserializer assumes unless told otherwise.
//! 2. The subject's compatibility is set to [`COMPATIBILITY`] before anything is
//!    registered, so the registry checks this build's events.proto against every version
//!    the subject holds (Apicurio's default is `NONE`: it would take any change).
//! 3. events.proto is registered under the subject; a registry that holds it already answers
//!    the id it has. A schema the registry refuses as incompatible stops the relay, quoting the
//!    registry's reason: publishing it would give the topic's readers a writer schema they
//!    were promised they would never get.
//! 4. A registry that does not answer stops the relay before it reads anything: it never
//!    publishes an unframed value on a framed topic. Once started it needs the registry no
//!    more: it frames from the id it holds, whatever becomes of the registry.

mod client;

pub use client::{RegistryError, SchemaRegistry};
use tracing::info;

use crate::config::RelayConfig;
use crate::value_format::ValueFormat;

/// The compatibility level of the relay's subjects: `BACKWARD_TRANSITIVE`, a new version
/// must read what every earlier version wrote. Our topics keep everything and teams rebuild
/// from the beginning, so a reader with the newest schema must read the whole topic, not
/// only the last version's records (plain `BACKWARD`). Stricter `FULL` and `FORWARD` are not
/// usable with Apicurio: its protobuf checker applies the same rules in reverse for the
/// forward direction, where an added field reads as a removed one, so it refuses adding a
/// field, the one change our evolution rules are built on (checked with Apicurio 3.3.3:
/// docs/event-schema-evolution.md). That older readers read newer records is what those
/// rules and the repository's own gate (`proto/tests/schema_gate`) keep.
pub const COMPATIBILITY: &str = "BACKWARD_TRANSITIVE";

/// The subject of the values of `topic` (Confluent's `TopicNameStrategy`).
pub fn value_subject(topic: &str) -> String {
    format!("{topic}-value")
}

/// `config` with every `confluent_protobuf` topic's schema registered and its id filled in
/// ([`ValueFormat::ConfluentProtobuf`]); `config` itself when no topic is framed, without
/// a word to any registry. See the module doc for the rules.
pub async fn register_topics(mut config: RelayConfig) -> Result<RelayConfig, RegistryError> {
    let framed: Vec<String> = config
        .value_formats
        .iter()
        .filter(|(_, format)| format.is_framed())
        .map(|(aggregate_type, _)| aggregate_type.clone())
        .collect();
    if framed.is_empty() {
        return Ok(config);
    }
    let url = config.schema_registry_url.as_deref().unwrap_or_default();
    let registry = SchemaRegistry::new(url)?;
    for aggregate_type in framed {
        let subject = value_subject(&config.topic(&aggregate_type));
        registry.set_compatibility(&subject, COMPATIBILITY).await?;
        let schema_id = registry
            .register(&subject, ra_ledger_proto::EVENTS_PROTO)
            .await?;
        info!(
            %subject,
            schema_id,
            registry = registry.url(),
            compatibility = COMPATIBILITY,
            "events.proto registered; values framed with its id"
        );
        config.value_formats.insert(
            aggregate_type,
            ValueFormat::ConfluentProtobuf {
                schema_id: Some(schema_id),
            },
        );
    }
    Ok(config)
}
