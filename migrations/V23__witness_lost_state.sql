-- A witness that answers holding a smaller size than it cosigned before (its state lost, or
-- restored from a backup) is an alarm of its own, not a resend from that size (issue 56,
-- item 4): outcome 3 of witness_state (ledger/src/digest/cosign.rs `Outcome::LostState`).
-- (V23: V20 to V22 are other branches'.)
ALTER TABLE witness_state DROP CONSTRAINT witness_state_outcome_check;
ALTER TABLE witness_state ADD CONSTRAINT witness_state_outcome_check
    CHECK (outcome IN (0, 1, 2, 3));
