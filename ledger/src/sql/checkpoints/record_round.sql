-- A cosigning round's one write (ledger/src/digest/cosign.rs), by the replica holding the
-- cosigning lock: the answers of the witnesses sent the checkpoint of digest $1 (their names
-- $2, cosignature lines $3 (NULL: none), the sizes they hold $4, outcomes $5, reasons $6)
-- and the checkpoint's publication on the digest topic through the outbox, once short of the
-- quorum and once with it ($7 the quorum; checkpoint_publications remembers which): $8 the
-- event id, $9 the aggregate type, $10 the event type, $11 the JSON document.
WITH answers AS (
    SELECT * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::smallint[], $6::text[])
        AS a(witness, line, size, outcome, reason)
), lines AS (
    INSERT INTO cosignatures (digest_seq, witness, line)
    SELECT $1, witness, line FROM answers WHERE line IS NOT NULL
    ON CONFLICT DO NOTHING
), states AS (
    INSERT INTO witness_state (witness, size, digest_seq, outcome, reason, updated_at)
    SELECT witness, size, $1, outcome, reason, now() FROM answers
    ON CONFLICT (witness) DO UPDATE SET size = EXCLUDED.size,
        digest_seq = EXCLUDED.digest_seq, outcome = EXCLUDED.outcome,
        reason = EXCLUDED.reason, updated_at = now()
), first AS (
    INSERT INTO checkpoint_publications (digest_seq, quorum) VALUES ($1, $7)
    ON CONFLICT DO NOTHING RETURNING digest_seq
)
INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
SELECT $8, $9, 'ledger', $10, $11 FROM first
