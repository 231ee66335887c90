-- The consumer library's inbox: one row per (consumer, event id) applied.
CREATE TABLE IF NOT EXISTS ledger_inbox (
    consumer    text        NOT NULL,
    event_id    text        NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
)
