-- Which of the ids $1, read from the topics and not in the range, the ledger has: an event
-- committed during the run is no phantom.
SELECT event_id FROM events WHERE event_id = ANY($1)
