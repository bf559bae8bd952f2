-- Live collection, third step: the hosts and processes seen, one row each, so pages and queries
-- need not scan samples to know them. Kept up to date by every stored batch.

-- A host as its collector names it.
CREATE TABLE hosts (
    host          TEXT PRIMARY KEY,
    collector     TEXT NOT NULL,       -- the collector (token name) that last reported it
    first_seen_ms INTEGER NOT NULL,
    last_seen_ms  INTEGER NOT NULL
);

-- A process on a host: (host, pid, start_time_ms) names it (pids are reused).
CREATE TABLE processes (
    host          TEXT NOT NULL,
    pid           INTEGER NOT NULL,
    start_time_ms INTEGER,
    name          TEXT,
    cgroup        TEXT,                -- container / job, where the collector could see it
    has_agent     INTEGER NOT NULL DEFAULT 0,
    first_seen_ms INTEGER NOT NULL,
    last_seen_ms  INTEGER NOT NULL
);
CREATE UNIQUE INDEX processes_key ON processes (host, pid, coalesce(start_time_ms, -1));
CREATE INDEX processes_by_last_seen ON processes (last_seen_ms);

-- Backfill from what is stored already.
INSERT INTO hosts (host, collector, first_seen_ms, last_seen_ms)
    SELECT host, host, min(last_seen_ms), max(last_seen_ms) FROM gpus GROUP BY host;
INSERT INTO processes (host, pid, start_time_ms, name, cgroup, has_agent, first_seen_ms, last_seen_ms)
    SELECT host, pid, start_time_ms, max(name), max(cgroup), 0, min(time_ms), max(time_ms)
    FROM process_samples WHERE true GROUP BY host, pid, start_time_ms
    ON CONFLICT DO NOTHING;
INSERT INTO processes (host, pid, start_time_ms, name, cgroup, has_agent, first_seen_ms, last_seen_ms)
    SELECT host, pid, start_time_ms, NULL, NULL, 1, min(time_ms), max(time_ms)
    FROM allocator_samples WHERE true GROUP BY host, pid, start_time_ms
    ON CONFLICT (host, pid, coalesce(start_time_ms, -1)) DO UPDATE SET has_agent = 1;
