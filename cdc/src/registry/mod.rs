//! The schema registry of the topics framed for registries (`value_formats` set to
//! `confluent_protobuf`): the relay registers events.proto under each such topic's subject
//! once, when it starts, and frames every value with the id it got ([`register_topics`]).
//!
//! The rules, in the order [`register_topics`] applies them:
//!
//! 1. A topic's subject is `<topic>-value`: Confluent's default `TopicNameStrategy`, the
//!    one every deserializer assumes unless told otherwise.
//! 2. events.proto is looked up under the subject first, a read: a relay whose registry
//!    credentials are read-only (a platform team registers the schema from CI with `ledger
//!    relay register`) finds its id and writes nothing.
//! 3. Not found, it is registered ([`register`]): the subject's compatibility is set to
//!    [`COMPATIBILITY`] first, only when the subject has no level of its own, so the registry
//!    checks this build's events.proto against every version the subject holds (Apicurio's
//!    default is `NONE`: it would take any change) and a stricter level an admin set stays.
//!    A registry that holds the schema answers the id it has. A schema the registry refuses
//!    as incompatible stops the relay, quoting the registry's reason: publishing it would
//!    give the topic's readers a writer schema they were promised they would never get. A
//!    registry that refuses the credentials, or the write, stops it naming the fix.
//! 4. A registry that does not answer stops the relay before it reads anything: it never
//!    publishes an unframed value on a framed topic. Once started it needs the registry no
//!    more: it frames from the id it holds, whatever becomes of the registry.
//! 5. The relay then records each id with the schema's [`fingerprint`] in the database and
//!    refuses an id that differs from the one recorded for the same schema
//!    (`crate::relay::schema_ids`): a registry lost or restored.

mod client;

pub use client::{RegistryAccess, RegistryError, SchemaRegistry, own_level};
use sha2::{Digest as _, Sha256};
use tracing::info;

use crate::confluent_wire::SchemaId;

use crate::config::RelayConfig;
use crate::infra::entry::Entry;
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

/// The SHA-256 of `schema`'s text, in hex: what the relay records beside the id it got,
/// to know the schema again (`relay_schema_ids`).
pub fn fingerprint(schema: &str) -> String {
    Sha256::digest(schema.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The aggregate types whose topics are framed for registries.
fn framed(config: &RelayConfig) -> Vec<String> {
    config
        .value_formats
        .iter()
        .filter(|(_, format)| format.is_framed())
        .map(|(aggregate_type, _)| aggregate_type.clone())
        .collect()
}

/// What registering under one subject did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    /// The subject.
    pub subject: String,
    /// The id the registry answered.
    pub schema_id: SchemaId,
    /// The subject's level of its own, when it had one (left as it was); `None` when
    /// [`COMPATIBILITY`] was set.
    pub kept_level: Option<String>,
}

/// Registers events.proto under `subject`, its compatibility set to [`COMPATIBILITY`] first
/// when the subject has no level of its own (see the module doc).
pub async fn register(
    registry: &SchemaRegistry,
    subject: &str,
) -> Result<Registered, RegistryError> {
    let kept_level = registry.own_compatibility(subject).await?;
    if kept_level.is_none() {
        registry.set_compatibility(subject, COMPATIBILITY).await?;
    }
    let schema_id = registry
        .register(subject, ra_ledger_proto::EVENTS_PROTO)
        .await?;
    Ok(Registered {
        subject: subject.to_owned(),
        schema_id,
        kept_level,
    })
}

/// `ledger relay register`: events.proto registered under the subject of every topic
/// `config` frames for registries, with credentials that may write, so that relays may run
/// with read-only ones. Empty when no topic is framed.
#[inline(never)]
pub fn register_all<'a>(
    config: &'a RelayConfig,
) -> Entry<'a, Result<Vec<Registered>, RegistryError>> {
    Box::pin(register_all_inner(config))
}

async fn register_all_inner(config: &RelayConfig) -> Result<Vec<Registered>, RegistryError> {
    let framed = framed(config);
    if framed.is_empty() {
        return Ok(Vec::new());
    }
    let registry = SchemaRegistry::connect(&config.registry_access())?;
    let mut registered = Vec::new();
    for aggregate_type in framed {
        let subject = value_subject(&config.topic(&aggregate_type));
        registered.push(register(&registry, &subject).await?);
    }
    Ok(registered)
}

/// `config` with every `confluent_protobuf` topic's schema id filled in
/// ([`ValueFormat::ConfluentProtobuf`]), looked up or else registered; `config` itself when
/// no topic is framed, without a word to any registry. See the module doc for the rules.
pub async fn register_topics(mut config: RelayConfig) -> Result<RelayConfig, RegistryError> {
    let framed = framed(&config);
    if framed.is_empty() {
        return Ok(config);
    }
    let registry = SchemaRegistry::connect(&config.registry_access())?;
    for aggregate_type in framed {
        let subject = value_subject(&config.topic(&aggregate_type));
        let (schema_id, how) = match registry
            .look_up(&subject, ra_ledger_proto::EVENTS_PROTO)
            .await?
        {
            Some(schema_id) => (schema_id, "found registered"),
            None => (register(&registry, &subject).await?.schema_id, "registered"),
        };
        info!(
            %subject,
            schema_id,
            registry = registry.url(),
            "events.proto {how}; values framed with its id"
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fingerprint_is_the_schemas_sha256() {
        assert_eq!(
            fingerprint(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_ne!(
            fingerprint(ra_ledger_proto::EVENTS_PROTO),
            fingerprint(&format!("{} ", ra_ledger_proto::EVENTS_PROTO))
        );
    }
}
