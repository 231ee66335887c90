-- Foreign keys of other tables that reference the projections, as `name on table`. A
-- rebuild replaces every projection row (offline: DELETE and INSERT; online: new tables),
-- so such a key would break, or with ON DELETE CASCADE take its rows with it.
SELECT conname || ' on ' || conrelid::regclass
FROM pg_constraint
WHERE contype = 'f'
  AND confrelid IN ('public.contacts'::regclass, 'public.assignments'::regclass)
  AND conrelid NOT IN ('public.contacts'::regclass, 'public.assignments'::regclass)
