-- Active assignments of a contact (the partial index assignments_active_by_contact).
SELECT count(*) FROM assignments WHERE contact_id = $1 AND ended_at IS NULL
