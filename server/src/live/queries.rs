//! The live tables read back: latest readings (the fleet page, `/metrics`), GPU and process rows
//! over a window, events, counters. Rows come out as row types; `pages` shapes them into answers.
//! A window's rows come from three places: raw samples, one-minute rows and packed days
//! (`days`); a bucket may get a row from more than one, and the pages take the maximum.

use sqlx::FromRow;

use super::days::{DAY_MS, bucket_maxima};
use super::series::{Bucketed, FILL_MS, Window, align};
use super::store::Live;
use crate::db::Dialects;
use crate::with_live;

/// The latest NVML reading of one GPU.
#[derive(Debug, Clone, FromRow)]
pub struct GpuLatest {
    pub host: String,
    pub uuid: String,
    pub idx: i64,
    pub used_bytes: Option<i64>,
    pub total_bytes: Option<i64>,
    pub reserved_bytes: Option<i64>,
}

/// PyTorch allocator figures of one device, summed over its processes' latest samples.
#[derive(Debug, Clone, FromRow)]
pub struct DeviceAllocator {
    pub host: String,
    pub device: i64,
    pub allocated_bytes: i64,
    pub reserved_bytes: i64,
    pub alloc_retries: i64,
    pub ooms: i64,
}

impl Live {
    /// The latest reading of every GPU.
    pub async fn latest_gpu_readings(&self) -> sqlx::Result<Vec<GpuLatest>> {
        let mut c = self.db.live_read().await?;
        with_live!(c, |conn| sqlx::query_as(LATEST_GPU_READINGS)
            .fetch_all(&mut *conn)
            .await)
    }

    /// PyTorch allocator figures summed per host and device over each process's latest sample
    /// (no per-process labels).
    pub async fn latest_allocator_by_device(&self) -> sqlx::Result<Vec<DeviceAllocator>> {
        let mut c = self.db.live_read().await?;
        with_live!(c, |conn| sqlx::query_as(LATEST_ALLOCATOR_BY_DEVICE)
            .fetch_all(&mut *conn)
            .await)
    }

    /// The running totals `/metrics` reports.
    pub async fn counters(&self) -> sqlx::Result<Counters> {
        let mut c = self.db.live_read().await?;
        let (batches, rows, dropped, future): (i64, i64, i64, i64) =
            with_live!(c, |conn| sqlx::query_as(INGEST_TOTALS)
                .fetch_one(&mut *conn)
                .await)?;
        let snapshots: i64 = with_live!(c, |conn| sqlx::query_scalar(
            "SELECT count(*) FROM snapshots"
        )
        .fetch_one(&mut *conn)
        .await)?;
        let events = with_live!(c, |conn| sqlx::query_as(
            "SELECT kind, count(*) FROM events GROUP BY kind ORDER BY kind"
        )
        .fetch_all(&mut *conn)
        .await)?;
        Ok(Counters {
            batches,
            rows,
            dropped,
            future,
            snapshots,
            events,
        })
    }
}

/// Running totals of the live store and the library.
#[derive(Debug, Clone, PartialEq)]
pub struct Counters {
    /// Collector batches stored.
    pub batches: i64,
    /// Samples stored.
    pub rows: i64,
    /// Samples collectors dropped (spool full) and reported.
    pub dropped: i64,
    /// Samples and events refused for being stamped ahead of this server's clock.
    pub future: i64,
    /// Snapshots in the library.
    pub snapshots: i64,
    /// Events stored, by kind.
    pub events: Vec<(String, i64)>,
}

#[derive(Debug, Clone, FromRow)]
/// A GPU and its latest reading.
pub struct GpuRow {
    pub host: String,
    pub uuid: String,
    pub idx: i64,
    pub name: Option<String>,
    pub total_bytes: Option<i64>,
    pub last_seen_ms: i64,
    pub used_bytes: Option<i64>,
    pub reserved_bytes: Option<i64>,
    pub gpu_util: Option<i64>,
    pub temperature_c: Option<i64>,
    pub power_mw: Option<i64>,
}

