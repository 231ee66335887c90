-- A replay's error is `code: sentence` since issue 35 (item 6), its cause in the runner's
-- log under a reference. The errors recorded before carried the database's and Kafka's text
-- (SQLSTATEs, table names, PIDs), which any reader of GET /v1/replays/{id} could see: they
-- are replaced. The runner logged each cause when it happened.
UPDATE replays
SET error = 'internal: recorded before replay errors had codes; the runner''s log of that time has the cause'
WHERE error IS NOT NULL;
