-- Closed days of one-minute roll-ups, packed (issue 16): once a UTC day is over (older than the
-- raw retention), the roll-up packs each series' minutes of that day into one row and deletes
-- the day's one-minute rows. Thirty days of a 1,000-host fleet as one-minute rows would be ~1
-- billion rows (~400 GB in PostgreSQL); packed, a series-day is one row of a few kilobytes.
--
-- A packed row holds the same values as the one-minute rows it replaces: `minutes` lists the
-- minutes present (offsets within the day), and every other BLOB column is that column of the
-- one-minute table, one value per listed minute (format: server/src/live/days.rs). Key and
-- attribute columns are the one-minute table's. A late sample for a packed day is rolled up to a
-- one-minute row as before and merged into the packed row at the next roll-up.
CREATE TABLE gpu_samples_1m_packed (
    gpu_uuid          TEXT NOT NULL,
    day_ms            INTEGER NOT NULL,   -- start of the UTC day
    minutes           BLOB NOT NULL,
    n                 BLOB NOT NULL,
    used_min_bytes    BLOB NOT NULL,
    used_max_bytes    BLOB NOT NULL,
    used_mean_bytes   BLOB NOT NULL,
    reserved_bytes    BLOB NOT NULL,
    gpu_util_mean     BLOB NOT NULL,
    temperature_max_c BLOB NOT NULL,
    power_mean_mw     BLOB NOT NULL,
    PRIMARY KEY (gpu_uuid, day_ms)
);
CREATE INDEX gpu_samples_1m_packed_by_day ON gpu_samples_1m_packed (day_ms);

CREATE TABLE process_samples_1m_packed (
    host            TEXT NOT NULL,
    gpu_uuid        TEXT NOT NULL,
    pid             INTEGER NOT NULL,
    start_time_ms   INTEGER,
    day_ms          INTEGER NOT NULL,
    name            TEXT,                 -- the day's largest name (one per process)
    minutes         BLOB NOT NULL,
    n               BLOB NOT NULL,
    used_min_bytes  BLOB NOT NULL,
    used_max_bytes  BLOB NOT NULL,
    used_mean_bytes BLOB NOT NULL
);
CREATE UNIQUE INDEX process_samples_1m_packed_key
    ON process_samples_1m_packed (host, gpu_uuid, pid, coalesce(start_time_ms, -1), day_ms);
CREATE INDEX process_samples_1m_packed_by_gpu ON process_samples_1m_packed (gpu_uuid, day_ms);
CREATE INDEX process_samples_1m_packed_by_day ON process_samples_1m_packed (day_ms);

-- Keyed by the GPU too: a one-minute row names its GPU per minute, and the GPU page finds rows
-- by it.
CREATE TABLE allocator_samples_1m_packed (
    host                     TEXT NOT NULL,
    pid                      INTEGER NOT NULL,
    start_time_ms            INTEGER,
    device                   INTEGER NOT NULL,
    gpu_uuid                 TEXT,
    day_ms                   INTEGER NOT NULL,
    minutes                  BLOB NOT NULL,
    n                        BLOB NOT NULL,
    last_step                BLOB NOT NULL,
    allocated_min_bytes      BLOB NOT NULL,
    allocated_max_bytes      BLOB NOT NULL,
    allocated_mean_bytes     BLOB NOT NULL,
    reserved_max_bytes       BLOB NOT NULL,
    reserved_mean_bytes      BLOB NOT NULL,
    inactive_split_max_bytes BLOB NOT NULL,
    alloc_retries            BLOB NOT NULL,
    ooms                     BLOB NOT NULL
);
CREATE UNIQUE INDEX allocator_samples_1m_packed_key ON allocator_samples_1m_packed
    (host, pid, coalesce(start_time_ms, -1), device, coalesce(gpu_uuid, ''), day_ms);
CREATE INDEX allocator_samples_1m_packed_by_gpu ON allocator_samples_1m_packed (gpu_uuid, day_ms);
CREATE INDEX allocator_samples_1m_packed_by_day ON allocator_samples_1m_packed (day_ms);

-- The roll-up looks for one-minute rows of closed days (older than a time) every minute.
CREATE INDEX gpu_samples_1m_by_minute ON gpu_samples_1m (minute_ms);
CREATE INDEX process_samples_1m_by_minute ON process_samples_1m (minute_ms);
CREATE INDEX allocator_samples_1m_by_minute ON allocator_samples_1m (minute_ms);
