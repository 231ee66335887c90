-- The schema ids the relay of slot $1 recorded for subject $2, each with its schema's
-- fingerprint (relay_schema_ids, migration V22). Read by column name.
SELECT fingerprint, schema_id
FROM relay_schema_ids
WHERE slot_name = $1 AND subject = $2
