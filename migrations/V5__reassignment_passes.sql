-- A run that reaches the end of its keyset checks that no active assignment is left on the
-- old contact other than the rows it gave up on (recorded with their reasons). If one is,
-- it starts another pass from the first assignment instead of reporting `completed`.
-- `pass` counts them; a run gives up after a bounded number and records what is left.
ALTER TABLE reassignment_runs ADD COLUMN pass integer NOT NULL DEFAULT 1 CHECK (pass > 0);
ALTER TABLE reassignment_pages ADD COLUMN pass integer NOT NULL DEFAULT 1 CHECK (pass > 0);

COMMENT ON COLUMN reassignment_runs.new_contact_id IS
    'Where the run moves rows now: the jurisdiction''s primary contact when its last page ran. A later supersede of that contact moves the target on, so no page ever lands on a superseded contact.';
