-- The snapshot library. Never edit an applied migration: add a new numbered file instead.

-- One row per uploaded snapshot, written only after the upload was stored, parsed, analysed and
-- its files were renamed into place: the row is the commit point of an upload, so a crash or a
-- bad file never leaves a half-ingested snapshot in the library.
CREATE TABLE snapshots (
    id              TEXT PRIMARY KEY,      -- first 16 hex digits of sha256: short permalinks
    sha256          TEXT NOT NULL UNIQUE,  -- of the bytes as uploaded: deduplicates uploads
    name            TEXT NOT NULL,
    uploaded_at_ms  INTEGER NOT NULL,      -- Unix epoch milliseconds
    size_bytes      INTEGER NOT NULL,      -- as uploaded (compressed or not)
    decoded_bytes   INTEGER NOT NULL,      -- pickle/JSON bytes after decompression
    encoding        TEXT NOT NULL,         -- pickle | json
    compression     TEXT NOT NULL,         -- none | gzip | zstd | xz
    devices         TEXT NOT NULL,         -- JSON array of device ordinals with a trace
    entries         INTEGER NOT NULL,      -- trace entries, all devices
    peak_bytes      INTEGER NOT NULL,      -- highest live bytes of any device
    reserved_bytes  INTEGER NOT NULL,      -- at the snapshot
    allocated_bytes INTEGER NOT NULL,      -- at the snapshot
    leak_suspects   INTEGER NOT NULL,
    ooms            INTEGER NOT NULL,
    warnings        INTEGER NOT NULL,
    index_ms        INTEGER NOT NULL,      -- parse + analyses, for the record
    report_json     TEXT NOT NULL          -- what `memscope analyze --json` prints
);

CREATE INDEX snapshots_uploaded ON snapshots (uploaded_at_ms DESC);

-- Tags people put on snapshots (job, rank, host, or free text with an empty key) to find them.
CREATE TABLE snapshot_tags (
    snapshot_id TEXT NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE,
    key         TEXT NOT NULL,
    value       TEXT NOT NULL,
    PRIMARY KEY (snapshot_id, key, value)
);
