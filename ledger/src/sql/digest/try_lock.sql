-- Takes the session advisory lock $1 if it is free (the digest builder's, or the cosigning
-- round's): true when taken. Released by unlock.sql on the same connection.
SELECT pg_try_advisory_lock($1)
