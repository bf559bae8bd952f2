//! The live-collection tables (`migrations/0002_live.sql`, `0003_live_rollups.sql`): storing
//! collector batches idempotently, the queries behind the live pages and `/metrics`, and the
//! roll-up that turns raw samples older than the raw retention into one-minute rows.
//! With `library`, the only module that talks to the database.

use serde::Serialize;
use sqlx::FromRow;

use crate::library::Library;

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

/// Rows per multi-row INSERT (16 columns at most: well under SQLite's 32,766 variables).
const ROWS_PER_INSERT: usize = 1000;

impl Library {
    /// Stores one collector batch in one transaction, once per `(collector, seq)`.
    pub async fn ingest_batch(&self, b: &wire::Batch) -> sqlx::Result<wire::Ack> {
        let _turn = self.live_writer.lock().await;
        let mut tx = self.db.begin().await?;
        let now_ms = crate::now_ms();
        let rows = (b.gpus.len() + b.processes.len() + b.allocator.len() + b.events.len()) as i64;
        let fresh = sqlx::query(
            "INSERT INTO ingested_batches (collector, seq, received_at_ms, rows, dropped) VALUES (?, ?, ?, ?, ?) \
             ON CONFLICT DO NOTHING",
        )
        .bind(&b.collector)
        .bind(b.seq as i64)
        .bind(now_ms)
        .bind(rows)
        .bind(b.dropped_samples as i64)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !fresh {
            return Ok(wire::Ack {
                seq: b.seq,
                duplicate: true,
                stored: 0,
            });
        }
        // Each GPU once per batch (its latest reading), then the samples in multi-row inserts.
        let mut latest: Vec<&wire::GpuSample> = Vec::new();
        for g in &b.gpus {
            match latest.iter_mut().find(|x| x.uuid == g.uuid) {
                Some(x) if x.time_ms <= g.time_ms => *x = g,
                Some(_) => {}
                None => latest.push(g),
            }
        }
        for g in latest {
            sqlx::query(
                "INSERT INTO gpus (uuid, host, idx, name, total_bytes, last_seen_ms) VALUES (?, ?, ?, ?, ?, ?) \
                 ON CONFLICT (uuid) DO UPDATE SET host = excluded.host, idx = excluded.idx, \
                 name = coalesce(excluded.name, gpus.name), total_bytes = coalesce(excluded.total_bytes, gpus.total_bytes), \
                 last_seen_ms = max(gpus.last_seen_ms, excluded.last_seen_ms)",
            )
            .bind(&g.uuid)
            .bind(&b.host)
            .bind(g.index as i64)
            .bind(&g.name)
            .bind(g.memory_total_bytes.map(|v| v as i64))
            .bind(g.time_ms)
            .execute(&mut *tx)
            .await?;
        }
        let opt = |v: Option<u64>| v.map(|v| v as i64);
        for chunk in b.gpus.chunks(ROWS_PER_INSERT) {
            let mut q = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "INSERT INTO gpu_samples (gpu_uuid, time_ms, used_bytes, free_bytes, reserved_bytes, gpu_util, mem_util, \
                 temperature_c, power_mw) ",
            );
            q.push_values(chunk, |mut row, g| {
                row.push_bind(&g.uuid)
                    .push_bind(g.time_ms)
                    .push_bind(opt(g.memory_used_bytes))
                    .push_bind(opt(g.memory_free_bytes))
                    .push_bind(opt(g.memory_reserved_bytes))
                    .push_bind(g.gpu_util_percent.map(|v| v as i64))
                    .push_bind(g.mem_util_percent.map(|v| v as i64))
                    .push_bind(g.temperature_c)
                    .push_bind(g.power_mw.map(|v| v as i64));
            });
            q.build().execute(&mut *tx).await?;
        }
        for chunk in b.processes.chunks(ROWS_PER_INSERT) {
            let mut q = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "INSERT INTO process_samples (host, gpu_uuid, pid, start_time_ms, time_ms, name, cgroup, used_bytes) ",
            );
            q.push_values(chunk, |mut row, p| {
                row.push_bind(&b.host)
                    .push_bind(&p.gpu_uuid)
                    .push_bind(p.pid as i64)
                    .push_bind(p.start_time_ms)
                    .push_bind(p.time_ms)
                    .push_bind(&p.name)
                    .push_bind(&p.cgroup)
                    .push_bind(p.used_bytes as i64);
            });
            q.build().execute(&mut *tx).await?;
        }
        for chunk in b.allocator.chunks(ROWS_PER_INSERT) {
            let mut q = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "INSERT INTO allocator_samples (host, pid, start_time_ms, device, time_ms, step, allocated_bytes, \
                 reserved_bytes, active_bytes, inactive_split_bytes, requested_bytes, alloc_retries, ooms, gpu_uuid, \
                 segments, largest_free_block_bytes) ",
            );
            q.push_values(chunk, |mut row, a| {
                row.push_bind(&b.host)
                    .push_bind(a.pid as i64)
                    .push_bind(a.start_time_ms)
                    .push_bind(a.device)
                    .push_bind(a.time_ms)
                    .push_bind(opt(a.step))
                    .push_bind(a.allocated_bytes as i64)
                    .push_bind(a.reserved_bytes as i64)
                    .push_bind(opt(a.active_bytes))
                    .push_bind(opt(a.inactive_split_bytes))
                    .push_bind(opt(a.requested_bytes))
                    .push_bind(opt(a.alloc_retries))
                    .push_bind(opt(a.ooms))
                    .push_bind(&a.gpu_uuid)
                    .push_bind(opt(a.segments))
                    .push_bind(opt(a.largest_free_block_bytes));
            });
            // Relayed agent samples can arrive twice (see the migration); store them once.
            q.push(" ON CONFLICT DO NOTHING");
            q.build().execute(&mut *tx).await?;
        }
        for e in &b.events {
            sqlx::query(
                "INSERT INTO events (host, time_ms, kind, pid, device, message, snapshot_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(&b.host)
            .bind(e.time_ms)
            .bind(&e.kind)
            .bind(e.pid.map(|v| v as i64))
            .bind(e.device)
            .bind(&e.message)
            .bind(&e.snapshot_id)
            .execute(&mut *tx)
            .await?;
        }
        // The host and the processes this batch speaks of (one row each, kept current).
        sqlx::query(
            "INSERT INTO hosts (host, collector, first_seen_ms, last_seen_ms) VALUES (?1, ?2, ?3, ?3) \
             ON CONFLICT (host) DO UPDATE SET collector = excluded.collector, \
             last_seen_ms = max(last_seen_ms, excluded.last_seen_ms)",
        )
        .bind(&b.host)
        .bind(&b.collector)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        type Seen<'a> = (Option<&'a str>, Option<&'a str>, bool, i64, i64);
        let mut procs: std::collections::BTreeMap<(u32, Option<i64>), Seen> = Default::default();
        for p in &b.processes {
            let e = procs
                .entry((p.pid, p.start_time_ms))
                .or_insert((None, None, false, p.time_ms, p.time_ms));
            e.0 = p.name.as_deref().or(e.0);
            e.1 = p.cgroup.as_deref().or(e.1);
            (e.3, e.4) = (e.3.min(p.time_ms), e.4.max(p.time_ms));
        }
        for a in &b.allocator {
            let e = procs
                .entry((a.pid, a.start_time_ms))
                .or_insert((None, None, true, a.time_ms, a.time_ms));
            e.2 = true;
            (e.3, e.4) = (e.3.min(a.time_ms), e.4.max(a.time_ms));
        }
        for ((pid, start), (name, cgroup, agent, first, last)) in procs {
            sqlx::query(
                "INSERT INTO processes (host, pid, start_time_ms, name, cgroup, has_agent, first_seen_ms, last_seen_ms) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (host, pid, coalesce(start_time_ms, -1)) DO UPDATE SET \
                 name = coalesce(excluded.name, name), cgroup = coalesce(excluded.cgroup, cgroup), \
                 has_agent = max(has_agent, excluded.has_agent), \
                 first_seen_ms = min(first_seen_ms, excluded.first_seen_ms), \
                 last_seen_ms = max(last_seen_ms, excluded.last_seen_ms)",
            )
            .bind(&b.host)
            .bind(pid as i64)
            .bind(start)
            .bind(name)
            .bind(cgroup)
            .bind(agent)
            .bind(first)
            .bind(last)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(wire::Ack {
            seq: b.seq,
            duplicate: false,
            stored: rows as u64,
        })
    }

    /// Row counts of the live tables (for tests and the status page).
    pub async fn live_counts(&self) -> sqlx::Result<[i64; 5]> {
        let mut out = [0i64; 5];
        for (i, q) in [
            "SELECT count(*) FROM gpu_samples",
            "SELECT count(*) FROM process_samples",
            "SELECT count(*) FROM allocator_samples",
            "SELECT count(*) FROM events",
            "SELECT count(*) FROM ingested_batches",
        ]
        .into_iter()
        .enumerate()
        {
            out[i] = sqlx::query_scalar(sqlx::AssertSqlSafe(q))
                .fetch_one(&self.db)
                .await?;
        }
        Ok(out)
    }

    /// The latest reading of every GPU.
    pub async fn latest_gpu_readings(&self) -> sqlx::Result<Vec<GpuLatest>> {
        sqlx::query_as(
            "SELECT g.host, g.uuid, g.idx, s.used_bytes, g.total_bytes, s.reserved_bytes FROM gpus g \
             JOIN gpu_samples s ON s.gpu_uuid = g.uuid \
             AND s.time_ms = (SELECT max(time_ms) FROM gpu_samples WHERE gpu_uuid = g.uuid) \
             GROUP BY g.uuid ORDER BY g.host, g.idx",
        )
        .fetch_all(&self.db)
        .await
    }

    /// PyTorch allocator figures summed per host and device over each process's latest sample
    /// (no per-process labels).
    pub async fn latest_allocator_by_device(&self) -> sqlx::Result<Vec<DeviceAllocator>> {
        sqlx::query_as(
            "SELECT a.host, a.device, sum(a.allocated_bytes) AS allocated_bytes, sum(a.reserved_bytes) AS reserved_bytes, \
             coalesce(sum(a.alloc_retries), 0) AS alloc_retries, coalesce(sum(a.ooms), 0) AS ooms FROM allocator_samples a \
             WHERE a.time_ms = (SELECT max(time_ms) FROM allocator_samples b WHERE b.host = a.host AND b.pid = a.pid \
             AND b.device = a.device AND b.start_time_ms IS a.start_time_ms) \
             GROUP BY a.host, a.device ORDER BY a.host, a.device",
        )
        .fetch_all(&self.db)
        .await
    }

    /// (batches, samples stored, samples collectors dropped, snapshots, events by kind).
    pub async fn counters(&self) -> sqlx::Result<(i64, i64, i64, i64, Vec<(String, i64)>)> {
        let (batches, rows, dropped): (i64, i64, i64) =
            sqlx::query_as("SELECT count(*), coalesce(sum(rows), 0), coalesce(sum(dropped), 0) FROM ingested_batches")
                .fetch_one(&self.db)
                .await?;
        let snapshots: i64 = sqlx::query_scalar("SELECT count(*) FROM snapshots")
            .fetch_one(&self.db)
            .await?;
        let events =
            sqlx::query_as("SELECT kind, count(*) FROM events GROUP BY kind ORDER BY kind")
                .fetch_all(&self.db)
                .await?;
        Ok((batches, rows, dropped, snapshots, events))
    }
}

