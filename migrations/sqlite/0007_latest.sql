-- The latest sample of each series and running totals, written with every batch (issue 13):
-- /metrics and the fleet read these instead of searching the sample tables, so they answer in
-- time independent of how much history is stored. The latest rows are pruned with the raw
-- samples they stand for; the totals only grow (Prometheus counters never go down).

CREATE TABLE allocator_latest (
    host            TEXT NOT NULL,
    pid             INTEGER NOT NULL,
    start_key       INTEGER NOT NULL,   -- start_time_ms, or -1 when unknown (a key is never NULL)
    start_time_ms   INTEGER,
    device          INTEGER NOT NULL,
    gpu_uuid        TEXT,
    time_ms         INTEGER NOT NULL,
    step            INTEGER,
    allocated_bytes INTEGER NOT NULL,
    reserved_bytes  INTEGER NOT NULL,
    alloc_retries   INTEGER,
    ooms            INTEGER,
    PRIMARY KEY (host, pid, start_key, device)
) WITHOUT ROWID;
CREATE INDEX allocator_latest_by_time ON allocator_latest (time_ms);
INSERT INTO allocator_latest (host, pid, start_key, start_time_ms, device, gpu_uuid, time_ms, step,
                              allocated_bytes, reserved_bytes, alloc_retries, ooms)
    SELECT host, pid, ifnull(start_time_ms, -1), start_time_ms, device, gpu_uuid, max(time_ms), step,
           allocated_bytes, reserved_bytes, alloc_retries, ooms
    FROM allocator_samples GROUP BY host, pid, start_time_ms, device;

CREATE TABLE gpu_latest (
    gpu_uuid       TEXT PRIMARY KEY,
    time_ms        INTEGER NOT NULL,
    used_bytes     INTEGER,
    reserved_bytes INTEGER,
    gpu_util       INTEGER,
    temperature_c  INTEGER,
    power_mw       INTEGER
) WITHOUT ROWID;
INSERT INTO gpu_latest (gpu_uuid, time_ms, used_bytes, reserved_bytes, gpu_util, temperature_c, power_mw)
    SELECT gpu_uuid, max(time_ms), used_bytes, reserved_bytes, gpu_util, temperature_c, power_mw
    FROM gpu_samples GROUP BY gpu_uuid;

-- Batches, samples and reported drops since the store was created.
CREATE TABLE ingest_totals (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    batches INTEGER NOT NULL,
    rows    INTEGER NOT NULL,
    dropped INTEGER NOT NULL
);
INSERT INTO ingest_totals (id, batches, rows, dropped)
    SELECT 1, count(*), coalesce(sum(rows), 0), coalesce(sum(dropped), 0) FROM ingested_batches;
