-- Runs (issue 15): the snapshots of a job are found by their `job` tag, so tags are indexed by
-- key and value too (the primary key starts with the snapshot).
CREATE INDEX snapshot_tags_by_key_value ON snapshot_tags (key, value);
