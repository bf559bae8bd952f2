-- Exactly once across collector incarnations (issue 13, finding 1). A collector that starts
-- again with a fresh spool numbers its batches from 1 again; keyed by (collector, seq) alone
-- those were answered "duplicate" and lost. Each spool now has a random id, part of the key, and
-- the batch's content digest is kept so a resent key with different content is refused (409)
-- instead of dropped. Version-1 batches (no spool id) are keyed with spool_id = ''.
CREATE TABLE ingested_batches_v2 (
    collector      TEXT NOT NULL,
    spool_id       TEXT NOT NULL DEFAULT '',
    seq            INTEGER NOT NULL,
    received_at_ms INTEGER NOT NULL,
    rows           INTEGER NOT NULL,
    dropped        INTEGER NOT NULL,   -- samples the collector reported dropping
    digest         BLOB,               -- sha256 of the batch as parsed; NULL for older rows
    PRIMARY KEY (collector, spool_id, seq)
);
INSERT INTO ingested_batches_v2 (collector, spool_id, seq, received_at_ms, rows, dropped)
    SELECT collector, '', seq, received_at_ms, rows, dropped FROM ingested_batches;
DROP TABLE ingested_batches;
ALTER TABLE ingested_batches_v2 RENAME TO ingested_batches;
CREATE INDEX ingested_batches_received ON ingested_batches (received_at_ms);