/// Columns of one bucketed series row: (key, bucket, value columns…).
type Bucketed = (i64, i64, Option<i64>, Option<i64>, Option<String>);

/// A time window cut into buckets; series are reduced to one value per bucket (the maximum, so
/// peaks stay visible) and aligned, so the page can stack them.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Window {
    pub from_ms: i64,
    pub to_ms: i64,
    pub bucket_ms: i64,
}

impl Window {
    pub fn new(from_ms: i64, to_ms: i64, points: i64) -> Window {
        let to_ms = to_ms.max(from_ms + 1);
        let points = points.clamp(10, 4000);
        Window {
            from_ms,
            to_ms,
            bucket_ms: ((to_ms - from_ms) + points - 1) / points,
        }
    }

    pub fn buckets(&self) -> usize {
        ((self.to_ms - self.from_ms) / self.bucket_ms + 1) as usize
    }

    pub fn times(&self) -> Vec<i64> {
        (0..self.buckets() as i64)
            .map(|b| self.from_ms + b * self.bucket_ms)
            .collect()
    }
}

/// A series aligned to a window's buckets; a missing bucket takes the previous value if it is at
/// most `fill_ms` old (samples come every interval, buckets may be finer).
pub fn align(w: &Window, points: &[(i64, i64)], fill_ms: i64) -> Vec<Option<i64>> {
    let mut out = vec![None; w.buckets()];
    for &(b, v) in points {
        if let Some(slot) = out.get_mut(b as usize) {
            *slot = Some(slot.map_or(v, |x: i64| x.max(v)));
        }
    }
    let fill = (fill_ms / w.bucket_ms).max(1) as usize;
    let mut last: Option<(usize, i64)> = None;
    for (i, slot) in out.iter_mut().enumerate() {
        match (*slot, last) {
            (Some(v), _) => last = Some((i, v)),
            (None, Some((j, v))) if i - j <= fill => *slot = Some(v),
            _ => {}
        }
    }
    out
}