#[derive(Debug, Clone, FromRow)]
pub struct GpuProcess {
    pub gpu_uuid: String,
    pub pid: i64,
    pub start_time_ms: Option<i64>,
    pub name: Option<String>,
    pub used_bytes: i64,
}

/// The latest allocator sample of one process and device.
#[derive(Debug, Clone, FromRow)]
pub struct AgentLatest {
    pub host: String,
    pub pid: i64,
    pub start_time_ms: Option<i64>,
    pub device: i64,
    pub gpu_uuid: Option<String>,
    pub time_ms: i64,
    pub step: Option<i64>,
    pub allocated_bytes: i64,
    pub reserved_bytes: i64,
    pub alloc_retries: Option<i64>,
    pub ooms: Option<i64>,
}

#[derive(Debug, Clone, FromRow)]
pub struct ProcessRow {
    pub host: String,
    pub pid: i64,
    pub start_time_ms: Option<i64>,
    pub name: Option<String>,
    pub cgroup: Option<String>,
    pub has_agent: bool,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
}

#[derive(Debug, Clone, FromRow)]
pub struct HostRow {
    pub host: String,
    pub collector: String,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
}

#[derive(Debug, Clone, FromRow)]
pub struct EventRow {
    pub host: String,
    pub time_ms: i64,
    pub kind: String,
    pub pid: Option<i64>,
    pub device: Option<i64>,
    pub message: String,
    pub snapshot_id: Option<String>,
}

#[derive(Debug, Clone, FromRow)]
pub struct StepRow {
    pub step: i64,
    pub time_ms: i64,
    pub allocated_min_bytes: i64,
    pub allocated_max_bytes: i64,
    pub reserved_max_bytes: i64,
}
// What /metrics and the fleet read: the latest-value tables and running totals written with every
// batch (migration 0007), so none of them searches the sample tables (a test checks the plans).
const LATEST_GPU_READINGS: &str = "SELECT g.host, g.uuid, g.idx, l.used_bytes, g.total_bytes, l.reserved_bytes \
     FROM gpus g JOIN gpu_latest l ON l.gpu_uuid = g.uuid ORDER BY g.host, g.idx";
const LATEST_ALLOCATOR_BY_DEVICE: &str = "SELECT host, device, CAST(sum(allocated_bytes) AS BIGINT) AS allocated_bytes, \
     CAST(sum(reserved_bytes) AS BIGINT) AS reserved_bytes, \
     CAST(coalesce(sum(alloc_retries), 0) AS BIGINT) AS alloc_retries, \
     CAST(coalesce(sum(ooms), 0) AS BIGINT) AS ooms FROM allocator_latest GROUP BY host, device ORDER BY host, device";
const INGEST_TOTALS: &str =
    "SELECT batches, rows, dropped, future_samples FROM ingest_totals WHERE id = 1";
const GPUS_WITH_LATEST: &str = "SELECT g.host, g.uuid, g.idx, g.name, g.total_bytes, g.last_seen_ms, l.used_bytes, \
     l.reserved_bytes, l.gpu_util, l.temperature_c, l.power_mw FROM gpus g \
     LEFT JOIN gpu_latest l ON l.gpu_uuid = g.uuid \
     WHERE $1 IS NULL OR g.uuid = $1 ORDER BY g.host, g.idx";
// The processes whose latest reading is their GPU's latest. CROSS JOIN keeps gpus the outer
// loop (SQLite's rule), so the latest rows are searched by key; PostgreSQL takes no ON after
// CROSS JOIN and plans the join by itself.
macro_rules! current_gpu_processes {
    ($join:literal) => {
        concat!(
            "SELECT p.gpu_uuid, p.pid, p.start_time_ms, p.name, p.used_bytes FROM gpus g ",
            $join,
            " process_latest p ON p.gpu_uuid = g.uuid AND p.time_ms = g.last_seen_ms \
             ORDER BY p.used_bytes DESC"
        )
    };
}
const CURRENT_GPU_PROCESSES: Dialects = Dialects {
    sqlite: current_gpu_processes!("CROSS JOIN"),
    postgres: current_gpu_processes!("JOIN"),
};
const AGENTS_SINCE: &str = "SELECT host, pid, start_time_ms, device, gpu_uuid, time_ms, step, allocated_bytes, \
     reserved_bytes, alloc_retries, ooms FROM allocator_latest WHERE time_ms >= $1 ORDER BY host, pid, device";

