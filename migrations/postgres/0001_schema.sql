-- The PostgreSQL schema (issue 16): the same tables, columns and meaning as the SQLite migrations
-- in ../sqlite/ (0001–0010) applied in order, written once for a new database in this dialect's
-- own types and indexes. Never edit an applied migration: add a new numbered file here AND its
-- SQLite counterpart in ../sqlite/ (`server/tests/pg_schema.rs` checks that the two backends
-- have the same tables and columns).
--
-- Dialect choices:
-- - Times (…_ms, Unix epoch milliseconds), bytes and counts are BIGINT; small enumerations
--   (GPU index, device ordinal, utilisation %) too: one integer type, as in SQLite, so every
--   integer column reads back as a 64-bit value in either backend; flags BOOLEAN; digests BYTEA.
-- - SQLite keys a process by `coalesce(start_time_ms, -1)` in expression indexes; here a NULL
--   start time is a value like any other through `UNIQUE NULLS NOT DISTINCT` (PostgreSQL 15),
--   which partitioned tables accept (they refuse expressions in unique indexes).
-- - The sample tables and their one-minute roll-ups grow with the fleet (1,000 hosts × 8 GPUs ×
--   30 days of roll-ups is 345M rows in `gpu_samples_1m` alone), so they are partitioned by day
--   on their time column: retention drops whole days (`DROP TABLE` of a partition, no
--   `DELETE`), and a query for a window reads only its days. `memscope_day_partitions(from, to)`
--   creates the days a window needs; each table's DEFAULT partition takes rows of days not made
--   yet, so an insert never fails for want of one.

-- The snapshot library (SQLite 0001, 0005, 0006, 0010). A row is the commit point of an upload.
CREATE TABLE snapshots (
    id                  TEXT PRIMARY KEY,      -- first 16 hex digits of sha256: short permalinks
    sha256              TEXT NOT NULL UNIQUE,  -- of the bytes as uploaded: deduplicates uploads
    name                TEXT NOT NULL,
    uploaded_at_ms      BIGINT NOT NULL,
    size_bytes          BIGINT NOT NULL,       -- as uploaded (compressed or not)
    decoded_bytes       BIGINT NOT NULL,       -- pickle/JSON bytes after decompression
    encoding            TEXT NOT NULL,         -- pickle | json
    compression         TEXT NOT NULL,         -- none | gzip | zstd | xz
    devices             TEXT NOT NULL,         -- JSON array of device ordinals with a trace
    entries             BIGINT NOT NULL,
    peak_bytes          BIGINT NOT NULL,
    reserved_bytes      BIGINT NOT NULL,
    allocated_bytes     BIGINT NOT NULL,
    leak_suspects       BIGINT NOT NULL,
    ooms                BIGINT NOT NULL,
    warnings            BIGINT NOT NULL,
    index_ms            BIGINT NOT NULL,
    report_json         TEXT NOT NULL,         -- what `memscope analyze --json` prints, as printed
    device_total_bytes  BIGINT,                -- NULL: unknown
    device_total_source TEXT,                  -- upload | collector | set
    device_total_detail TEXT,
    content_hash        TEXT
);
CREATE INDEX snapshots_uploaded ON snapshots (uploaded_at_ms DESC);
CREATE INDEX snapshots_content_hash ON snapshots (content_hash);

CREATE TABLE snapshot_tags (
    snapshot_id TEXT NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE,
    key         TEXT NOT NULL,
    value       TEXT NOT NULL,
    PRIMARY KEY (snapshot_id, key, value)
);
CREATE INDEX snapshot_tags_by_key_value ON snapshot_tags (key, value);

-- Live collection (SQLite 0002, 0008): each (collector, spool_id, seq) batch is stored once.
CREATE TABLE ingested_batches (
    collector      TEXT NOT NULL,
    spool_id       TEXT NOT NULL DEFAULT '',
    seq            BIGINT NOT NULL,
    received_at_ms BIGINT NOT NULL,
    rows           BIGINT NOT NULL,
    dropped        BIGINT NOT NULL,
    digest         BYTEA,                  -- sha256 of the batch as parsed
    PRIMARY KEY (collector, spool_id, seq)
);
CREATE INDEX ingested_batches_received ON ingested_batches (received_at_ms);

CREATE TABLE gpus (
    uuid         TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    idx          BIGINT NOT NULL,
    name         TEXT,
    total_bytes  BIGINT,
    last_seen_ms BIGINT NOT NULL
);

CREATE TABLE gpu_samples (
    gpu_uuid       TEXT NOT NULL,
    time_ms        BIGINT NOT NULL,
    used_bytes     BIGINT,
    free_bytes     BIGINT,
    reserved_bytes BIGINT,
    gpu_util       BIGINT,
    mem_util       BIGINT,
    temperature_c  BIGINT,
    power_mw       BIGINT
) PARTITION BY RANGE (time_ms);
CREATE TABLE gpu_samples_default PARTITION OF gpu_samples DEFAULT;
CREATE INDEX gpu_samples_by_gpu_time ON gpu_samples (gpu_uuid, time_ms);

