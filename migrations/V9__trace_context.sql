-- W3C trace context (`traceparent`) of the request that appended an event: recorded with the
-- event and its outbox row (the relay publishes it as a Kafka header), and with a
-- reassignment run, whose pages continue the trace of the supersede that started it.
-- Operational metadata: outside the events' hash chain. NULL for events written before.
ALTER TABLE events ADD COLUMN traceparent text;
ALTER TABLE outbox ADD COLUMN traceparent text;
ALTER TABLE reassignment_runs ADD COLUMN traceparent text;
