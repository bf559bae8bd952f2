-- Retention by the day (issue 16): drops the day partitions (made by memscope_day_partitions) of
-- every partitioned table whose whole day is older than before_ms, instead of deleting their
-- rows one by one. Returns how many rows went with them. The roll-up calls it under its advisory
-- lock, then deletes what remains older than the cut (the default partitions, a partial day).
-- PostgreSQL only: SQLite has no partitions and deletes (../sqlite/ has no counterpart).
CREATE FUNCTION memscope_drop_days_before(before_ms BIGINT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    day_ms CONSTANT BIGINT := 86400000;
    part RECORD;
    day_start BIGINT;
    n BIGINT;
    dropped BIGINT := 0;
BEGIN
    FOR part IN
        SELECT c.relname AS name
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        JOIN pg_class p ON p.oid = i.inhparent
        WHERE p.relname IN ('gpu_samples', 'process_samples', 'allocator_samples',
                            'gpu_samples_1m', 'process_samples_1m', 'allocator_samples_1m')
          AND c.relname ~ '_d[0-9]{8}$'
    LOOP
        day_start := (extract(epoch FROM (to_date(right(part.name, 8), 'YYYYMMDD')::timestamp
                              AT TIME ZONE 'UTC')) * 1000)::BIGINT;
        IF day_start + day_ms <= before_ms THEN
            EXECUTE format('SELECT count(*) FROM %I', part.name) INTO n;
            EXECUTE format('DROP TABLE %I', part.name);
            dropped := dropped + n;
        END IF;
    END LOOP;
    RETURN dropped;
END;
$$;
