-- The rebuilt projections replace the live ones, in the rebuild's transaction. DELETE, not
-- TRUNCATE: it needs no lock beyond the EXCLUSIVE one the rebuild already holds, so readers
-- keep reading the old rows until the commit and nothing is waited for (see rebuild.rs).
SET CONSTRAINTS ALL DEFERRED;
DELETE FROM public.assignments;
DELETE FROM public.contacts;
INSERT INTO public.contacts SELECT * FROM pg_temp.contacts;
INSERT INTO public.assignments SELECT * FROM pg_temp.assignments;
