-- `events (stream, effective_at)` served no query: every read of a stream goes by
-- `(stream, stream_version)` (the heads, the console's timeline, proofs), the audit questions
-- read the projections, and replays and rebuilds go by `position`. It cost every append a
-- second entry keyed on the long stream name: about a tenth of a reassignment page's time.
DROP INDEX IF EXISTS events_effective;
