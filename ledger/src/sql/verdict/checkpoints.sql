-- The newest checkpoint, the newest one that met the witness quorum (a round publishes it
-- once with the quorum, in checkpoint_publications, when its cosignatures meet it), and
-- since when the log has been ahead of that one: when the oldest checkpoint after it was
-- sealed (its digest's created_at; null while the newest met the quorum). Read by column
-- name.
WITH met AS (
    SELECT coalesce(max(digest_seq), 0) AS seq FROM checkpoint_publications WHERE quorum
)
SELECT (SELECT max(digest_seq) FROM checkpoints) AS newest,
       (SELECT seq FROM met) AS newest_met,
       (SELECT min(d.created_at)
        FROM checkpoints c JOIN digests d ON d.seq = c.digest_seq
        WHERE c.digest_seq > (SELECT seq FROM met)) AS short_since
