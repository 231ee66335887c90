-- A fresh transaction id, after last_position.sql in the same transaction.
SELECT pg_current_xact_id()::text