/// Whether memory held between steps keeps rising: the "live leak signal". Takes the allocated
/// bytes at each step's low point (what survives from one step to the next), oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeakSignal {
    pub rising: bool,
    /// Least-squares slope of the step low points.
    pub bytes_per_step: f64,
    /// Steps with a sample looked at (the latest 200 at most).
    pub steps: usize,
    /// How far the floor rose: lowest point of the last quarter of the steps minus that of the
    /// first quarter.
    pub growth_bytes: i64,
    /// Share of step-to-step changes that were increases (flat steps not counted).
    pub rising_share: f64,
}

/// Steps needed before the signal says anything.
pub const LEAK_MIN_STEPS: usize = 8;

/// `step_lows`: (step number, allocated bytes at that step's low point), oldest first. Not every
/// step need be there (the agent samples at most once per interval): the slope is per step
/// number, not per point.
pub fn leak_signal(step_lows: &[(i64, i64)]) -> LeakSignal {
    let points = &step_lows[step_lows.len().saturating_sub(200)..];
    let lows: Vec<i64> = points.iter().map(|p| p.1).collect();
    let n = lows.len();
    let (mut ups, mut changes) = (0usize, 0usize);
    for w in lows.windows(2) {
        if w[1] != w[0] {
            changes += 1;
            ups += usize::from(w[1] > w[0]);
        }
    }
    let slope = if n >= 2 {
        let mean_x = points.iter().map(|p| p.0 as f64).sum::<f64>() / n as f64;
        let mean_y = lows.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for &(step, v) in points {
            let dx = step as f64 - mean_x;
            sxy += dx * (v as f64 - mean_y);
            sxx += dx * dx;
        }
        if sxx > 0.0 { sxy / sxx } else { 0.0 }
    } else {
        0.0
    };
    let share = if changes == 0 {
        0.0
    } else {
        ups as f64 / changes as f64
    };
    // The floor (lowest point) of each quarter of the steps: a leak lifts every floor above the
    // previous one; caching's sawtooth goes up and down around the same floor.
    let floors: Vec<i64> = (0..4)
        .filter_map(|q| lows[q * n / 4..(q + 1) * n / 4].iter().min().copied())
        .collect();
    let growth = match (floors.first(), floors.last()) {
        (Some(a), Some(b)) if floors.len() == 4 => b - a,
        _ => 0,
    };
    let mean = lows.iter().map(|&v| v as f64).sum::<f64>() / n.max(1) as f64;
    let rising = n >= LEAK_MIN_STEPS
        && slope > 0.0
        && floors.windows(2).all(|w| w[1] > w[0])
        && growth as f64 >= (1u64 << 20) as f64
        && growth as f64 >= 0.01 * mean;
    LeakSignal {
        rising,
        bytes_per_step: slope,
        steps: n,
        growth_bytes: growth,
        rising_share: share,
    }
}

