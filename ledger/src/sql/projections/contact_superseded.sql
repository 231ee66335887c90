-- ContactSuperseded: the primary contact goes on file, linked to its successor.
UPDATE contacts
SET status = 'on_file', superseded_by = $2, superseded_at = $3, superseded_recorded_at = $4,
    stream_version = $5
WHERE contact_id = $1 AND status = 'primary'
