-- Live collection, second step (issue 4): the in-process agent's device UUID and segment figures,
-- idempotent allocator samples, and one-minute roll-ups so months of data stay small.

ALTER TABLE allocator_samples ADD COLUMN gpu_uuid TEXT;
ALTER TABLE allocator_samples ADD COLUMN segments INTEGER;
ALTER TABLE allocator_samples ADD COLUMN largest_free_block_bytes INTEGER;

-- An agent's sample may reach the server twice (relayed by a collector that crashed between
-- spooling and deleting the agent's file): (process, device, time) stores it once.
DELETE FROM allocator_samples WHERE rowid NOT IN (
    SELECT min(rowid) FROM allocator_samples
    GROUP BY host, pid, coalesce(start_time_ms, -1), device, time_ms);
DROP INDEX allocator_samples_by_process_time;
CREATE UNIQUE INDEX allocator_samples_by_process_time
    ON allocator_samples (host, pid, coalesce(start_time_ms, -1), device, time_ms);

-- The process a GPU's readings belong to, for the GPU page's join.
CREATE INDEX process_samples_by_gpu_time ON process_samples (gpu_uuid, time_ms);
CREATE INDEX allocator_samples_by_gpu_time ON allocator_samples (gpu_uuid, time_ms);

-- One-minute roll-ups of raw samples older than the raw retention (`--raw-retention-hours`);
-- kept for `--rollup-retention-days`. `minute_ms` is the start of the minute.
CREATE TABLE gpu_samples_1m (
    gpu_uuid       TEXT NOT NULL,
    minute_ms      INTEGER NOT NULL,
    n              INTEGER NOT NULL,
    used_min_bytes INTEGER,
    used_max_bytes INTEGER,
    used_mean_bytes INTEGER,
    reserved_bytes INTEGER,
    gpu_util_mean  INTEGER,
    temperature_max_c INTEGER,
    power_mean_mw  INTEGER,
    PRIMARY KEY (gpu_uuid, minute_ms)
);

CREATE TABLE process_samples_1m (
    host           TEXT NOT NULL,
    gpu_uuid       TEXT NOT NULL,
    pid            INTEGER NOT NULL,
    start_time_ms  INTEGER,
    minute_ms      INTEGER NOT NULL,
    name           TEXT,
    n              INTEGER NOT NULL,
    used_min_bytes INTEGER NOT NULL,
    used_max_bytes INTEGER NOT NULL,
    used_mean_bytes INTEGER NOT NULL
);
CREATE UNIQUE INDEX process_samples_1m_key
    ON process_samples_1m (host, gpu_uuid, pid, coalesce(start_time_ms, -1), minute_ms);
CREATE INDEX process_samples_1m_by_gpu ON process_samples_1m (gpu_uuid, minute_ms);

CREATE TABLE allocator_samples_1m (
    host                TEXT NOT NULL,
    pid                 INTEGER NOT NULL,
    start_time_ms       INTEGER,
    device              INTEGER NOT NULL,
    gpu_uuid            TEXT,
    minute_ms           INTEGER NOT NULL,
    n                   INTEGER NOT NULL,
    last_step           INTEGER,
    allocated_min_bytes INTEGER NOT NULL,
    allocated_max_bytes INTEGER NOT NULL,
    allocated_mean_bytes INTEGER NOT NULL,
    reserved_max_bytes  INTEGER NOT NULL,
    reserved_mean_bytes INTEGER NOT NULL,
    inactive_split_max_bytes INTEGER,
    alloc_retries       INTEGER,
    ooms                INTEGER
);
CREATE UNIQUE INDEX allocator_samples_1m_key
    ON allocator_samples_1m (host, pid, coalesce(start_time_ms, -1), device, minute_ms);
CREATE INDEX allocator_samples_1m_by_gpu ON allocator_samples_1m (gpu_uuid, minute_ms);