#[derive(Debug, Clone, FromRow, Serialize)]
pub struct FleetGpu {
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

#[derive(Debug, Clone, FromRow, Serialize)]
pub struct GpuProcess {
    pub gpu_uuid: String,
    pub pid: i64,
    pub start_time_ms: Option<i64>,
    pub name: Option<String>,
    pub used_bytes: i64,
}

/// The latest allocator sample of one process and device.
#[derive(Debug, Clone, FromRow, Serialize)]
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

#[derive(Debug, Clone, FromRow, Serialize)]
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

#[derive(Debug, Clone, FromRow, Serialize)]
pub struct HostRow {
    pub host: String,
    pub collector: String,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
}

#[derive(Debug, Clone, FromRow, Serialize)]
pub struct EventRow {
    pub host: String,
    pub time_ms: i64,
    pub kind: String,
    pub pid: Option<i64>,
    pub device: Option<i64>,
    pub message: String,
    pub snapshot_id: Option<String>,
}

/// Allocator series of one process and device, aligned to a window.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceSeries {
    pub device: i64,
    pub gpu_uuid: Option<String>,
    pub allocated: Vec<Option<i64>>,
    pub reserved: Vec<Option<i64>>,
    pub active: Vec<Option<i64>>,
    pub inactive_split: Vec<Option<i64>>,
    pub requested: Vec<Option<i64>>,
    pub alloc_retries: Vec<Option<i64>>,
    pub nvml_used: Vec<Option<i64>>,
    pub outside_pytorch: Vec<Option<i64>>,
    pub steps: Vec<StepRow>,
    pub leak: LeakSignal,
}

#[derive(Debug, Clone, FromRow, Serialize)]
pub struct StepRow {
    pub step: i64,
    pub time_ms: i64,
    pub allocated_min_bytes: i64,
    pub allocated_max_bytes: i64,
    pub reserved_max_bytes: i64,
}

/// `nvml − reserved` where both are known: memory the process holds outside PyTorch's allocator
/// (CUDA context, NCCL, other libraries).
pub fn outside(nvml: &[Option<i64>], reserved: &[Option<i64>]) -> Vec<Option<i64>> {
    nvml.iter()
        .zip(reserved)
        .map(|(n, r)| Some((n.as_ref()? - r.as_ref()?).max(0)))
        .collect()
}

/// Gaps shorter than this are filled with the previous value when series are aligned: buckets
/// can be finer than the sampling interval (1 s by default), but a process that has gone must
/// not seem to linger.
const FILL_MS: i64 = 2_500;

impl Library {
    pub async fn fleet_gpus(&self) -> sqlx::Result<Vec<FleetGpu>> {
        self.gpus_with_latest(None).await
    }

    /// Every GPU (or the one with `uuid`) with its latest reading.
    async fn gpus_with_latest(&self, uuid: Option<&str>) -> sqlx::Result<Vec<FleetGpu>> {
        sqlx::query_as(
            "SELECT g.host, g.uuid, g.idx, g.name, g.total_bytes, g.last_seen_ms, s.used_bytes, s.reserved_bytes, \
             s.gpu_util, s.temperature_c, s.power_mw FROM gpus g \
             LEFT JOIN gpu_samples s ON s.gpu_uuid = g.uuid AND s.time_ms = g.last_seen_ms \
             WHERE ?1 IS NULL OR g.uuid = ?1 GROUP BY g.uuid ORDER BY g.host, g.idx",
        )
        .bind(uuid)
        .fetch_all(&self.db)
        .await
    }

    /// The processes in each GPU's latest reading.
    pub async fn current_gpu_processes(&self) -> sqlx::Result<Vec<GpuProcess>> {
        sqlx::query_as(
            "SELECT p.gpu_uuid, p.pid, p.start_time_ms, p.name, p.used_bytes FROM process_samples p \
             JOIN gpus g ON p.gpu_uuid = g.uuid AND p.time_ms = g.last_seen_ms ORDER BY p.used_bytes DESC",
        )
        .fetch_all(&self.db)
        .await
    }

    /// Each agent process's latest sample per device, for processes seen since `since_ms`.
    pub async fn agents_since(&self, since_ms: i64) -> sqlx::Result<Vec<AgentLatest>> {
        sqlx::query_as(
            "SELECT a.host, a.pid, a.start_time_ms, a.device, a.gpu_uuid, a.time_ms, a.step, a.allocated_bytes, \
             a.reserved_bytes, a.alloc_retries, a.ooms FROM allocator_samples a \
             JOIN (SELECT host, pid, start_time_ms, device, max(time_ms) AS t FROM allocator_samples \
                   WHERE time_ms >= ? GROUP BY host, pid, start_time_ms, device) l \
             ON a.host = l.host AND a.pid = l.pid AND a.start_time_ms IS l.start_time_ms AND a.device = l.device \
             AND a.time_ms = l.t ORDER BY a.host, a.pid, a.device",
        )
        .bind(since_ms)
        .fetch_all(&self.db)
        .await
    }

    /// Processes heard of (NVML or an agent) since `since_ms`, most recent first.
    pub async fn processes_since(&self, since_ms: i64) -> sqlx::Result<Vec<ProcessRow>> {
        sqlx::query_as(
            "SELECT host, pid, start_time_ms, name, cgroup, has_agent, first_seen_ms, last_seen_ms FROM processes \
             WHERE last_seen_ms >= ? ORDER BY last_seen_ms DESC LIMIT 1000",
        )
        .bind(since_ms)
        .fetch_all(&self.db)
        .await
    }

    /// Every host with its collector and when it last reported.
    pub async fn hosts(&self) -> sqlx::Result<Vec<HostRow>> {
        sqlx::query_as(
            "SELECT host, collector, first_seen_ms, last_seen_ms FROM hosts ORDER BY host",
        )
        .fetch_all(&self.db)
        .await
    }

    pub async fn events_since(&self, since_ms: i64, limit: i64) -> sqlx::Result<Vec<EventRow>> {
        sqlx::query_as(
            "SELECT host, time_ms, kind, pid, device, message, snapshot_id FROM events WHERE time_ms >= ? \
             ORDER BY time_ms DESC LIMIT ?",
        )
        .bind(since_ms)
        .bind(limit)
        .fetch_all(&self.db)
        .await
    }

