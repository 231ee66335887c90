-- Which of the events $1, missing from the topics, Kafka refused for good.
SELECT event_id FROM outbox_parked WHERE event_id = ANY($1)
