-- Which of the slots $1 (synchronized_standby_slots' names) are not physical slots here.
SELECT name FROM unnest($1::text[]) AS name
WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots s
                  WHERE s.slot_name = name AND s.slot_type = 'physical')
ORDER BY name
