-- Tokens bind identity (issue 13, finding 7): a collector token reports one host, the first it
-- sent; a GPU belongs to the host that first reported it. Before this, collector A could send
-- B's host name and GPUs, forge B's OOM alerts and take over B's GPU rows.
CREATE TABLE collector_hosts (
    token_name    TEXT PRIMARY KEY,   -- the NAME of --collector-token NAME=TOKEN
    host          TEXT NOT NULL,
    first_seen_ms INTEGER NOT NULL
);
-- Existing stores: each token keeps the host its collector reported last.
INSERT INTO collector_hosts (token_name, host, first_seen_ms)
    SELECT collector, host, max(last_seen_ms) FROM hosts WHERE collector IS NOT NULL
        AND instr(collector, '/') = 0 GROUP BY collector;
