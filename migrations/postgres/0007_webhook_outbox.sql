-- Issue 39: the webhook notifier's outbox. A live OOM or a process found growing becomes one row
-- (its key, unique, says which: the same OOM or process is never sent twice), written before it
-- is sent and marked when the receiver took it, so a restart loses none and retries what was not
-- delivered.
CREATE TABLE webhook_outbox (
    id BIGSERIAL PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    created_ms BIGINT NOT NULL,
    -- When the event it tells of happened (an OOM's time): where the next scan resumes.
    event_ms BIGINT NOT NULL,
    body TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_try_ms BIGINT NOT NULL,
    delivered_ms BIGINT,
    last_error TEXT
);
CREATE INDEX webhook_outbox_due ON webhook_outbox (delivered_ms, next_try_ms);
