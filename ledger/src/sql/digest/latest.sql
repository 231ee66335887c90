-- The newest digest with the checkpoint it sealed, if any (ledger/src/digest/build.rs
-- `latest`).
SELECT d.seq, d.root, d.time_micros, d.stream_count, d.event_count, d.previous,
       d.signature, d.public_key, d.message_version, c.note
FROM digests d LEFT JOIN checkpoints c ON c.digest_seq = d.seq
ORDER BY d.seq DESC LIMIT 1
