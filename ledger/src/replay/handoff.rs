//! Recording a replay's past and its handoff: steps 1 to 3 of the module above.

use std::collections::BTreeMap;
use std::time::Duration;

use deadpool_postgres::Object;
use rdkafka::ClientConfig;
use tokio_postgres::IsolationLevel;

use super::kafka::end_offsets;
use super::stored::{Replay, RunError};
use crate::older_transactions::WaitError;

/// How long the start waits for transactions older than it to end.
const OLDER_TRANSACTIONS_WAIT: Duration = Duration::from_secs(60);

/// Steps 1 to 3 of the handoff (module docs): the live end offsets, then a wait for the
/// transactions older than a fresh transaction id, then the snapshot.
pub(super) async fn record_past(
    client: &mut Object,
    config: &ClientConfig,
    replay: &Replay,
    partitions: &BTreeMap<String, i32>,
) -> Result<(), RunError> {
    let mut handoff = BTreeMap::new();
    for (live, &count) in partitions {
        handoff.insert(live.clone(), end_offsets(config, live, count).await?);
    }
    wait_for_older_transactions(client).await?;
    take_past(client, replay, &handoff).await
}

/// Step 2: takes a fresh transaction id, and waits until no transaction below it is in
/// progress (at most [`OLDER_TRANSACTIONS_WAIT`]; the error names those still open).
async fn wait_for_older_transactions(client: &Object) -> Result<(), RunError> {
    crate::older_transactions::wait_for_older(client, OLDER_TRANSACTIONS_WAIT)
        .await
        .map_err(|error| match error {
            WaitError::Database(error) => RunError::Database(error),
            WaitError::StillOpen { waited, open } => RunError::OlderTransactions(waited, open),
        })
}

/// Step 3: takes the snapshot in a REPEATABLE READ transaction, and records it with the
/// handoff offsets, the highest position it sees and its events per live topic in the same
/// transaction.
async fn take_past(
    client: &mut Object,
    replay: &Replay,
    handoff: &BTreeMap<String, BTreeMap<i32, i64>>,
) -> Result<(), RunError> {
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .start()
        .await?;
    let row = tx
        .query_one(
            include_str!("../sql/replay/take_past.sql"),
            &[
                &replay.aggregate_types,
                &replay.event_types,
                &replay.stream_prefix,
                &replay.recorded_from,
                &replay.recorded_to,
            ],
        )
        .await?;
    let snapshot: String = row.get("snapshot");
    let past_end: i64 = row.get("past_end");
    let counts: serde_json::Value = row.get("topic_events");
    let counts: BTreeMap<String, i64> = serde_json::from_value(counts).unwrap_or_default();
    let topic_events: BTreeMap<String, i64> = replay
        .aggregate_types
        .iter()
        .map(|aggregate| {
            (
                replay.live_topic(aggregate),
                counts.get(aggregate).copied().unwrap_or(0),
            )
        })
        .collect();
    let total: i64 = topic_events.values().sum();
    let handoff = serde_json::to_value(handoff).expect("offsets serialize");
    let topic_events = serde_json::to_value(&topic_events).expect("counts serialize");
    tx.execute(
        include_str!("../sql/replay/record_past.sql"),
        &[
            &replay.id,
            &handoff,
            &snapshot,
            &past_end,
            &total,
            &topic_events,
        ],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
