//! Replays of topics framed for a schema registry: a team that reads a live topic with a
//! registry's deserializer (the relay's `confluent_protobuf`) reads its replay topic with the
//! same one, so a replay frames the events of such a topic too.
//!
//! A live topic is framed when the registry the runner is given holds its subject
//! (`<topic>-value`): the relay registers it there when it frames the topic. Its events are
//! framed with the subject's latest schema id, the newest events.proto a relay registered,
//! which by the subject's compatibility (`BACKWARD_TRANSITIVE`) reads every event written
//! before it. A runner given no registry, or a topic whose subject the registry does not
//! hold, publishes the stored bytes as they are. The completion markers stay JSON on every
//! topic: a consumer tells them apart by their header before it decodes a value.

use std::borrow::Cow;
use std::collections::BTreeMap;

use ra_ledger_cdc::confluent_wire::{self, SchemaId};
use ra_ledger_cdc::registry::{SchemaRegistry, value_subject};
use tracing::info;

use super::stored::RunError;

/// The live topics a replay frames, each with its schema id.
#[derive(Debug, Clone, Default)]
pub(super) struct Framing {
    ids: BTreeMap<String, SchemaId>,
}

impl Framing {
    /// Asks `registry`, once per run, which of `live_topics` are framed.
    pub(super) async fn of<'a>(
        registry: Option<&SchemaRegistry>,
        live_topics: impl IntoIterator<Item = &'a String>,
    ) -> Result<Self, RunError> {
        let mut ids = BTreeMap::new();
        let Some(registry) = registry else {
            return Ok(Self { ids });
        };
        for live in live_topics {
            let latest = registry
                .latest_id(&value_subject(live))
                .await
                .map_err(|error| RunError::Registry(error.to_string()))?;
            if let Some(schema_id) = latest {
                info!(topic = %live, schema_id, "replay frames this topic's events for the schema registry");
                ids.insert(live.clone(), schema_id);
            }
        }
        Ok(Self { ids })
    }

    /// The value of an event of `live`'s: `payload` framed, or as it is.
    pub(super) fn value<'a>(&self, live: &str, payload: &'a [u8]) -> Cow<'a, [u8]> {
        match self.ids.get(live) {
            Some(&schema_id) => Cow::Owned(
                confluent_wire::frame(
                    schema_id,
                    ra_ledger_proto::ENVELOPE_MESSAGE_INDEXES,
                    payload,
                )
                .to_vec(),
            ),
            None => Cow::Borrowed(payload),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_framed_topics_events_get_its_schema_id_and_others_stay_as_stored() {
        let framing = Framing {
            ids: BTreeMap::from([("outbox.event.assignment".to_owned(), 7)]),
        };
        assert_eq!(
            framing
                .value("outbox.event.assignment", b"\x0a\x01e")
                .as_ref(),
            b"\x00\x00\x00\x00\x07\x00\x0a\x01e"
        );
        assert_eq!(
            framing.value("outbox.event.contact", b"\x0a\x01e").as_ref(),
            b"\x0a\x01e"
        );
    }
}
