-- Issue 39: the webhook notifier's outbox. A live OOM or a process found growing becomes one row
-- (its key, unique, says which: the same OOM or process is never sent twice), written before it
-- is sent and marked when the receiver took it, so a restart loses none and retries what was not
-- delivered.
CREATE TABLE webhook_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    created_ms INTEGER NOT NULL,
    -- When the event it tells of happened (an OOM's time): where the next scan resumes.
    event_ms INTEGER NOT NULL,
    body TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_try_ms INTEGER NOT NULL,
    delivered_ms INTEGER,
    last_error TEXT
);
CREATE INDEX webhook_outbox_due ON webhook_outbox (delivered_ms, next_try_ms);
