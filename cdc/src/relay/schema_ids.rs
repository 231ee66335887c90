//! The schema ids the relay framed its topics with, recorded (migration V22, table
//! `relay_schema_ids`) and checked at every start (issue 57, item 3).
//!
//! Records on a framed topic are kept for good, each carrying the id of its writer schema.
//! After the registry was lost or restored, the same schema may get another id (the old
//! records' id then dangles, or names whatever the registry gave it next), or the relay's
//! id may name another schema. Either way consumers fail or, worse, decode with the wrong
//! schema, and only an operator can tell which ids to restore. So the relay records, per
//! slot and subject, the id the registry answered for each schema it framed with, known by
//! its fingerprint ([`crate::registry::fingerprint`]), and refuses to start when the
//! registry answers another id for a recorded schema, or a recorded schema's id for this
//! one ([`decide`]). A new schema (another build's events.proto) adds a row.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{RelayError, connect};
use crate::config::RelayConfig;
use crate::confluent_wire::SchemaId;
use crate::registry::{fingerprint, value_subject};
use crate::value_format::ValueFormat;

pub use super::SchemaIdError;

/// What to do with the id `answered` for the schema `fingerprint` under `subject`, given
/// what is recorded for the subject (fingerprint, id): `Ok(true)` record it, `Ok(false)`
/// known already, or the refusal. Pure.
pub fn decide(
    subject: &str,
    recorded: &[(String, SchemaId)],
    fingerprint: &str,
    answered: SchemaId,
) -> Result<bool, SchemaIdError> {
    if let Some((_, id)) = recorded.iter().find(|(known, _)| known == fingerprint) {
        if *id == answered {
            return Ok(false);
        }
        return Err(SchemaIdError::Changed {
            subject: subject.to_owned(),
            recorded: *id,
            answered,
            fingerprint: fingerprint.to_owned(),
        });
    }
    if let Some((other, _)) = recorded.iter().find(|(_, id)| *id == answered) {
        return Err(SchemaIdError::Reused {
            subject: subject.to_owned(),
            answered,
            other: other.clone(),
        });
    }
    Ok(true)
}

/// [`check`], tried again while the database does not answer (as a session is, with the
/// same backoff) until `shutdown`: a relay that starts before its database waits for it
/// rather than exit. A refusal, or a shutdown, ends it.
pub(super) async fn check_until(
    config: &RelayConfig,
    shutdown: &CancellationToken,
) -> Result<(), RelayError> {
    let mut backoff = Duration::from_millis(100);
    let max_backoff = Duration::from_millis(config.reconnect_backoff_max_ms);
    loop {
        match check(config).await {
            Err(error) if super::should_retry(&error) => {
                warn!(%error, retry_in = ?backoff, "cannot check the schema ids yet");
            }
            outcome => return outcome,
        }
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(max_backoff);
    }
}

/// Checks the ids `config` frames with (filled in by [`crate::registry::register_topics`])
/// against those recorded for its slot, and records the new ones. Nothing to do when no
/// topic is framed.
pub(super) async fn check(config: &RelayConfig) -> Result<(), RelayError> {
    let framed: Vec<(String, SchemaId)> = config
        .value_formats
        .iter()
        .filter_map(|(aggregate_type, format)| match format {
            ValueFormat::ConfluentProtobuf {
                schema_id: Some(id),
            } => Some((value_subject(&config.topic(aggregate_type)), *id)),
            _ => None,
        })
        .collect();
    if framed.is_empty() {
        return Ok(());
    }
    let client =
        connect::connect_sql(config, &format!("ledger-relay:{}:schema-ids", config.slot)).await?;
    let fingerprint = fingerprint(ra_ledger_proto::EVENTS_PROTO);
    for (subject, answered) in framed {
        let recorded: Vec<(String, SchemaId)> = client
            .query(
                include_str!("../sql/schema_ids.sql"),
                &[&config.slot, &subject],
            )
            .await?
            .iter()
            .map(|row| {
                let id: i32 = row.get("schema_id");
                (row.get("fingerprint"), id as SchemaId)
            })
            .collect();
        if decide(&subject, &recorded, &fingerprint, answered)? {
            client
                .execute(
                    include_str!("../sql/record_schema_id.sql"),
                    &[&config.slot, &subject, &fingerprint, &(answered as i32)],
                )
                .await?;
            info!(%subject, schema_id = answered, %fingerprint, "schema id recorded");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_schema_keeps_its_id_and_an_id_keeps_its_schema() {
        let recorded = vec![("aaa".to_owned(), 1), ("bbb".to_owned(), 2)];
        assert_eq!(decide("t-value", &recorded, "aaa", 1), Ok(false));
        assert_eq!(decide("t-value", &recorded, "ccc", 3), Ok(true));
        assert_eq!(decide("t-value", &[], "aaa", 7), Ok(true));
        let changed = decide("t-value", &recorded, "aaa", 5).unwrap_err();
        assert_eq!(
            changed,
            SchemaIdError::Changed {
                subject: "t-value".into(),
                recorded: 1,
                answered: 5,
                fingerprint: "aaa".into()
            }
        );
        let text = changed.to_string();
        assert!(
            text.contains("delete that row of relay_schema_ids to accept id 5"),
            "{text}"
        );
        assert_eq!(
            decide("t-value", &recorded, "ccc", 2),
            Err(SchemaIdError::Reused {
                subject: "t-value".into(),
                answered: 2,
                other: "bbb".into()
            })
        );
    }
}