CREATE TABLE process_samples (
    host          TEXT NOT NULL,
    gpu_uuid      TEXT NOT NULL,
    pid           BIGINT NOT NULL,
    start_time_ms BIGINT,
    time_ms       BIGINT NOT NULL,
    name          TEXT,
    cgroup        TEXT,
    used_bytes    BIGINT NOT NULL
) PARTITION BY RANGE (time_ms);
CREATE TABLE process_samples_default PARTITION OF process_samples DEFAULT;
CREATE INDEX process_samples_by_process_time ON process_samples (host, pid, start_time_ms, time_ms);
CREATE INDEX process_samples_by_gpu_time ON process_samples (gpu_uuid, time_ms);

-- SQLite 0002 + 0003: one row per (process, device, time).
CREATE TABLE allocator_samples (
    host                     TEXT NOT NULL,
    pid                      BIGINT NOT NULL,
    start_time_ms            BIGINT,
    device                   BIGINT NOT NULL,
    time_ms                  BIGINT NOT NULL,
    step                     BIGINT,
    allocated_bytes          BIGINT NOT NULL,
    reserved_bytes           BIGINT NOT NULL,
    active_bytes             BIGINT,
    inactive_split_bytes     BIGINT,
    requested_bytes          BIGINT,
    alloc_retries            BIGINT,
    ooms                     BIGINT,
    gpu_uuid                 TEXT,
    segments                 BIGINT,
    largest_free_block_bytes BIGINT
) PARTITION BY RANGE (time_ms);
CREATE TABLE allocator_samples_default PARTITION OF allocator_samples DEFAULT;
CREATE UNIQUE INDEX allocator_samples_by_process_time
    ON allocator_samples (host, pid, start_time_ms, device, time_ms) NULLS NOT DISTINCT;
CREATE INDEX allocator_samples_by_gpu_time ON allocator_samples (gpu_uuid, time_ms);

CREATE TABLE events (
    host        TEXT NOT NULL,
    time_ms     BIGINT NOT NULL,
    kind        TEXT NOT NULL,
    pid         BIGINT,
    device      BIGINT,
    message     TEXT NOT NULL,
    snapshot_id TEXT
);
CREATE INDEX events_by_time ON events (time_ms);

-- One-minute roll-ups (SQLite 0003).
CREATE TABLE gpu_samples_1m (
    gpu_uuid          TEXT NOT NULL,
    minute_ms         BIGINT NOT NULL,
    n                 BIGINT NOT NULL,
    used_min_bytes    BIGINT,
    used_max_bytes    BIGINT,
    used_mean_bytes   BIGINT,
    reserved_bytes    BIGINT,
    gpu_util_mean     BIGINT,
    temperature_max_c BIGINT,
    power_mean_mw     BIGINT,
    PRIMARY KEY (gpu_uuid, minute_ms)
) PARTITION BY RANGE (minute_ms);
CREATE TABLE gpu_samples_1m_default PARTITION OF gpu_samples_1m DEFAULT;

CREATE TABLE process_samples_1m (
    host            TEXT NOT NULL,
    gpu_uuid        TEXT NOT NULL,
    pid             BIGINT NOT NULL,
    start_time_ms   BIGINT,
    minute_ms       BIGINT NOT NULL,
    name            TEXT,
    n               BIGINT NOT NULL,
    used_min_bytes  BIGINT NOT NULL,
    used_max_bytes  BIGINT NOT NULL,
    used_mean_bytes BIGINT NOT NULL
) PARTITION BY RANGE (minute_ms);
CREATE TABLE process_samples_1m_default PARTITION OF process_samples_1m DEFAULT;
CREATE UNIQUE INDEX process_samples_1m_key
    ON process_samples_1m (host, gpu_uuid, pid, start_time_ms, minute_ms) NULLS NOT DISTINCT;
CREATE INDEX process_samples_1m_by_gpu ON process_samples_1m (gpu_uuid, minute_ms);

CREATE TABLE allocator_samples_1m (
    host                     TEXT NOT NULL,
    pid                      BIGINT NOT NULL,
    start_time_ms            BIGINT,
    device                   BIGINT NOT NULL,
    gpu_uuid                 TEXT,
    minute_ms                BIGINT NOT NULL,
    n                        BIGINT NOT NULL,
    last_step                BIGINT,
    allocated_min_bytes      BIGINT NOT NULL,
    allocated_max_bytes      BIGINT NOT NULL,
    allocated_mean_bytes     BIGINT NOT NULL,
    reserved_max_bytes       BIGINT NOT NULL,
    reserved_mean_bytes      BIGINT NOT NULL,
    inactive_split_max_bytes BIGINT,
    alloc_retries            BIGINT,
    ooms                     BIGINT
) PARTITION BY RANGE (minute_ms);
CREATE TABLE allocator_samples_1m_default PARTITION OF allocator_samples_1m DEFAULT;
CREATE UNIQUE INDEX allocator_samples_1m_key
    ON allocator_samples_1m (host, pid, start_time_ms, device, minute_ms) NULLS NOT DISTINCT;