    pub async fn gpu(&self, uuid: &str) -> sqlx::Result<Option<FleetGpu>> {
        Ok(self.gpus_with_latest(Some(uuid)).await?.pop())
    }

    /// Rows of one GPU's series over a window: `sql` takes ?1 = window start, ?2 = bucket width,
    /// ?3 = the GPU's UUID, ?4 = window end (raw rows and roll-ups alike).
    async fn gpu_window_rows<T>(
        &self,
        sql: &'static str,
        uuid: &str,
        w: &Window,
    ) -> sqlx::Result<Vec<T>>
    where
        T: for<'r> FromRow<'r, sqlx::sqlite::SqliteRow> + Send + Unpin,
    {
        sqlx::query_as(sql)
            .bind(w.from_ms)
            .bind(w.bucket_ms)
            .bind(uuid)
            .bind(w.to_ms)
            .fetch_all(&self.db)
            .await
    }

    /// NVML used memory of a GPU, bucketed (raw samples and roll-ups).
    pub async fn gpu_used_series(&self, uuid: &str, w: &Window) -> sqlx::Result<Vec<Option<i64>>> {
        let rows: Vec<(i64, i64)> = self
            .gpu_window_rows(
                "SELECT (t - ?1) / ?2 AS b, max(v) FROM ( \
                   SELECT time_ms AS t, used_bytes AS v FROM gpu_samples WHERE gpu_uuid = ?3 AND time_ms BETWEEN ?1 AND ?4 \
                   UNION ALL SELECT minute_ms, used_max_bytes FROM gpu_samples_1m WHERE gpu_uuid = ?3 AND minute_ms BETWEEN ?1 AND ?4) \
                 WHERE v IS NOT NULL GROUP BY b",
                uuid,
                w,
            )
            .await?;
        Ok(align(w, &rows, FILL_MS))
    }

    /// Per-process NVML used memory on a GPU: (pid, start, name, bucket, used).
    async fn gpu_process_rows(&self, uuid: &str, w: &Window) -> sqlx::Result<Vec<Bucketed>> {
        self.gpu_window_rows(
            "SELECT pid, (t - ?1) / ?2 AS b, max(v), max(st), max(name) FROM ( \
               SELECT pid, start_time_ms AS st, name, time_ms AS t, used_bytes AS v FROM process_samples \
               WHERE gpu_uuid = ?3 AND time_ms BETWEEN ?1 AND ?4 \
               UNION ALL SELECT pid, start_time_ms, name, minute_ms, used_max_bytes FROM process_samples_1m \
               WHERE gpu_uuid = ?3 AND minute_ms BETWEEN ?1 AND ?4) GROUP BY pid, b",
            uuid,
            w,
        )
        .await
    }

    /// Per-process PyTorch reserved and allocated on a GPU: (pid, bucket, reserved, allocated).
    async fn gpu_allocator_rows(
        &self,
        uuid: &str,
        w: &Window,
    ) -> sqlx::Result<Vec<(i64, i64, i64, i64, Option<i64>)>> {
        self.gpu_window_rows(
            "SELECT pid, (t - ?1) / ?2 AS b, max(r), max(a), max(st) FROM ( \
               SELECT pid, start_time_ms AS st, time_ms AS t, reserved_bytes AS r, allocated_bytes AS a FROM allocator_samples \
               WHERE gpu_uuid = ?3 AND time_ms BETWEEN ?1 AND ?4 \
               UNION ALL SELECT pid, start_time_ms, minute_ms, reserved_max_bytes, allocated_max_bytes FROM allocator_samples_1m \
               WHERE gpu_uuid = ?3 AND minute_ms BETWEEN ?1 AND ?4) GROUP BY pid, b",
            uuid,
            w,
        )
        .await
    }

    /// The GPU page: NVML used, and per process NVML used, PyTorch reserved and allocated, and
    /// the memory it holds outside PyTorch, all aligned to the window's buckets.
    pub async fn gpu_page(
        &self,
        uuid: &str,
        w: &Window,
    ) -> sqlx::Result<Option<serde_json::Value>> {
        let Some(gpu) = self.gpu(uuid).await? else {
            return Ok(None);
        };
        let used = self.gpu_used_series(uuid, w).await?;
        #[derive(Default)]
        struct P {
            start: Option<i64>,
            name: Option<String>,
            nvml: Vec<(i64, i64)>,
            reserved: Vec<(i64, i64)>,
            allocated: Vec<(i64, i64)>,
        }
        let mut procs: std::collections::BTreeMap<i64, P> = Default::default();
        for (pid, b, v, st, name) in self.gpu_process_rows(uuid, w).await? {
            let p = procs.entry(pid).or_default();
            if let Some(v) = v {
                p.nvml.push((b, v));
            }
            p.start = p.start.or(st);
            p.name = p.name.take().or(name);
        }
        for (pid, b, r, a, st) in self.gpu_allocator_rows(uuid, w).await? {
            let p = procs.entry(pid).or_default();
            p.reserved.push((b, r));
            p.allocated.push((b, a));
            p.start = p.start.or(st);
        }
        let processes: Vec<serde_json::Value> = procs
            .into_iter()
            .map(|(pid, p)| {
                let nvml = align(w, &p.nvml, FILL_MS);
                let reserved = align(w, &p.reserved, FILL_MS);
                serde_json::json!({
                    "pid": pid,
                    "start_time_ms": p.start,
                    "name": p.name,
                    "has_agent": !p.reserved.is_empty(),
                    "outside_pytorch": outside(&nvml, &reserved),
                    "nvml_used": nvml,
                    "reserved": reserved,
                    "allocated": align(w, &p.allocated, FILL_MS),
                })
            })
            .collect();
        let events: Vec<EventRow> = sqlx::query_as(
            "SELECT host, time_ms, kind, pid, device, message, snapshot_id FROM events \
             WHERE host = ? AND time_ms BETWEEN ? AND ? ORDER BY time_ms",
        )
        .bind(&gpu.host)
        .bind(w.from_ms)
        .bind(w.to_ms)
        .fetch_all(&self.db)
        .await?;
        Ok(Some(serde_json::json!({
            "gpu": gpu,
            "window": w,
            "times": w.times(),
            "used": used,
            "processes": processes,
            "events": events,
        })))
    }

