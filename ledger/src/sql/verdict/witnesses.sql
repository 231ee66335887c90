-- Each witness of the policy ($1, their names in the policy's order) with its last answer as
-- witness_state keeps it (ledger/src/digest/cosign.rs; no row: never sent a checkpoint), for
-- the verdict's witness rules and the console's operations page. Read by column name.
SELECT w.name, s.outcome, s.reason, s.digest_seq, s.size, s.updated_at
FROM unnest($1::text[]) WITH ORDINALITY AS w(name, position)
LEFT JOIN witness_state s ON s.witness = w.name
ORDER BY w.position
