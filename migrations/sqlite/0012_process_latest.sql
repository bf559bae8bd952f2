-- Each process's latest NVML reading on each GPU, written with every batch (issue 16), as
-- gpu_latest is for GPUs: the fleet page finds the processes in each GPU's latest reading here
-- instead of probing the raw samples once per GPU (at 8,000 GPUs that probing was half of the
-- page's time). Pruned with the raw samples it stands for.
CREATE TABLE process_latest (
    gpu_uuid      TEXT NOT NULL,
    pid           INTEGER NOT NULL,
    start_key     INTEGER NOT NULL,   -- start_time_ms, or -1 when unknown (a key is never NULL)
    start_time_ms INTEGER,
    host          TEXT NOT NULL,
    time_ms       INTEGER NOT NULL,
    name          TEXT,
    used_bytes    INTEGER NOT NULL,
    PRIMARY KEY (gpu_uuid, pid, start_key)
) WITHOUT ROWID;
CREATE INDEX process_latest_by_time ON process_latest (time_ms);
INSERT INTO process_latest (gpu_uuid, pid, start_key, start_time_ms, host, time_ms, name, used_bytes)
    SELECT gpu_uuid, pid, ifnull(start_time_ms, -1), start_time_ms, host, max(time_ms), name, used_bytes
    FROM process_samples GROUP BY gpu_uuid, pid, start_time_ms;
