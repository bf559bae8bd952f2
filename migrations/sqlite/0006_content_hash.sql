-- The hash of a snapshot's decoded bytes (xxh3-128, hex), issue 11: the same snapshot uploaded
-- plain and compressed is one entry. NULL for rows from before it was recorded.
ALTER TABLE snapshots ADD COLUMN content_hash TEXT;
CREATE INDEX snapshots_content_hash ON snapshots (content_hash);
