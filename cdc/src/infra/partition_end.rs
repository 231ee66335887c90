//! The librdkafka context of a consumer that reads partitions to their end: the relay's
//! exactly-once position reader, `ledger reconcile` and `ledger verify --digests`.
//!
//! Such a reader asks librdkafka to say when it reached a partition's end
//! (`enable.partition.eof`), which is how it knows it is done. librdkafka says so with an
//! error event, and rdkafka hands every error event to the client's context before the
//! reader sees it; the default context logs each at `error`, so every read to the end
//! logged `ERROR librdkafka: Global error: PartitionEOF`, once per partition, and an
//! operator paging on `ERROR` lines was paged for nothing (issue 35, item 10, for
//! `verify --digests`; issue 50, item 9, for the other two). [`PartitionEndContext`] logs
//! the end at `debug` and every other error at `error`, as the default context does.

use rdkafka::client::ClientContext;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// The context of a consumer that reads to the end (see the module's doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct PartitionEndContext;

impl ClientContext for PartitionEndContext {
    fn error(&self, error: KafkaError, reason: &str) {
        match error {
            KafkaError::Global(RDKafkaErrorCode::PartitionEOF) => {
                tracing::debug!(reason, "reached the end of a partition")
            }
            error => tracing::error!("librdkafka: {error}: {reason}"),
        }
    }
}

impl ConsumerContext for PartitionEndContext {}