    /// The process page: per device, allocator series, per-step figures and the leak signal,
    /// NVML's reading of the process on that GPU, and the process's events.
    pub async fn process_page(
        &self,
        host: &str,
        pid: i64,
        start: Option<i64>,
        w: &Window,
    ) -> sqlx::Result<Option<serde_json::Value>> {
        let start = match start {
            Some(s) => Some(s),
            None => sqlx::query_scalar(
                "SELECT start_time_ms FROM allocator_samples WHERE host = ? AND pid = ? ORDER BY time_ms DESC LIMIT 1",
            )
            .bind(host)
            .bind(pid)
            .fetch_optional(&self.db)
            .await?
            .flatten(),
        };
        type Row = (
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
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT device, max(gpu_uuid), (t - ?1) / ?2 AS b, max(a), max(r), max(ac), max(isp), max(rq), max(rt) FROM ( \
               SELECT device, gpu_uuid, time_ms AS t, allocated_bytes AS a, reserved_bytes AS r, active_bytes AS ac, \
               inactive_split_bytes AS isp, requested_bytes AS rq, alloc_retries AS rt FROM allocator_samples \
               WHERE host = ?3 AND pid = ?4 AND start_time_ms IS ?5 AND time_ms BETWEEN ?1 AND ?6 \
               UNION ALL SELECT device, gpu_uuid, minute_ms, allocated_max_bytes, reserved_max_bytes, NULL, \
               inactive_split_max_bytes, NULL, alloc_retries FROM allocator_samples_1m \
               WHERE host = ?3 AND pid = ?4 AND start_time_ms IS ?5 AND minute_ms BETWEEN ?1 AND ?6) \
             GROUP BY device, b ORDER BY device, b",
        )
        .bind(w.from_ms)
        .bind(w.bucket_ms)
        .bind(host)
        .bind(pid)
        .bind(start)
        .bind(w.to_ms)
        .fetch_all(&self.db)
        .await?;
        let name: Option<String> = sqlx::query_scalar(
            "SELECT name FROM process_samples WHERE host = ? AND pid = ? AND name IS NOT NULL ORDER BY time_ms DESC LIMIT 1",
        )
        .bind(host)
        .bind(pid)
        .fetch_optional(&self.db)
        .await?
        .flatten();
        // Per device: its GPU's UUID and one (bucket, value) series per allocator column.
        type UuidAndColumns = (Option<String>, Vec<Vec<(i64, i64)>>);
        let mut devices: std::collections::BTreeMap<i64, UuidAndColumns> = Default::default();
        for (device, uuid, b, a, r, ac, isp, rq, rt) in rows {
            let d = devices
                .entry(device)
                .or_insert_with(|| (None, vec![Vec::new(); 6]));
            d.0 = d.0.take().or(uuid);
            for (i, v) in [Some(a), Some(r), ac, isp, rq, rt].into_iter().enumerate() {
                if let Some(v) = v {
                    d.1[i].push((b, v));
                }
            }
        }
        let mut out = Vec::new();
        for (device, (uuid, cols)) in devices {
            let nvml = match &uuid {
                Some(u) => {
                    let pts: Vec<(i64, i64)> = sqlx::query_as(
                        "SELECT (t - ?1) / ?2 AS b, max(v) FROM ( \
                           SELECT time_ms AS t, used_bytes AS v FROM process_samples WHERE gpu_uuid = ?3 AND host = ?4 \
                           AND pid = ?5 AND time_ms BETWEEN ?1 AND ?6 \
                           UNION ALL SELECT minute_ms, used_max_bytes FROM process_samples_1m WHERE gpu_uuid = ?3 \
                           AND host = ?4 AND pid = ?5 AND minute_ms BETWEEN ?1 AND ?6) GROUP BY b",
                    )
                    .bind(w.from_ms)
                    .bind(w.bucket_ms)
                    .bind(u)
                    .bind(host)
                    .bind(pid)
                    .bind(w.to_ms)
                    .fetch_all(&self.db)
                    .await?;
                    align(w, &pts, FILL_MS)
                }
                None => vec![None; w.buckets()],
            };
            let steps: Vec<StepRow> = sqlx::query_as(
                "SELECT step, min(time_ms) AS time_ms, min(allocated_bytes) AS allocated_min_bytes, \
                 max(allocated_bytes) AS allocated_max_bytes, max(reserved_bytes) AS reserved_max_bytes \
                 FROM allocator_samples WHERE host = ? AND pid = ? AND start_time_ms IS ? AND device = ? \
                 AND step IS NOT NULL GROUP BY step ORDER BY step DESC LIMIT 2000",
            )
            .bind(host)
            .bind(pid)
            .bind(start)
            .bind(device)
            .fetch_all(&self.db)
            .await?
            .into_iter()
            .rev()
            .collect();
            let lows: Vec<(i64, i64)> = steps
                .iter()
                .map(|s| (s.step, s.allocated_min_bytes))
                .collect();
            let [
                allocated,
                reserved,
                active,
                inactive_split,
                requested,
                alloc_retries,
            ] = <[Vec<(i64, i64)>; 6]>::try_from(cols).expect("six columns");
            let reserved = align(w, &reserved, FILL_MS);
            out.push(DeviceSeries {
                device,
                gpu_uuid: uuid,
                allocated: align(w, &allocated, FILL_MS),
                outside_pytorch: outside(&nvml, &reserved),
                reserved,
                active: align(w, &active, FILL_MS),
                inactive_split: align(w, &inactive_split, FILL_MS),
                requested: align(w, &requested, FILL_MS),
                alloc_retries: align(w, &alloc_retries, FILL_MS),
                nvml_used: nvml,
                leak: leak_signal(&lows),
                steps,
            });
        }
        let events: Vec<EventRow> = sqlx::query_as(
            "SELECT host, time_ms, kind, pid, device, message, snapshot_id FROM events \
             WHERE host = ? AND pid = ? ORDER BY time_ms DESC LIMIT 200",
        )
        .bind(host)
        .bind(pid)
        .fetch_all(&self.db)
        .await?;
        if out.is_empty() && events.is_empty() && name.is_none() {
            return Ok(None);
        }
        Ok(Some(serde_json::json!({
            "host": host,
            "pid": pid,
            "start_time_ms": start,
            "name": name,
            "window": w,
            "times": w.times(),
            "devices": out,
            "events": events,
        })))
    }
}

