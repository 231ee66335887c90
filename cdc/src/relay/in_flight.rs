//! What the relay handed to librdkafka and Kafka has not answered yet, for every way it
//! produces (both delivery modes and a recovery): each message with its session's tag,
//! and librdkafka's delivery reports matched back to them.
//!
//! librdkafka's polling thread hands the reports to the producer's context ([`Reports`]),
//! which adds them to one shared list and wakes the session; the session takes the whole
//! list at once. rdkafka's `FutureProducer` made a channel, two boxes and a future a
//! message, and woke a future a message: about a tenth of the relay's CPU on its hot path.
//!
//! A message is known by its place in the order of sending (its id, librdkafka's opaque),
//! so matching a report is an index into a queue: no map, no allocation.
//!
//! The relay's Kafka lives here: its producers ([`idempotent`], [`transactional`]), what
//! they have in flight ([`InFlight`]), each send's [`Answer`], and [`kafka_flush`], which
//! sends what the producer holds at once.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseRecord, Producer as _, ProducerContext, ThreadedProducer};
use tokio::sync::Notify;

use crate::config::RelayConfig;
use crate::infra::kafka::KafkaSettings;
use crate::publish::OutgoingMessage;

/// The relay's producer: librdkafka's reports go to its [`Reports`].
pub(crate) type Producer = ThreadedProducer<Reports>;

/// Kafka's answer to one send of the session's: what was sent, and whether Kafka has it.
pub(crate) struct Answer<T> {
    /// What was handed to librdkafka.
    pub sent: Sent<T>,
    /// Kafka's answer: `Ok` once Kafka has it (acknowledged; in a transaction, written, to
    /// become visible at its commit).
    pub result: Result<(), KafkaError>,
}

/// A message librdkafka would not queue, with why.
#[derive(Debug)]
pub(crate) struct NotQueued {
    /// The message, never handed over.
    pub message: OutgoingMessage,
    /// librdkafka's refusal.
    pub error: KafkaError,
}

/// The delivery reports librdkafka's polling thread handed over and the session has not
/// taken yet: (message id, outcome).
#[derive(Default)]
pub(crate) struct Reports {
    arrived: Mutex<Vec<(usize, Result<(), KafkaError>)>>,
    /// Woken when the first report arrives in an empty list (a wake-up while nobody waits
    /// is kept for the next wait).
    arrival: Notify,
}

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, id: usize) {
        let outcome = match result {
            Ok(_) => Ok(()),
            Err((error, _)) => Err(error.clone()),
        };
        let mut arrived = self.arrived.lock().unwrap_or_else(PoisonError::into_inner);
        arrived.push((id, outcome));
        // Only the first report the session has not taken wakes it: it takes the others
        // with that one.
        if arrived.len() == 1 {
            self.arrival.notify_one();
        }
    }
}

impl Reports {
    /// Whether a report not yet taken by the session is a failure.
    pub(crate) fn any_failed(&self) -> bool {
        self.arrived
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|(_, outcome)| outcome.is_err())
    }
}

/// What was handed to librdkafka. Kept inline, not boxed: a box would be an allocation a
/// message again, and records are one a Kafka transaction.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Sent<T> {
    /// An outbox row's message, with the tag the session sent it with.
    Message {
        /// The session's tag.
        tag: T,
        /// The message.
        message: OutgoingMessage,
    },
    /// A record of the relay's own (a position), with the mark it was sent with.
    Record {
        /// The session's mark.
        mark: u64,
    },
}

/// The messages and records in flight on one producer.
pub(crate) struct InFlight<T> {
    producer: Producer,
    /// From the oldest unanswered send to the newest: the one at index `i` has the id
    /// `next_id - entries.len() + i`, and `None` once answered.
    entries: VecDeque<Option<Sent<T>>>,
    next_id: usize,
    /// Entries not yet answered.
    unanswered: usize,
    /// Reports taken from the producer's list, not yet handed out; newest first.
    taken: Vec<(usize, Result<(), KafkaError>)>,
}

/// The relay's idempotent producer.
pub(crate) fn idempotent(config: &RelayConfig) -> Result<Producer, KafkaError> {
    create(&config.kafka_settings())
}

/// The exactly-once relay's transactional producer (the `transactional.id` of its slot on
/// the cluster `system_id`). Call `init_transactions` before using it.
pub(crate) fn transactional(config: &RelayConfig, system_id: &str) -> Result<Producer, KafkaError> {
    create(&config.transactional_producer_settings(system_id))
}

fn create(settings: &KafkaSettings) -> Result<Producer, KafkaError> {
    settings
        .client_config()
        .map_err(|error| KafkaError::ClientCreation(error.to_string()))?
        .create_with_context(Reports::default())
}

