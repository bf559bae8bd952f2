-- Live collection (issue 4): what collectors and in-process agents send. Raw samples are kept
-- for a configurable time (roll-ups come in a later migration).

-- Each (collector, seq) batch is stored once: a collector resends until acknowledged, so this is
-- what makes ingest idempotent.
CREATE TABLE ingested_batches (
    collector      TEXT NOT NULL,
    seq            INTEGER NOT NULL,
    received_at_ms INTEGER NOT NULL,
    rows           INTEGER NOT NULL,
    dropped        INTEGER NOT NULL,   -- samples the collector reported dropping (spool full)
    PRIMARY KEY (collector, seq)
);

-- GPUs by NVML UUID (index differs between NVML and CUDA; MIG devices have their own UUIDs).
CREATE TABLE gpus (
    uuid         TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    idx          INTEGER NOT NULL,
    name         TEXT,
    total_bytes  INTEGER,
    last_seen_ms INTEGER NOT NULL
);

-- One NVML reading of one GPU.
CREATE TABLE gpu_samples (
    gpu_uuid       TEXT NOT NULL,
    time_ms        INTEGER NOT NULL,
    used_bytes     INTEGER,
    free_bytes     INTEGER,
    reserved_bytes INTEGER,
    gpu_util       INTEGER,
    mem_util       INTEGER,
    temperature_c  INTEGER,
    power_mw       INTEGER
);
CREATE INDEX gpu_samples_by_gpu_time ON gpu_samples (gpu_uuid, time_ms);

-- GPU memory per process (host PID namespace); (host, pid, start_time_ms) identifies a process.
CREATE TABLE process_samples (
    host          TEXT NOT NULL,
    gpu_uuid      TEXT NOT NULL,
    pid           INTEGER NOT NULL,
    start_time_ms INTEGER,
    time_ms       INTEGER NOT NULL,
    name          TEXT,
    cgroup        TEXT,
    used_bytes    INTEGER NOT NULL
);
CREATE INDEX process_samples_by_process_time ON process_samples (host, pid, start_time_ms, time_ms);

-- torch.cuda.memory_stats() per process and device, from the in-process agent.
CREATE TABLE allocator_samples (
    host                 TEXT NOT NULL,
    pid                  INTEGER NOT NULL,
    start_time_ms        INTEGER,
    device               INTEGER NOT NULL,
    time_ms              INTEGER NOT NULL,
    step                 INTEGER,
    allocated_bytes      INTEGER NOT NULL,
    reserved_bytes       INTEGER NOT NULL,
    active_bytes         INTEGER,
    inactive_split_bytes INTEGER,
    requested_bytes      INTEGER,
    alloc_retries        INTEGER,
    ooms                 INTEGER
);
CREATE INDEX allocator_samples_by_process_time ON allocator_samples (host, pid, start_time_ms, device, time_ms);

-- Things that happened (OOMs, allocation retries, collector messages).
CREATE TABLE events (
    host        TEXT NOT NULL,
    time_ms     INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    pid         INTEGER,
    device      INTEGER,
    message     TEXT NOT NULL,
    snapshot_id TEXT
);
CREATE INDEX events_by_time ON events (time_ms);