CREATE INDEX allocator_samples_1m_by_gpu ON allocator_samples_1m (gpu_uuid, minute_ms);

-- Hosts and processes seen (SQLite 0004); a collector token speaks for one host (SQLite 0009).
CREATE TABLE hosts (
    host          TEXT PRIMARY KEY,
    collector     TEXT NOT NULL,
    first_seen_ms BIGINT NOT NULL,
    last_seen_ms  BIGINT NOT NULL
);

CREATE TABLE processes (
    host          TEXT NOT NULL,
    pid           BIGINT NOT NULL,
    start_time_ms BIGINT,
    name          TEXT,
    cgroup        TEXT,
    has_agent     BOOLEAN NOT NULL DEFAULT false,
    first_seen_ms BIGINT NOT NULL,
    last_seen_ms  BIGINT NOT NULL
);
CREATE UNIQUE INDEX processes_key ON processes (host, pid, start_time_ms) NULLS NOT DISTINCT;
CREATE INDEX processes_by_last_seen ON processes (last_seen_ms);

CREATE TABLE collector_hosts (
    token_name    TEXT PRIMARY KEY,
    host          TEXT NOT NULL,
    first_seen_ms BIGINT NOT NULL
);

-- The latest reading of each process's device and each GPU, and ingest totals (SQLite 0007).
CREATE TABLE allocator_latest (
    host            TEXT NOT NULL,
    pid             BIGINT NOT NULL,
    start_key       BIGINT NOT NULL,   -- start_time_ms, or -1 when unknown (a key is never NULL)
    start_time_ms   BIGINT,
    device          BIGINT NOT NULL,
    gpu_uuid        TEXT,
    time_ms         BIGINT NOT NULL,
    step            BIGINT,
    allocated_bytes BIGINT NOT NULL,
    reserved_bytes  BIGINT NOT NULL,
    alloc_retries   BIGINT,
    ooms            BIGINT,
    PRIMARY KEY (host, pid, start_key, device)
);
CREATE INDEX allocator_latest_by_time ON allocator_latest (time_ms);

CREATE TABLE gpu_latest (
    gpu_uuid       TEXT PRIMARY KEY,
    time_ms        BIGINT NOT NULL,
    used_bytes     BIGINT,
    reserved_bytes BIGINT,
    gpu_util       BIGINT,
    temperature_c  BIGINT,
    power_mw       BIGINT
);

CREATE TABLE ingest_totals (
    id      SMALLINT PRIMARY KEY CHECK (id = 1),
    batches BIGINT NOT NULL,
    rows    BIGINT NOT NULL,
    dropped BIGINT NOT NULL
);
INSERT INTO ingest_totals (id, batches, rows, dropped) VALUES (1, 0, 0, 0);

-- Creates the day partitions (UTC days) of every partitioned table that a window of
-- [from_ms, to_ms) touches and that do not exist yet, moving any rows of those days out of the
-- DEFAULT partition first (PostgreSQL refuses a new partition whose rows sit in the default).
-- Returns how many partitions it made. Safe to call from several servers at once: the roll-up
-- job calls it under its advisory lock.
CREATE FUNCTION memscope_day_partitions(from_ms BIGINT, to_ms BIGINT) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    day_ms CONSTANT BIGINT := 86400000;
    t TEXT;
    col TEXT;
    d BIGINT;
    part TEXT;
    made INTEGER := 0;
BEGIN
    FOREACH t IN ARRAY ARRAY['gpu_samples', 'process_samples', 'allocator_samples',
                             'gpu_samples_1m', 'process_samples_1m', 'allocator_samples_1m'] LOOP
        col := CASE WHEN t LIKE '%\_1m' THEN 'minute_ms' ELSE 'time_ms' END;
        d := (from_ms / day_ms) * day_ms;
        WHILE d < to_ms LOOP
            part := format('%s_d%s', t, to_char(to_timestamp(d / 1000) AT TIME ZONE 'UTC', 'YYYYMMDD'));
            IF to_regclass(part) IS NULL THEN
                EXECUTE format('CREATE TEMP TABLE memscope_moving ON COMMIT DROP AS '
                               'SELECT * FROM %I WHERE %I >= %s AND %I < %s',
                               t || '_default', col, d, col, d + day_ms);
                EXECUTE format('DELETE FROM %I WHERE %I >= %s AND %I < %s',
                               t || '_default', col, d, col, d + day_ms);
                EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%s) TO (%s)',
                               part, t, d, d + day_ms);
                EXECUTE format('INSERT INTO %I SELECT * FROM memscope_moving', t);
                DROP TABLE memscope_moving;
                made := made + 1;
            END IF;
            d := d + day_ms;
        END LOOP;
    END LOOP;
    RETURN made;
END;
$$;
