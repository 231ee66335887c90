INSERT INTO replays (id, aggregate_types, event_types, stream_prefix, recorded_from, recorded_to,
                     topic_prefix, target_template, rate, requested_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
