-- The rebuilt projections replace the live ones, in the rebuild's transaction.
SET CONSTRAINTS ALL DEFERRED;
TRUNCATE public.assignments, public.contacts;
INSERT INTO public.contacts SELECT * FROM pg_temp.contacts;
INSERT INTO public.assignments SELECT * FROM pg_temp.assignments;