/// The queries that must not grow with stored history.
#[cfg(test)]
pub(crate) const HISTORY_INDEPENDENT: [&str; 6] = [
    LATEST_GPU_READINGS,
    LATEST_ALLOCATOR_BY_DEVICE,
    INGEST_TOTALS,
    GPUS_WITH_LATEST,
    CURRENT_GPU_PROCESSES.sqlite,
    AGENTS_SINCE,
];

impl Live {
    pub async fn fleet_gpus(&self) -> sqlx::Result<Vec<GpuRow>> {
        self.gpus_with_latest(None).await
    }

    /// Every GPU (or the one with `uuid`) with its latest reading.
    async fn gpus_with_latest(&self, uuid: Option<&str>) -> sqlx::Result<Vec<GpuRow>> {
        let mut c = self.db.live_read().await?;
        with_live!(c, |conn| sqlx::query_as(GPUS_WITH_LATEST)
            .bind(uuid)
            .fetch_all(&mut *conn)
            .await)
    }

    /// The processes in each GPU's latest reading.
    pub async fn current_gpu_processes(&self) -> sqlx::Result<Vec<GpuProcess>> {
        let mut c = self.db.live_read().await?;
        with_live!(c, |conn| sqlx::query_as(
            self.db.sql(&CURRENT_GPU_PROCESSES)
        )
        .fetch_all(&mut *conn)
        .await)
    }

    /// Each agent process's latest sample per device, for processes seen since `since_ms`.
    pub async fn agents_since(&self, since_ms: i64) -> sqlx::Result<Vec<AgentLatest>> {
        let mut c = self.db.live_read().await?;
        with_live!(c, |conn| sqlx::query_as(AGENTS_SINCE)
            .bind(since_ms)
            .fetch_all(&mut *conn)
            .await)
    }

    /// Processes heard of (NVML or an agent) since `since_ms`, most recent first.
    pub async fn processes_since(&self, since_ms: i64) -> sqlx::Result<Vec<ProcessRow>> {
        let mut c = self.db.live_read().await?;
        with_live!(c, |conn| {
            sqlx::query_as(
            "SELECT host, pid, start_time_ms, name, cgroup, has_agent, first_seen_ms, last_seen_ms FROM processes \
             WHERE last_seen_ms >= $1 ORDER BY last_seen_ms DESC LIMIT 1000",
        )
        .bind(since_ms)
        .fetch_all(&mut *conn)
        .await
        })
    }

    /// Every host with its collector and when it last reported.
    pub async fn hosts(&self) -> sqlx::Result<Vec<HostRow>> {
        let mut c = self.db.live_read().await?;
        with_live!(c, |conn| sqlx::query_as(
            "SELECT host, collector, first_seen_ms, last_seen_ms FROM hosts ORDER BY host",
        )
        .fetch_all(&mut *conn)
        .await)
    }

    pub async fn events_since(&self, since_ms: i64, limit: i64) -> sqlx::Result<Vec<EventRow>> {
        let mut c = self.db.live_read().await?;
        with_live!(c, |conn| {
            sqlx::query_as(
            "SELECT host, time_ms, kind, pid, device, message, snapshot_id FROM events WHERE time_ms >= $1 \
             ORDER BY time_ms DESC LIMIT $2",
        )
        .bind(since_ms)
        .bind(limit)
        .fetch_all(&mut *conn)
        .await
        })
    }

    pub async fn gpu(&self, uuid: &str) -> sqlx::Result<Option<GpuRow>> {
        Ok(self.gpus_with_latest(Some(uuid)).await?.pop())
    }

