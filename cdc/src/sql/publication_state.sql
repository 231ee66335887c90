-- What the relay checks of its publication $1, in one statement (one snapshot), as JSON
-- (cdc/src/relay/publication.rs reads it; OIDs as numbers, which JSON gives oid as text):
-- - the table named outbox on the search path, with its columns and their types;
-- - the publication's catalog row and every table and schema it carries, with the row
--   versions (xmin) that make up its identity;
-- - transactions that committed but are not visible to this snapshot yet (a synchronous
--   commit waiting for its standby), which the check waits out before it vouches for the
--   WAL written before it;
-- - transactions still running at the snapshot that changed or removed a catalog row the
--   check read (the xmax of the publication's row, of its tables' rows, of the outbox's
--   pg_class row): a DDL whose commit record may already be in the WAL while the commit
--   log still says "in progress" (XLogFlush under way), waited out the same way;
-- - the transactions still running, and the WAL insert position, read after the snapshot;
-- - whether the DDL guard (migration V17) is installed and enabled, and what else switches
--   it off that a session can see: event_triggers (PostgreSQL 17+) as this session has it,
--   and the settings of roles and databases that turn the guard or event triggers off
--   (issue 55, item 6).
WITH outbox AS (
    SELECT c.oid, n.nspname, c.relname, c.relkind
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = to_regclass('outbox')
), publication AS (
    SELECT p.*, p.xmin, p.xmax FROM pg_publication p WHERE p.pubname = $1
), snapshot AS (
    SELECT x FROM pg_snapshot_xip(pg_current_snapshot()) AS x
)
SELECT json_build_object(
    'outbox', (SELECT json_build_object(
        'oid', o.oid::bigint, 'schema', o.nspname, 'name', o.relname, 'kind', o.relkind,
        'columns', (SELECT coalesce(json_agg(json_build_object(
                                'name', a.attname, 'type_oid', a.atttypid::bigint,
                                'type', format_type(a.atttypid, a.atttypmod))
                            ORDER BY a.attnum), '[]')
                    FROM pg_attribute a
                    WHERE a.attrelid = o.oid AND a.attnum > 0 AND NOT a.attisdropped))
        FROM outbox o),
    'publication', (SELECT json_build_object(
        'oid', p.oid::bigint, 'xmin', p.xmin::text, 'all_tables', p.puballtables,
        'insert', p.pubinsert, 'update', p.pubupdate, 'delete', p.pubdelete,
        'truncate', p.pubtruncate)
        FROM publication p),
    'tables', (SELECT coalesce(json_agg(json_build_object(
                    'oid', r.oid::bigint, 'xmin', r.xmin::text, 'relid', r.prrelid::bigint,
                    'table', r.prrelid::regclass::text,
                    'row_filter', r.prqual IS NOT NULL, 'column_list', r.prattrs IS NOT NULL)
                ORDER BY r.oid), '[]')
               FROM pg_publication_rel r JOIN publication p ON p.oid = r.prpubid),
    'schemas', (SELECT coalesce(json_agg(n.nspname ORDER BY n.nspname), '[]')
                FROM pg_publication_namespace pn
                JOIN publication p ON p.oid = pn.pnpubid
                JOIN pg_namespace n ON n.oid = pn.pnnspid),
    'committed_invisible', (SELECT coalesce(json_agg(x::text), '[]') FROM snapshot
                            WHERE pg_xact_status(x) = 'committed'),
    'running', (SELECT coalesce(json_agg(x::text), '[]') FROM snapshot),
    'pending', (SELECT coalesce(json_agg(DISTINCT s.x::text), '[]') FROM snapshot s
                WHERE (s.x::text::bigint & 4294967295) IN (
                    SELECT p.xmax::text::bigint FROM publication p
                    UNION ALL
                    SELECT r.xmax::text::bigint
                    FROM pg_publication_rel r JOIN publication p ON p.oid = r.prpubid
                    UNION ALL
                    SELECT c.xmax::text::bigint FROM pg_class c JOIN outbox o ON o.oid = c.oid)),
    'guard', (SELECT evtenabled::text FROM pg_event_trigger
              WHERE evtname = 'ra_ledger_outbox_guard'),
    'event_triggers', current_setting('event_triggers', true),
    'overrides', (SELECT coalesce(json_agg(format('%s: %s',
                      CASE WHEN s.setrole = 0 THEN 'database ' || coalesce(d.datname, '(all)')
                           ELSE 'role ' || r.rolname
                                || coalesce(' in database ' || d.datname, '')
                      END, c) ORDER BY 1), '[]')
                  FROM pg_db_role_setting s
                  LEFT JOIN pg_roles r ON r.oid = s.setrole
                  LEFT JOIN pg_database d ON d.oid = s.setdatabase
                  CROSS JOIN LATERAL unnest(s.setconfig) AS c
                  WHERE (s.setdatabase = 0 OR d.datname = current_database())
                    AND ((lower(split_part(c, '=', 1)) = 'ra_ledger.allow_outbox_publication_change'
                          AND lower(split_part(c, '=', 2)) IN ('on', 'true'))
                      OR (lower(split_part(c, '=', 1)) = 'event_triggers'
                          AND lower(split_part(c, '=', 2)) IN ('off', 'false', 'no', '0'))
                      OR (lower(split_part(c, '=', 1)) = 'session_replication_role'
                          AND lower(split_part(c, '=', 2)) = 'replica'))),
    'wal', pg_current_wal_insert_lsn()::text
)::text
