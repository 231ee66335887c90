-- Removes the marks a digest sealed: exactly the rows its REPEATABLE READ snapshot shows
-- (appends committed later keep theirs for the next digest).
DELETE FROM digest_dirty