    /// Rows of one GPU's series over a window. Rows (raw and one-minute alike): `sql` takes $1 =
    /// window start, $2 = bucket width, $3 = the GPU's UUID, $4 = window end. Packed days: $1 =
    /// the UUID, $2 = a day before the window's start (a day's row starts up to a day before
    /// the window does), $3 = the window's end.
    async fn gpu_window_rows<T>(
        &self,
        sql: &'static str,
        uuid: &str,
        w: &Window,
        from: Stored,
    ) -> sqlx::Result<Vec<T>>
    where
        T: crate::db::FromEitherRow,
    {
        let mut c = self.db.live_read().await?;
        with_live!(c, |conn| {
            let q = sqlx::query_as(sql);
            let q = match from {
                Stored::Rows => q.bind(w.from_ms).bind(w.bucket_ms).bind(uuid).bind(w.to_ms),
                Stored::PackedDays => q.bind(uuid).bind(w.from_ms - DAY_MS).bind(w.to_ms),
            };
            q.fetch_all(&mut *conn).await
        })
    }

    /// NVML used memory of a GPU, bucketed (raw samples and roll-ups).
    pub async fn gpu_used_series(&self, uuid: &str, w: &Window) -> sqlx::Result<Vec<Option<i64>>> {
        let mut rows: Vec<(i64, i64)> = self
            .gpu_window_rows(
                "SELECT (t - $1) / $2 AS b, max(v) FROM ( \
                   SELECT time_ms AS t, used_bytes AS v FROM gpu_samples WHERE gpu_uuid = $3 AND time_ms BETWEEN $1 AND $4 \
                   UNION ALL SELECT minute_ms, used_max_bytes FROM gpu_samples_1m WHERE gpu_uuid = $3 AND minute_ms BETWEEN $1 AND $4) AS w \
                 WHERE v IS NOT NULL GROUP BY b",
                uuid,
                w,
                Stored::Rows,
            )
            .await?;
        let packed: Vec<(i64, Vec<u8>, Vec<u8>)> = self
            .gpu_window_rows(
                "SELECT day_ms, minutes, used_max_bytes FROM gpu_samples_1m_packed \
                 WHERE gpu_uuid = $1 AND day_ms > $2 AND day_ms <= $3",
                uuid,
                w,
                Stored::PackedDays,
            )
            .await?;
        for (day_ms, minutes, used) in packed {
            for (b, v) in bucket_maxima(w, day_ms, &minutes, &[&used])? {
                rows.extend(v[0].map(|v| (b, v)));
            }
        }
        Ok(align(w, &rows, FILL_MS))
    }

    /// Per-process NVML used memory on a GPU: (pid, start, name, bucket, used).
    pub async fn gpu_process_rows(&self, uuid: &str, w: &Window) -> sqlx::Result<Vec<Bucketed>> {
        let mut rows: Vec<Bucketed> = self.gpu_window_rows(
            "SELECT pid, (t - $1) / $2 AS b, max(v), max(st), max(name) FROM ( \
               SELECT pid, start_time_ms AS st, name, time_ms AS t, used_bytes AS v FROM process_samples \
               WHERE gpu_uuid = $3 AND time_ms BETWEEN $1 AND $4 \
               UNION ALL SELECT pid, start_time_ms, name, minute_ms, used_max_bytes FROM process_samples_1m \
               WHERE gpu_uuid = $3 AND minute_ms BETWEEN $1 AND $4) AS w GROUP BY pid, b",
            uuid,
            w,
            Stored::Rows,
        )
        .await?;
        type Day = (i64, Option<i64>, Option<String>, i64, Vec<u8>, Vec<u8>);
        let packed: Vec<Day> = self
            .gpu_window_rows(
                "SELECT pid, start_time_ms, name, day_ms, minutes, used_max_bytes FROM process_samples_1m_packed \
                 WHERE gpu_uuid = $1 AND day_ms > $2 AND day_ms <= $3",
                uuid,
                w,
                Stored::PackedDays,
            )
            .await?;
        for (pid, st, name, day_ms, minutes, used) in packed {
            for (b, v) in bucket_maxima(w, day_ms, &minutes, &[&used])? {
                rows.push((pid, b, v[0], st, name.clone()));
            }
        }
        Ok(rows)
    }