/// Folds raw `gpu_samples` older than `?1` into one-minute rows (merging into a row already there).
const GPU_ROLL_UP: &str = "INSERT INTO gpu_samples_1m (gpu_uuid, minute_ms, n, used_min_bytes, used_max_bytes, used_mean_bytes, \
     reserved_bytes, gpu_util_mean, temperature_max_c, power_mean_mw) \
     SELECT gpu_uuid, time_ms / 60000 * 60000 AS m, count(*), min(used_bytes), max(used_bytes), \
     CAST(avg(used_bytes) AS INTEGER), max(reserved_bytes), CAST(avg(gpu_util) AS INTEGER), max(temperature_c), \
     CAST(avg(power_mw) AS INTEGER) FROM gpu_samples WHERE time_ms < ?1 GROUP BY gpu_uuid, m \
     ON CONFLICT (gpu_uuid, minute_ms) DO UPDATE SET \
     used_mean_bytes = (used_mean_bytes * n + excluded.used_mean_bytes * excluded.n) / (n + excluded.n), \
     n = n + excluded.n, used_min_bytes = min(used_min_bytes, excluded.used_min_bytes), \
     used_max_bytes = max(used_max_bytes, excluded.used_max_bytes), \
     temperature_max_c = max(temperature_max_c, excluded.temperature_max_c)";

/// Folds raw `process_samples` older than `?1` into one-minute rows (merging into a row already there).
const PROCESS_ROLL_UP: &str = "INSERT INTO process_samples_1m (host, gpu_uuid, pid, start_time_ms, minute_ms, name, n, used_min_bytes, \
     used_max_bytes, used_mean_bytes) \
     SELECT host, gpu_uuid, pid, start_time_ms, time_ms / 60000 * 60000 AS m, max(name), count(*), \
     min(used_bytes), max(used_bytes), CAST(avg(used_bytes) AS INTEGER) FROM process_samples \
     WHERE time_ms < ?1 GROUP BY host, gpu_uuid, pid, start_time_ms, m \
     ON CONFLICT (host, gpu_uuid, pid, coalesce(start_time_ms, -1), minute_ms) DO UPDATE SET \
     used_mean_bytes = (used_mean_bytes * n + excluded.used_mean_bytes * excluded.n) / (n + excluded.n), \
     n = n + excluded.n, used_min_bytes = min(used_min_bytes, excluded.used_min_bytes), \
     used_max_bytes = max(used_max_bytes, excluded.used_max_bytes)";

/// Folds raw `allocator_samples` older than `?1` into one-minute rows (merging into a row already there).
const ALLOCATOR_ROLL_UP: &str = "INSERT INTO allocator_samples_1m (host, pid, start_time_ms, device, gpu_uuid, minute_ms, n, last_step, \
     allocated_min_bytes, allocated_max_bytes, allocated_mean_bytes, reserved_max_bytes, reserved_mean_bytes, \
     inactive_split_max_bytes, alloc_retries, ooms) \
     SELECT host, pid, start_time_ms, device, max(gpu_uuid), time_ms / 60000 * 60000 AS m, count(*), max(step), \
     min(allocated_bytes), max(allocated_bytes), CAST(avg(allocated_bytes) AS INTEGER), max(reserved_bytes), \
     CAST(avg(reserved_bytes) AS INTEGER), max(inactive_split_bytes), max(alloc_retries), max(ooms) \
     FROM allocator_samples WHERE time_ms < ?1 GROUP BY host, pid, start_time_ms, device, m \
     ON CONFLICT (host, pid, coalesce(start_time_ms, -1), device, minute_ms) DO UPDATE SET \
     allocated_mean_bytes = (allocated_mean_bytes * n + excluded.allocated_mean_bytes * excluded.n) / (n + excluded.n), \
     reserved_mean_bytes = (reserved_mean_bytes * n + excluded.reserved_mean_bytes * excluded.n) / (n + excluded.n), \
     n = n + excluded.n, last_step = max(last_step, excluded.last_step), \
     allocated_min_bytes = min(allocated_min_bytes, excluded.allocated_min_bytes), \
     allocated_max_bytes = max(allocated_max_bytes, excluded.allocated_max_bytes), \
     reserved_max_bytes = max(reserved_max_bytes, excluded.reserved_max_bytes), \
     inactive_split_max_bytes = max(inactive_split_max_bytes, excluded.inactive_split_max_bytes), \
     alloc_retries = max(alloc_retries, excluded.alloc_retries), ooms = max(ooms, excluded.ooms)";

