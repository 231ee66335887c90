-- An operator's cancel: a replay requested or running ends here, which frees its place among
-- the replays open at once; one that already ended is left as it is (no row).
UPDATE replays SET status = 'cancelled', cancelled_by = $2, cancelled_at = now()
WHERE id = $1 AND status IN ('requested', 'running')