    /// Per-process PyTorch reserved and allocated on a GPU: (pid, bucket, reserved, allocated).
    pub async fn gpu_allocator_rows(
        &self,
        uuid: &str,
        w: &Window,
    ) -> sqlx::Result<Vec<(i64, i64, i64, i64, Option<i64>)>> {
        let mut rows: Vec<(i64, i64, i64, i64, Option<i64>)> = self.gpu_window_rows(
            "SELECT pid, (t - $1) / $2 AS b, max(r), max(a), max(st) FROM ( \
               SELECT pid, start_time_ms AS st, time_ms AS t, reserved_bytes AS r, allocated_bytes AS a FROM allocator_samples \
               WHERE gpu_uuid = $3 AND time_ms BETWEEN $1 AND $4 \
               UNION ALL SELECT pid, start_time_ms, minute_ms, reserved_max_bytes, allocated_max_bytes FROM allocator_samples_1m \
               WHERE gpu_uuid = $3 AND minute_ms BETWEEN $1 AND $4) AS w GROUP BY pid, b",
            uuid,
            w,
            Stored::Rows,
        )
        .await?;
        type Day = (i64, Option<i64>, i64, Vec<u8>, Vec<u8>, Vec<u8>);
        let packed: Vec<Day> = self
            .gpu_window_rows(
                "SELECT pid, start_time_ms, day_ms, minutes, reserved_max_bytes, allocated_max_bytes \
                 FROM allocator_samples_1m_packed WHERE gpu_uuid = $1 AND day_ms > $2 AND day_ms <= $3",
                uuid,
                w,
                Stored::PackedDays,
            )
            .await?;
        for (pid, st, day_ms, minutes, reserved, allocated) in packed {
            for (b, v) in bucket_maxima(w, day_ms, &minutes, &[&reserved, &allocated])? {
                if let [Some(r), Some(a)] = v[..] {
                    rows.push((pid, b, r, a, st));
                }
            }
        }
        Ok(rows)
    }

