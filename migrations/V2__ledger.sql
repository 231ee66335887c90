-- The ledger: an append-only event store, and the projections that give the current view
-- and the full history. Events are the truth; projections are rebuilt from them by
-- `ledger projections rebuild`.

-- Jurisdictions RA Ledger serves: the 50 states, DC and the inhabited territories.
CREATE TABLE jurisdictions (
    code text PRIMARY KEY CHECK (code ~ '^[A-Z]{2}$'),
    name text NOT NULL
);
INSERT INTO jurisdictions (code, name) VALUES
    ('AL','Alabama'),('AK','Alaska'),('AZ','Arizona'),('AR','Arkansas'),('CA','California'),
    ('CO','Colorado'),('CT','Connecticut'),('DE','Delaware'),('DC','District of Columbia'),
    ('FL','Florida'),('GA','Georgia'),('HI','Hawaii'),('ID','Idaho'),('IL','Illinois'),
    ('IN','Indiana'),('IA','Iowa'),('KS','Kansas'),('KY','Kentucky'),('LA','Louisiana'),
    ('ME','Maine'),('MD','Maryland'),('MA','Massachusetts'),('MI','Michigan'),
    ('MN','Minnesota'),('MS','Mississippi'),('MO','Missouri'),('MT','Montana'),
    ('NE','Nebraska'),('NV','Nevada'),('NH','New Hampshire'),('NJ','New Jersey'),
    ('NM','New Mexico'),('NY','New York'),('NC','North Carolina'),('ND','North Dakota'),
    ('OH','Ohio'),('OK','Oklahoma'),('OR','Oregon'),('PA','Pennsylvania'),
    ('RI','Rhode Island'),('SC','South Carolina'),('SD','South Dakota'),('TN','Tennessee'),
    ('TX','Texas'),('UT','Utah'),('VT','Vermont'),('VA','Virginia'),('WA','Washington'),
    ('WV','West Virginia'),('WI','Wisconsin'),('WY','Wyoming'),('PR','Puerto Rico'),
    ('GU','Guam'),('VI','U.S. Virgin Islands'),('AS','American Samoa'),
    ('MP','Northern Mariana Islands');

-- Every change, forever. A stream is one aggregate: `contact-<contact id>` or
-- `assignment-<business id>-<jurisdiction>` (all assignments of one business in one
-- jurisdiction, so "one active assignment" is checked inside one stream).
CREATE TABLE events (
    -- Insertion order, for replay. Not commit order; replay is per stream anyway.
    position        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        uuid        NOT NULL UNIQUE,
    stream          text        NOT NULL,
    stream_version  bigint      NOT NULL CHECK (stream_version > 0),
    event_type      text        NOT NULL,
    schema_version  integer     NOT NULL CHECK (schema_version > 0),
    -- The protobuf envelope (ra.ledger.v1.Envelope), byte for byte what Kafka carries.
    payload         bytea       NOT NULL,
    -- Transaction time: when the ledger learned it.
    recorded_at     timestamptz NOT NULL,
    -- Business time: when it took effect. May be backdated, never before the stream's
    -- previous event (checked by the append path).
    effective_at    timestamptz NOT NULL,
    actor           text        NOT NULL,
    correlation_id  uuid        NOT NULL,
    causation_id    uuid,
    -- Tamper evidence: sha256 over the previous event's hash of the stream and this
    -- event's fields; `ledger verify` recomputes the chains.
    prev_hash       bytea,
    hash            bytea       NOT NULL,
    UNIQUE (stream, stream_version)
);
CREATE INDEX events_effective ON events (stream, effective_at);

-- The database itself refuses to rewrite history, whatever the client.
CREATE FUNCTION refuse_event_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger events are append-only: % on events refused', TG_OP
        USING ERRCODE = 'RAL01',
              HINT = 'Correct history by appending a new event.';
END;
$$;
CREATE TRIGGER events_append_only_rows BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION refuse_event_rewrite();
CREATE TRIGGER events_append_only_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_event_rewrite();

-- Projection: every contact, as it was created (contacts are immutable; a supersede
-- creates a new one), with its status and lineage.
CREATE TABLE contacts (
    contact_id     uuid        PRIMARY KEY,
    jurisdiction   text        NOT NULL REFERENCES jurisdictions (code),
    name           text        NOT NULL,
    address_line1  text        NOT NULL,
    address_line2  text        NOT NULL DEFAULT '',
    city           text        NOT NULL,
    region         text        NOT NULL,
    postal_code    text        NOT NULL,
    status         text        NOT NULL CHECK (status IN ('primary', 'on_file')),
    -- Deferred: a supersede demotes the old contact before the new one exists.
    supersedes     uuid        REFERENCES contacts (contact_id) DEFERRABLE INITIALLY DEFERRED,
    superseded_by  uuid        REFERENCES contacts (contact_id) DEFERRABLE INITIALLY DEFERRED,
    created_at     timestamptz NOT NULL,
    recorded_at    timestamptz NOT NULL,
    superseded_at  timestamptz,
    superseded_recorded_at timestamptz,
    stream_version bigint      NOT NULL
);
-- At most one primary contact per jurisdiction.
CREATE UNIQUE INDEX contacts_one_primary ON contacts (jurisdiction) WHERE status = 'primary';

-- Projection: every assignment with its validity interval [started_at, ended_at).
CREATE TABLE assignments (
    assignment_id  uuid        PRIMARY KEY,
    business_id    uuid        NOT NULL,
    jurisdiction   text        NOT NULL REFERENCES jurisdictions (code),
    contact_id     uuid        NOT NULL REFERENCES contacts (contact_id),
    started_at     timestamptz NOT NULL,
    ended_at       timestamptz,
    end_reason     text        CHECK (end_reason IN ('replaced', 'cancelled')),
    -- Deferred: a REPLACE ends the old assignment before the new one exists.
    replaces       uuid        REFERENCES assignments (assignment_id) DEFERRABLE INITIALLY DEFERRED,
    replaced_by    uuid        REFERENCES assignments (assignment_id) DEFERRABLE INITIALLY DEFERRED,
    recorded_at    timestamptz NOT NULL,
    ended_recorded_at timestamptz,
    CHECK ((ended_at IS NULL) = (end_reason IS NULL)),
    CHECK (ended_at IS NULL OR ended_at >= started_at)
);
-- The last line of defense: one active assignment per business and jurisdiction.
CREATE UNIQUE INDEX assignments_one_active ON assignments (business_id, jurisdiction)
    WHERE ended_at IS NULL;
-- As-of and period queries, and history pages.
CREATE INDEX assignments_by_business ON assignments (business_id, jurisdiction, started_at);
CREATE INDEX assignments_history ON assignments (business_id, started_at, assignment_id);
-- The repoint run's keyset pages over a contact's active assignments.
CREATE INDEX assignments_active_by_contact ON assignments (contact_id, assignment_id)
    WHERE ended_at IS NULL;
