-- A cosigning round's one read (ledger/src/digest/cosign.rs): the newest checkpoint and, for
-- each witness of the policy ($1, their names in the policy's order), its stored
-- cosignature of that checkpoint and its last answer as witness_state keeps it. No row: no
-- checkpoint yet; a policy without witnesses gives one row with a NULL name.
WITH newest AS (
    SELECT digest_seq, size, note FROM checkpoints ORDER BY digest_seq DESC LIMIT 1
)
SELECT n.digest_seq, n.size, n.note,
       w.name, c.line, s.size AS held, s.digest_seq AS state_seq, s.outcome, s.reason
FROM newest n
LEFT JOIN LATERAL unnest($1::text[]) WITH ORDINALITY AS w(name, position) ON true
LEFT JOIN cosignatures c ON c.digest_seq = n.digest_seq AND c.witness = w.name
LEFT JOIN witness_state s ON s.witness = w.name
ORDER BY w.position
