-- Each process's latest NVML reading on each GPU (SQLite 0012, which says why).
CREATE TABLE process_latest (
    gpu_uuid      TEXT NOT NULL,
    pid           BIGINT NOT NULL,
    start_key     BIGINT NOT NULL,
    start_time_ms BIGINT,
    host          TEXT NOT NULL,
    time_ms       BIGINT NOT NULL,
    name          TEXT,
    used_bytes    BIGINT NOT NULL,
    PRIMARY KEY (gpu_uuid, pid, start_key)
);
CREATE INDEX process_latest_by_time ON process_latest (time_ms);
INSERT INTO process_latest (gpu_uuid, pid, start_key, start_time_ms, host, time_ms, name, used_bytes)
    SELECT DISTINCT ON (gpu_uuid, pid, coalesce(start_time_ms, -1))
           gpu_uuid, pid, coalesce(start_time_ms, -1), start_time_ms, host, time_ms, name, used_bytes
    FROM process_samples ORDER BY gpu_uuid, pid, coalesce(start_time_ms, -1), time_ms DESC;
