-- Reassignment runs: after a supersede, every active assignment of the old contact is
-- REPLACEd onto the new one in chained pages. One Kafka message (a ReassignmentPageRequested
-- event on topic outbox.event.reassignment) handles one keyset page; the page's transaction
-- raises the next request. These tables are the run's progress: the worker updates them in
-- the same transaction as the page's events. They are operational state, not projections:
-- the ledger keeps the run's requests, row failures and completion as events. They reference
-- contacts by id without foreign keys: `ledger projections rebuild` truncates and refills the
-- projections, which must not depend on operational tables.

CREATE TABLE reassignment_runs (
    run_id          uuid        PRIMARY KEY,
    old_contact_id  uuid        NOT NULL,
    new_contact_id  uuid        NOT NULL,
    jurisdiction    text        NOT NULL REFERENCES jurisdictions (code),
    page_size       integer     NOT NULL CHECK (page_size BETWEEN 1 AND 10000),
    status          text        NOT NULL CHECK (status IN ('running', 'completed')),
    -- The fence: the last assignment id the chain has passed (NULL before the first page).
    -- A page request is processed only if its cursor equals this one, checked and advanced
    -- under this row's lock, so a redelivered or duplicated request cannot fork the chain.
    cursor          uuid,
    pages           integer     NOT NULL DEFAULT 0,
    replaced        bigint      NOT NULL DEFAULT 0,
    skipped         bigint      NOT NULL DEFAULT 0,
    failed          bigint      NOT NULL DEFAULT 0,
    -- Active assignments of the old contact when the run started (for progress estimates).
    total_at_start  bigint      NOT NULL,
    -- Whole-page failures of the current page; at the limit the page runs row by row.
    page_attempts   integer     NOT NULL DEFAULT 0,
    last_error      text,
    longest_page_ms double precision NOT NULL DEFAULT 0,
    requested_by    text        NOT NULL,
    correlation_id  uuid        NOT NULL,
    -- Event id of the newest page request: the causation of the next page's events.
    last_request_id uuid        NOT NULL,
    started_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    completed_at    timestamptz,
    CHECK ((status = 'completed') = (completed_at IS NOT NULL))
);
CREATE INDEX reassignment_runs_by_contact ON reassignment_runs (old_contact_id, started_at);
CREATE INDEX reassignment_runs_running ON reassignment_runs (started_at) WHERE status = 'running';

-- One row per processed page: what it did and when its transaction ran.
CREATE TABLE reassignment_pages (
    run_id       uuid        NOT NULL REFERENCES reassignment_runs (run_id),
    page         integer     NOT NULL CHECK (page > 0),
    cursor_from  uuid,
    cursor_to    uuid,
    candidates   integer     NOT NULL,
    replaced     integer     NOT NULL,
    skipped      integer     NOT NULL,
    failed       integer     NOT NULL,
    -- Row by row after repeated whole-page failures.
    isolated     boolean     NOT NULL,
    -- Transaction start and the end of its work (just before commit), server clock.
    started_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL,
    PRIMARY KEY (run_id, page)
);

-- Rows a run gave up on after a bounded number of attempts; the chain moved past them.
-- A later run for the same contact retries them (finished rows are skipped).
CREATE TABLE reassignment_failures (
    run_id        uuid        NOT NULL REFERENCES reassignment_runs (run_id),
    assignment_id uuid        NOT NULL,
    business_id   uuid        NOT NULL,
    attempts      integer     NOT NULL,
    reason        text        NOT NULL,
    failed_at     timestamptz NOT NULL,
    PRIMARY KEY (run_id, assignment_id)
);