    /// Events of a host within a window, oldest first.
    pub async fn host_events_between(
        &self,
        host: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> sqlx::Result<Vec<EventRow>> {
        let mut c = self.db.live_read().await?;
        with_live!(c, |conn| sqlx::query_as(
            "SELECT host, time_ms, kind, pid, device, message, snapshot_id FROM events \
             WHERE host = $1 AND time_ms BETWEEN $2 AND $3 ORDER BY time_ms",
        )
        .bind(host)
        .bind(from_ms)
        .bind(to_ms)
        .fetch_all(&mut *conn)
        .await)
    }

    /// The start time of the latest process `pid` on `host` that an agent reported from.
    pub async fn latest_process_start(&self, host: &str, pid: i64) -> sqlx::Result<Option<i64>> {
        let mut c = self.db.live_read().await?;
        Ok(with_live!(c, |conn| sqlx::query_scalar(
            "SELECT start_time_ms FROM allocator_samples WHERE host = $1 AND pid = $2 ORDER BY time_ms DESC LIMIT 1",
        )
        .bind(host)
        .bind(pid)
        .fetch_optional(&mut *conn)
        .await)?
        .flatten())
    }

    /// A process's allocator figures per device and bucket (raw samples and roll-ups).
    pub async fn process_allocator_rows(
        &self,
        host: &str,
        pid: i64,
        start: Option<i64>,
        w: &Window,
    ) -> sqlx::Result<Vec<AllocatorBucket>> {
        let mut c = self.db.live_read().await?;
        let mut rows: Vec<AllocatorBucket> = with_live!(c, |conn| {
            sqlx::query_as(
            "SELECT device, max(gpu_uuid), (t - $1) / $2 AS b, max(a), max(r), max(ac), max(isp), max(rq), max(rt) FROM ( \
               SELECT device, gpu_uuid, time_ms AS t, allocated_bytes AS a, reserved_bytes AS r, active_bytes AS ac, \
               inactive_split_bytes AS isp, requested_bytes AS rq, alloc_retries AS rt FROM allocator_samples \
               WHERE host = $3 AND pid = $4 AND start_time_ms IS NOT DISTINCT FROM $5 AND time_ms BETWEEN $1 AND $6 \
               UNION ALL SELECT device, gpu_uuid, minute_ms, allocated_max_bytes, reserved_max_bytes, NULL, \
               inactive_split_max_bytes, NULL, alloc_retries FROM allocator_samples_1m \
               WHERE host = $3 AND pid = $4 AND start_time_ms IS NOT DISTINCT FROM $5 AND minute_ms BETWEEN $1 AND $6) AS w \
             GROUP BY device, b ORDER BY device, b",
        )
        .bind(w.from_ms)
        .bind(w.bucket_ms)
        .bind(host)
        .bind(pid)
        .bind(start)
        .bind(w.to_ms)
        .fetch_all(&mut *conn)
        .await
        })?;
        type Day = (
            i64,
            Option<String>,
            i64,
            Vec<u8>,
            Vec<u8>,
            Vec<u8>,
            Vec<u8>,
            Vec<u8>,
        );
        let packed: Vec<Day> = with_live!(c, |conn| {
            sqlx::query_as(
            "SELECT device, gpu_uuid, day_ms, minutes, allocated_max_bytes, reserved_max_bytes, \
             inactive_split_max_bytes, alloc_retries FROM allocator_samples_1m_packed \
             WHERE host = $1 AND pid = $2 AND start_time_ms IS NOT DISTINCT FROM $3 AND day_ms > $4 AND day_ms <= $5",
        )
        .bind(host)
        .bind(pid)
        .bind(start)
        .bind(w.from_ms - DAY_MS)
        .bind(w.to_ms)
        .fetch_all(&mut *conn)
        .await
        })?;
        for (device, uuid, day_ms, minutes, a, r, isp, rt) in packed {
            for (b, v) in bucket_maxima(w, day_ms, &minutes, &[&a, &r, &isp, &rt])? {
                if let [Some(a), Some(r), isp, rt] = v[..] {
                    rows.push((device, uuid.clone(), b, a, r, None, isp, None, rt));
                }
            }
        }
        rows.sort_by_key(|r| (r.0, r.2));
        Ok(rows)
    }

    /// The name NVML last gave the process.
    pub async fn process_name(&self, host: &str, pid: i64) -> sqlx::Result<Option<String>> {
        let mut c = self.db.live_read().await?;
        Ok(with_live!(c, |conn| sqlx::query_scalar(
            "SELECT name FROM process_samples WHERE host = $1 AND pid = $2 AND name IS NOT NULL ORDER BY time_ms DESC LIMIT 1",
        )
        .bind(host)
        .bind(pid)
        .fetch_optional(&mut *conn)
        .await)?
        .flatten())
    }

    /// Whether any reading of this process was stored (NVML's, or its agent's): a process NVML
    /// sees but cannot name (another PID namespace) has no name, no allocator rows and no
    /// events, and its page must still answer.
    pub async fn process_seen(&self, host: &str, pid: i64) -> sqlx::Result<bool> {
        let mut c = self.db.live_read().await?;
        Ok(with_live!(c, |conn| sqlx::query_scalar::<_, i64>(
            "SELECT 1 FROM process_samples WHERE host = $1 AND pid = $2 LIMIT 1",
        )
        .bind(host)
        .bind(pid)
        .fetch_optional(&mut *conn)
        .await)?
        .is_some())
    }

    /// NVML's reading of one process on one GPU, per bucket: (bucket, used).
    pub async fn process_nvml_rows(
        &self,
        uuid: &str,
        host: &str,
        pid: i64,
        w: &Window,
    ) -> sqlx::Result<Vec<(i64, i64)>> {
        let mut c = self.db.live_read().await?;
        let mut rows: Vec<(i64, i64)> = with_live!(c, |conn| {
            sqlx::query_as(
            "SELECT (t - $1) / $2 AS b, max(v) FROM ( \
               SELECT time_ms AS t, used_bytes AS v FROM process_samples WHERE gpu_uuid = $3 AND host = $4 \
               AND pid = $5 AND time_ms BETWEEN $1 AND $6 \
               UNION ALL SELECT minute_ms, used_max_bytes FROM process_samples_1m WHERE gpu_uuid = $3 \
               AND host = $4 AND pid = $5 AND minute_ms BETWEEN $1 AND $6) AS w GROUP BY b",
        )
        .bind(w.from_ms)
        .bind(w.bucket_ms)
        .bind(uuid)
        .bind(host)
        .bind(pid)
        .bind(w.to_ms)
        .fetch_all(&mut *conn)
        .await
        })?;
        let packed: Vec<(i64, Vec<u8>, Vec<u8>)> = with_live!(c, |conn| sqlx::query_as(
            "SELECT day_ms, minutes, used_max_bytes FROM process_samples_1m_packed \
             WHERE gpu_uuid = $1 AND host = $2 AND pid = $3 AND day_ms > $4 AND day_ms <= $5",
        )
        .bind(uuid)
        .bind(host)
        .bind(pid)
        .bind(w.from_ms - DAY_MS)
        .bind(w.to_ms)
        .fetch_all(&mut *conn)
        .await)?;
        for (day_ms, minutes, used) in packed {
            for (b, v) in bucket_maxima(w, day_ms, &minutes, &[&used])? {
                rows.extend(v[0].map(|v| (b, v)));
            }
        }
        Ok(rows)
    }

    /// A process's per-step figures on one device, the latest 2000 steps, oldest first.
    pub async fn process_steps(
        &self,
        host: &str,
        pid: i64,
        start: Option<i64>,
        device: i64,
    ) -> sqlx::Result<Vec<StepRow>> {
        let mut c = self.db.live_read().await?;
        let mut steps: Vec<StepRow> = with_live!(c, |conn| {
            sqlx::query_as(
            "SELECT step, min(time_ms) AS time_ms, min(allocated_bytes) AS allocated_min_bytes, \
             max(allocated_bytes) AS allocated_max_bytes, max(reserved_bytes) AS reserved_max_bytes \
             FROM allocator_samples WHERE host = $1 AND pid = $2 AND start_time_ms IS NOT DISTINCT FROM $3 AND device = $4 \
             AND step IS NOT NULL GROUP BY step ORDER BY step DESC LIMIT 2000",
        )
        .bind(host)
        .bind(pid)
        .bind(start)
        .bind(device)
        .fetch_all(&mut *conn)
        .await
        })?;
        steps.reverse();
        Ok(steps)
    }

    /// A process's latest 200 events, newest first.
    pub async fn process_events(&self, host: &str, pid: i64) -> sqlx::Result<Vec<EventRow>> {
        let mut c = self.db.live_read().await?;
        with_live!(c, |conn| sqlx::query_as(
            "SELECT host, time_ms, kind, pid, device, message, snapshot_id FROM events \
             WHERE host = $1 AND pid = $2 ORDER BY time_ms DESC LIMIT 200",
        )
        .bind(host)
        .bind(pid)
        .fetch_all(&mut *conn)
        .await)
    }
}

/// Where a window's rows are read from (`Live::gpu_window_rows`).
#[derive(Debug, Clone, Copy)]
enum Stored {
    /// Raw samples and one-minute rows, bucketed in SQL.
    Rows,
    /// Packed days, bucketed by `days::bucket_maxima`.
    PackedDays,
}

/// A process's allocator figures on one device in one bucket: device, GPU, bucket, allocated,
/// reserved, active, inactive split, requested, allocation retries.
pub type AllocatorBucket = (
    i64,
    Option<String>,
    i64,
    i64,
    i64,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

impl GpuRow {
    pub fn into_api(self) -> api::GpuReading {
        api::GpuReading {
            host: self.host,
            uuid: self.uuid,
            idx: self.idx,
            name: self.name,
            total_bytes: self.total_bytes,
            last_seen_ms: self.last_seen_ms,
            used_bytes: self.used_bytes,
            reserved_bytes: self.reserved_bytes,
            gpu_util: self.gpu_util,
            temperature_c: self.temperature_c,
            power_mw: self.power_mw,
        }
    }
}

impl GpuProcess {
    pub fn into_api(self) -> api::GpuProcess {
        api::GpuProcess {
            gpu_uuid: self.gpu_uuid,
            pid: self.pid,
            start_time_ms: self.start_time_ms,
            name: self.name,
            used_bytes: self.used_bytes,
        }
    }
}

impl EventRow {
    pub fn into_api(self) -> api::LiveEvent {
        api::LiveEvent {
            host: self.host,
            time_ms: self.time_ms,
            kind: serde_json::from_value(serde_json::Value::String(self.kind))
                .expect("an event kind always reads (unknown kinds by name)"),
            pid: self.pid,
            device: self.device,
            message: self.message,
            snapshot_id: self.snapshot_id,
        }
    }
}

impl StepRow {
    pub fn into_api(self) -> api::StepFigures {
        api::StepFigures {
            step: self.step,
            time_ms: self.time_ms,
            allocated_min_bytes: self.allocated_min_bytes,
            allocated_max_bytes: self.allocated_max_bytes,
            reserved_max_bytes: self.reserved_max_bytes,
        }
    }
}

impl Live {
    /// The total memory of the GPU(s) a snapshot tagged `host=H` (and `pid=P`) ran on, from the
    /// collector's NVML readings: the GPUs NVML saw the process on, else every GPU of the host.
    /// Only an unambiguous answer counts: the candidates must all have one total.
    pub async fn nvml_device_total(
        &self,
        host: &str,
        pid: Option<i64>,
    ) -> sqlx::Result<Option<(u64, String)>> {
        let mut c = self.db.live_read().await?;
        let gpus: Vec<(String, Option<String>, i64)> = with_live!(c, |conn| {
            sqlx::query_as(
            "SELECT uuid, name, total_bytes FROM gpus WHERE host = $1 AND total_bytes IS NOT NULL",
        )
        .bind(host)
        .fetch_all(&mut *conn)
        .await
        })?;
        let used: Vec<String> = match pid {
            Some(pid) => with_live!(c, |conn| sqlx::query_scalar(
                "SELECT DISTINCT gpu_uuid FROM process_samples WHERE host = $1 AND pid = $2",
            )
            .bind(host)
            .bind(pid)
            .fetch_all(&mut *conn)
            .await)?,
            None => Vec::new(),
        };
        let candidates: Vec<_> = gpus
            .iter()
            .filter(|(uuid, _, _)| used.is_empty() || used.contains(uuid))
            .collect();
        let Some((_, name, total)) = candidates.first() else {
            return Ok(None);
        };
        if candidates.iter().any(|(_, _, t)| t != total) {
            return Ok(None);
        }
        let what = name.clone().unwrap_or_else(|| "GPU".into());
        Ok(Some((*total as u64, format!("{what} on {host}"))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What each query's plan does, one line per step ("SCAN …", "SEARCH …").
    async fn plan(db: &crate::db::Db, sql: &str) -> Vec<String> {
        db.query_plan(sql).await.unwrap().expect("opened on SQLite")
    }

    #[tokio::test]
    async fn metrics_and_fleet_queries_never_walk_the_sample_history() {
        // Finding 2 of issue 13: /metrics searched allocator_samples once per row (quadratic).
        // Each query here may scan only the small per-series tables, never a sample table or the
        // batch log, whose sizes grow with stored history.
        let dir = std::env::temp_dir().join(format!("memscope-plans-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::create_dir_all(&dir);
        let db = crate::db::Db::open(&dir, None).await.unwrap();
        for sql in HISTORY_INDEPENDENT {
            for step in plan(&db, sql).await {
                // "SCAN <table or alias> …": the sample tables, the batch log, or their aliases.
                let mut words = step.split_whitespace();
                let scans_history = words.next() == Some("SCAN")
                    && words.next().is_some_and(|t| {
                        [
                            "allocator_samples",
                            "gpu_samples",
                            "process_samples",
                            "ingested_batches",
                            "p",
                            "s",
                            "a",
                            "b",
                        ]
                        .contains(&t)
                    });
                assert!(!scans_history, "{step}\n  in {sql}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
