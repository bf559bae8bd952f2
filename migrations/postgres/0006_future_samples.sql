-- Samples and events stamped more than five minutes ahead of the server's clock (issue 38, item
-- 9): refused, so one from a host with a wrong clock cannot hold the latest values, and counted
-- here for /metrics.
ALTER TABLE ingest_totals ADD COLUMN future_samples BIGINT NOT NULL DEFAULT 0;