/// What one roll-up pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RollUp {
    /// Raw rows folded into one-minute rows (and deleted).
    pub rolled_rows: u64,
    /// Rows (raw or one-minute) deleted for being older than their retention.
    pub expired_rows: u64,
}

impl Library {
    /// Folds raw samples older than `raw_before_ms` (rounded down to a minute) into one-minute
    /// rows (min/max/mean; a late sample for an already rolled-up minute is merged in) and deletes
    /// them; deletes one-minute rows, events and batch records older than `rollup_before_ms`.
    /// One transaction: a crash leaves either the raw rows or their roll-up, never both or neither.
    pub async fn roll_up(&self, raw_before_ms: i64, rollup_before_ms: i64) -> sqlx::Result<RollUp> {
        let cut = raw_before_ms.div_euclid(60_000) * 60_000;
        let _turn = self.live_writer.lock().await;
        let mut tx = self.db.begin().await?;
        let mut rolled = 0u64;
        for (insert, delete) in [
            (GPU_ROLL_UP, "DELETE FROM gpu_samples WHERE time_ms < ?"),
            (
                PROCESS_ROLL_UP,
                "DELETE FROM process_samples WHERE time_ms < ?",
            ),
            (
                ALLOCATOR_ROLL_UP,
                "DELETE FROM allocator_samples WHERE time_ms < ?",
            ),
        ] {
            sqlx::query(insert).bind(cut).execute(&mut *tx).await?;
            rolled += sqlx::query(delete)
                .bind(cut)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        let mut expired = 0u64;
        for q in [
            "DELETE FROM gpu_samples_1m WHERE minute_ms < ?",
            "DELETE FROM process_samples_1m WHERE minute_ms < ?",
            "DELETE FROM allocator_samples_1m WHERE minute_ms < ?",
            "DELETE FROM events WHERE time_ms < ?",
            "DELETE FROM ingested_batches WHERE received_at_ms < ?",
            "DELETE FROM processes WHERE last_seen_ms < ?",
            "DELETE FROM hosts WHERE last_seen_ms < ?",
        ] {
            expired += sqlx::query(sqlx::AssertSqlSafe(q))
                .bind(rollup_before_ms)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        tx.commit().await?;
        Ok(RollUp {
            rolled_rows: rolled,
            expired_rows: expired,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: i64 = 1 << 20;

    #[test]
    fn a_steady_climb_is_a_leak_and_a_sawtooth_or_short_run_is_not() {
        let idx = |v: Vec<i64>| -> Vec<(i64, i64)> {
            v.into_iter()
                .enumerate()
                .map(|(i, v)| (i as i64, v))
                .collect()
        };
        let climb = idx((0..50).map(|i| 1000 * MIB + i * MIB).collect());
        let s = leak_signal(&climb);
        assert!(s.rising);
        assert!((s.bytes_per_step - MIB as f64).abs() < 1e-6);
        assert_eq!((s.steps, s.growth_bytes), (50, 37 * MIB));

        // Caching makes memory go up and down around a level: not a leak.
        let saw = idx((0..50).map(|i| 1000 * MIB + (i % 5) * 40 * MIB).collect());
        assert!(!leak_signal(&saw).rising);
        // Flat: not a leak.
        assert!(!leak_signal(&idx(vec![5 * MIB; 40])).rising);
        // Too few steps to say.
        assert!(!leak_signal(&climb[..LEAK_MIN_STEPS - 1]).rising);
        // Rising by a few bytes (allocator noise): below 1 MiB in total, not a leak.
        let tiny = idx((0..50).map(|i| 1000 * MIB + i * 512).collect());
        assert!(!leak_signal(&tiny).rising);
        // One jump and then flat (a cache filled once): the floors stop rising, not a leak.
        let jump = idx((0..40)
            .map(|i| if i < 5 { MIB } else { 64 * MIB })
            .collect());
        assert!(!leak_signal(&jump).rising);
        // A noisy leak (up 2 MiB, down 1 MiB, ...) is still a leak.
        let noisy = idx((0..60)
            .map(|i| 100 * MIB + (i / 2) * MIB + (i % 2) * 2 * MIB)
            .collect());
        assert!(leak_signal(&noisy).rising);
        assert_eq!(leak_signal(&[]).steps, 0);
        // Only every other step sampled (steps faster than the agent's interval): still 1 MiB
        // per step, not 2 per sample.
        let sparse: Vec<(i64, i64)> = (0..50).map(|i| (2 * i, 1000 * MIB + 2 * i * MIB)).collect();
        assert!((leak_signal(&sparse).bytes_per_step - MIB as f64).abs() < 1e-6);
    }

    #[test]
    fn alignment_takes_bucket_maxima_and_fills_short_gaps_only() {
        let w = Window::new(0, 9_999, 10);
        assert_eq!((w.bucket_ms, w.buckets()), (1000, 10));
        let a = align(&w, &[(0, 5), (0, 7), (2, 1), (9, 4)], 1000);
        assert_eq!(
            a,
            vec![
                Some(7),
                Some(7),
                Some(1),
                Some(1),
                None,
                None,
                None,
                None,
                None,
                Some(4)
            ]
        );
        assert_eq!(
            outside(&[Some(10), None, Some(3)], &[Some(4), Some(1), Some(5)]),
            vec![Some(6), None, Some(0)]
        );
    }
}
