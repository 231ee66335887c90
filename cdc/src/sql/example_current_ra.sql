-- The example consumer's projection: the current RA per business and jurisdiction.
CREATE TABLE IF NOT EXISTS example_current_ra (
    business_id   text        NOT NULL,
    jurisdiction  text        NOT NULL,
    assignment_id text        NOT NULL,
    contact_id    text        NOT NULL,
    since         timestamptz NOT NULL,
    PRIMARY KEY (business_id, jurisdiction)
)