/// librdkafka's own `rd_kafka_flush`: while it runs, the producer sends without lingering,
/// and it returns once every message's delivery report was served (by rdkafka's polling
/// thread: the producer hands reports out as events), or after `timeout`. Blocking.
///
/// Not rdkafka's `Producer::flush`, which `commit_transaction` also calls: it polls in
/// 100 ms steps, so it made every commit take at least 100 ms. After this flush the one in
/// `commit_transaction` finds nothing left and returns at once.
#[allow(unsafe_code)]
pub(crate) fn kafka_flush(producer: &Producer, timeout: Duration) -> Result<(), KafkaError> {
    let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: the pointer is the producer's live librdkafka handle (`producer` holds it for
    // the whole call), and rd_kafka_flush may be called from any thread.
    let code =
        unsafe { rdkafka::bindings::rd_kafka_flush(producer.client().native_ptr(), timeout_ms) };
    match code {
        rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR => Ok(()),
        code => Err(KafkaError::Flush(code.into())),
    }
}

impl<T> InFlight<T> {
    pub(crate) fn new(producer: Producer) -> Self {
        Self {
            producer,
            entries: VecDeque::new(),
            next_id: 0,
            unanswered: 0,
            taken: Vec::new(),
        }
    }

    pub(crate) fn producer(&self) -> &Producer {
        &self.producer
    }

    /// Hands `message` to librdkafka; its outcome comes from [`InFlight::next`] with `tag`.
    /// A message librdkafka would not even queue comes back at once.
    pub(crate) fn send(&mut self, message: OutgoingMessage, tag: T) -> Result<(), Box<NotQueued>> {
        let record = BaseRecord::with_opaque_to(&message.topic, self.next_id)
            .key(message.row.aggregate_id.as_bytes())
            .payload(message.value.as_ref())
            .headers(message.kafka_headers());
        let queued = self.producer.send(record).map_err(|(error, _)| error);
        match queued {
            Ok(()) => {
                self.sent(Sent::Message { tag, message });
                Ok(())
            }
            Err(error) => Err(Box::new(NotQueued { message, error })),
        }
    }

    /// Hands a record of the relay's own to librdkafka (`key` and `payload` to `partition`
    /// of `topic`); its answer comes from [`InFlight::next`] with `mark`.
    pub(crate) fn send_record(
        &mut self,
        topic: &str,
        partition: i32,
        key: &[u8],
        payload: &[u8],
        mark: u64,
    ) -> Result<(), KafkaError> {
        let record = BaseRecord::with_opaque_to(topic, self.next_id)
            .partition(partition)
            .key(key)
            .payload(payload);
        self.producer.send(record).map_err(|(error, _)| error)?;
        self.sent(Sent::Record { mark });
        Ok(())
    }

    fn sent(&mut self, sent: Sent<T>) {
        self.entries.push_back(Some(sent));
        self.next_id = self.next_id.wrapping_add(1);
        self.unanswered += 1;
    }

    /// Sends from the oldest unanswered one to the newest: what the in-flight bound counts,
    /// so that one message waiting long (its partition's leader gone) stops the reading
    /// before the memory behind it grows without end.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether a failure is among the reports taken from the producer and not yet handed
    /// out (the rest of the failures are the producer's: [`Reports::any_failed`]).
    pub(crate) fn holds_failure(&self) -> bool {
        self.taken.iter().any(|(_, outcome)| outcome.is_err())
    }

    /// Nothing is waiting for Kafka's answer.
    pub(crate) fn is_empty(&self) -> bool {
        self.unanswered == 0
    }

    /// The next answer from Kafka, or `None` once nothing waits for one. Cancel-safe:
    /// nothing is lost when it is dropped unfinished.
    pub(crate) async fn next(&mut self) -> Option<Answer<T>> {
        loop {
            while let Some((id, result)) = self.taken.pop() {
                // None: sent before a [`InFlight::clear`].
                if let Some(sent) = self.answered(id) {
                    return Some(Answer { sent, result });
                }
            }
            if self.unanswered == 0 {
                return None;
            }
            let reports = self.producer.context();
            reports.arrival.notified().await;
            let mut arrived = reports
                .arrived
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            std::mem::swap(&mut self.taken, &mut *arrived);
            drop(arrived);
            self.taken.reverse();
        }
    }

    /// The entry of `id`, now answered; `None` for an id not in flight.
    fn answered(&mut self, id: usize) -> Option<Sent<T>> {
        let oldest = self.next_id.wrapping_sub(self.entries.len());
        let index = id.wrapping_sub(oldest);
        let entry = self.entries.get_mut(index)?.take()?;
        self.unanswered -= 1;
        while let Some(None) = self.entries.front() {
            self.entries.pop_front();
        }
        Some(entry)
    }

    /// Forgets what is in flight (after an abort, whose purge answers it): the reports
    /// still to come for it are dropped.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.unanswered = 0;
        self.taken.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use rdkafka::ClientConfig;
    use rdkafka::error::RDKafkaErrorCode;

    use super::*;
    use crate::outbox::OutboxRow;
    use crate::publish::{CommitHeaders, CommitInfo};

