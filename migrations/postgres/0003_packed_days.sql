-- Closed days of one-minute roll-ups, packed (issue 16; SQLite 0011, which says what a packed
-- row holds). Not partitioned: a fleet's 30 days are ~720,000 rows (one per series and day), and
-- retention deletes a day's rows by `day_ms`. BYTEA columns keep PostgreSQL's default storage:
-- a row over ~2 kB is compressed and moved out of line column by column, so a page that reads
-- one column of a day reads only that column.
CREATE TABLE gpu_samples_1m_packed (
    gpu_uuid          TEXT NOT NULL,
    day_ms            BIGINT NOT NULL,
    minutes           BYTEA NOT NULL,
    n                 BYTEA NOT NULL,
    used_min_bytes    BYTEA NOT NULL,
    used_max_bytes    BYTEA NOT NULL,
    used_mean_bytes   BYTEA NOT NULL,
    reserved_bytes    BYTEA NOT NULL,
    gpu_util_mean     BYTEA NOT NULL,
    temperature_max_c BYTEA NOT NULL,
    power_mean_mw     BYTEA NOT NULL,
    PRIMARY KEY (gpu_uuid, day_ms)
);
CREATE INDEX gpu_samples_1m_packed_by_day ON gpu_samples_1m_packed (day_ms);

CREATE TABLE process_samples_1m_packed (
    host            TEXT NOT NULL,
    gpu_uuid        TEXT NOT NULL,
    pid             BIGINT NOT NULL,
    start_time_ms   BIGINT,
    day_ms          BIGINT NOT NULL,
    name            TEXT,
    minutes         BYTEA NOT NULL,
    n               BYTEA NOT NULL,
    used_min_bytes  BYTEA NOT NULL,
    used_max_bytes  BYTEA NOT NULL,
    used_mean_bytes BYTEA NOT NULL
);
CREATE UNIQUE INDEX process_samples_1m_packed_key
    ON process_samples_1m_packed (host, gpu_uuid, pid, start_time_ms, day_ms) NULLS NOT DISTINCT;
CREATE INDEX process_samples_1m_packed_by_gpu ON process_samples_1m_packed (gpu_uuid, day_ms);
CREATE INDEX process_samples_1m_packed_by_day ON process_samples_1m_packed (day_ms);

CREATE TABLE allocator_samples_1m_packed (
    host                     TEXT NOT NULL,
    pid                      BIGINT NOT NULL,
    start_time_ms            BIGINT,
    device                   BIGINT NOT NULL,
    gpu_uuid                 TEXT,
    day_ms                   BIGINT NOT NULL,
    minutes                  BYTEA NOT NULL,
    n                        BYTEA NOT NULL,
    last_step                BYTEA NOT NULL,
    allocated_min_bytes      BYTEA NOT NULL,
    allocated_max_bytes      BYTEA NOT NULL,
    allocated_mean_bytes     BYTEA NOT NULL,
    reserved_max_bytes       BYTEA NOT NULL,
    reserved_mean_bytes      BYTEA NOT NULL,
    inactive_split_max_bytes BYTEA NOT NULL,
    alloc_retries            BYTEA NOT NULL,
    ooms                     BYTEA NOT NULL
);
CREATE UNIQUE INDEX allocator_samples_1m_packed_key ON allocator_samples_1m_packed
    (host, pid, start_time_ms, device, gpu_uuid, day_ms) NULLS NOT DISTINCT;
CREATE INDEX allocator_samples_1m_packed_by_gpu ON allocator_samples_1m_packed (gpu_uuid, day_ms);
CREATE INDEX allocator_samples_1m_packed_by_day ON allocator_samples_1m_packed (day_ms);

-- The open day's one-minute rows (up to 11.5M a table at 8,000 GPUs, written minute after minute,
-- so one series' rows of a day lie on as many pages as it has minutes): the pages' reads answer
-- from their index alone (index-only scans), a few leaf pages per series, instead of visiting a
-- page per minute.
ALTER TABLE gpu_samples_1m DROP CONSTRAINT gpu_samples_1m_pkey;
CREATE UNIQUE INDEX gpu_samples_1m_key ON gpu_samples_1m (gpu_uuid, minute_ms) INCLUDE (used_max_bytes);
DROP INDEX process_samples_1m_by_gpu;
CREATE INDEX process_samples_1m_by_gpu ON process_samples_1m (gpu_uuid, minute_ms)
    INCLUDE (host, pid, start_time_ms, name, used_max_bytes);
DROP INDEX allocator_samples_1m_by_gpu;
CREATE INDEX allocator_samples_1m_by_gpu ON allocator_samples_1m (gpu_uuid, minute_ms)
    INCLUDE (pid, start_time_ms, reserved_max_bytes, allocated_max_bytes);
DROP INDEX allocator_samples_1m_key;
CREATE UNIQUE INDEX allocator_samples_1m_key
    ON allocator_samples_1m (host, pid, start_time_ms, device, minute_ms)
    INCLUDE (gpu_uuid, allocated_max_bytes, reserved_max_bytes, inactive_split_max_bytes, alloc_retries)
    NULLS NOT DISTINCT;