    /// A real librdkafka producer with no broker behind its address: every message times
    /// out after 100 ms, so Kafka's answers come, in an order nobody arranged.
    fn unanswered_producer() -> Producer {
        ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:9")
            .set("message.timeout.ms", "100")
            .create_with_context(Reports::default())
            .unwrap()
    }

    fn message(event_id: &str) -> OutgoingMessage {
        let row = OutboxRow {
            id: 1,
            event_id: event_id.into(),
            aggregate_type: "contact".into(),
            aggregate_id: "c-1".into(),
            event_type: "ContactCreated".into(),
            payload: Bytes::from_static(b"p"),
            traceparent: None,
        };
        let commit = CommitInfo {
            commit_lsn: 0xA0,
            xid: 7,
            commit_time_micros: 1_767_225_600_000_001,
        };
        OutgoingMessage::new(
            &RelayConfig::default(),
            row,
            &Arc::new(CommitHeaders::of(&commit)),
            0,
        )
        .unwrap()
    }

    #[tokio::test]
    async fn every_answer_comes_back_once_with_its_message_and_tag() {
        let mut in_flight = InFlight::new(unanswered_producer());
        assert!(in_flight.next().await.is_none(), "nothing was sent");
        for tag in 0..50u32 {
            in_flight.send(message(&format!("e-{tag}")), tag).unwrap();
        }
        in_flight
            .send_record("outbox.positions", 0, b"slot", b"position", 7)
            .unwrap();
        assert_eq!(in_flight.len(), 51);
        let mut tags = Vec::new();
        let mut records = Vec::new();
        while let Some(Answer { sent, result }) = in_flight.next().await {
            assert_eq!(
                result.unwrap_err().rdkafka_error_code(),
                Some(RDKafkaErrorCode::MessageTimedOut)
            );
            match sent {
                Sent::Message { tag, message } => {
                    assert_eq!(message.row.event_id, format!("e-{tag}"));
                    tags.push(tag);
                }
                Sent::Record { mark } => records.push(mark),
            }
        }
        tags.sort_unstable();
        assert_eq!(tags, (0..50).collect::<Vec<_>>());
        assert_eq!(records, vec![7], "the record's answer comes with its mark");
        assert!(in_flight.is_empty());
        assert_eq!(in_flight.len(), 0);
    }

    /// What the exactly-once commit asks before `commit_transaction`: a failure is seen
    /// whether it waits in the producer's list or among the reports the session took and
    /// has not handed out yet, and handing it out clears it.
    #[tokio::test]
    async fn a_failure_not_yet_handed_out_is_seen_wherever_it_waits() {
        let mut in_flight = InFlight::new(unanswered_producer());
        let seen = |in_flight: &InFlight<u32>| {
            in_flight.holds_failure() || in_flight.producer().context().any_failed()
        };
        assert!(!seen(&in_flight), "nothing sent");
        in_flight.send(message("e-1"), 1u32).unwrap();
        in_flight.send(message("e-2"), 2u32).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        for _ in 0..2 {
            while !seen(&in_flight) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "a message's timeout never arrived as a failure"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let answer = in_flight.next().await.expect("the failed send's answer");
            assert!(answer.result.is_err());
        }
        assert!(!seen(&in_flight), "both handed out");
    }

    #[tokio::test]
    async fn what_was_cleared_is_never_handed_out() {
        let mut in_flight = InFlight::new(unanswered_producer());
        for tag in 0..5u32 {
            in_flight.send(message("cleared"), tag).unwrap();
        }
        in_flight.clear();
        assert!(in_flight.is_empty());
        assert!(in_flight.next().await.is_none());
        in_flight.send(message("kept"), 99).unwrap();
        let Some(Answer {
            sent: Sent::Message { tag, message },
            ..
        }) = in_flight.next().await
        else {
            panic!("the message kept is answered");
        };
        assert_eq!((tag, message.row.event_id.as_str()), (99, "kept"));
        assert!(in_flight.next().await.is_none());
    }

    #[test]
    fn the_bound_counts_from_the_oldest_unanswered_send() {
        let mut in_flight = InFlight::new(unanswered_producer());
        for tag in 0..4u32 {
            in_flight.sent(Sent::Message {
                tag,
                message: message("e"),
            });
        }
        assert!(matches!(
            in_flight.answered(2),
            Some(Sent::Message { tag: 2, .. })
        ));
        assert!(matches!(
            in_flight.answered(1),
            Some(Sent::Message { tag: 1, .. })
        ));
        assert_eq!(in_flight.len(), 4, "the oldest, 0, is still unanswered");
        assert!(in_flight.answered(1).is_none(), "answered once only");
        assert!(matches!(
            in_flight.answered(0),
            Some(Sent::Message { tag: 0, .. })
        ));
        assert_eq!(in_flight.len(), 1);
        assert!(in_flight.answered(7).is_none(), "never sent");
        assert!(!in_flight.is_empty());
        assert!(matches!(
            in_flight.answered(3),
            Some(Sent::Message { tag: 3, .. })
        ));
        assert!(in_flight.is_empty());
    }
}
