//! Storing collector batches: one transaction per batch, once per `(collector, spool_id, seq)`;
//! the host and process rows kept current by every batch.

use sha2::Digest;

use crate::library::Library;

/// Rows per multi-row INSERT (16 columns at most: well under SQLite's 32,766 variables).
const ROWS_PER_INSERT: usize = 1000;

/// Why a batch was not stored.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The batch's key was stored before with different content: storing it would lose one of
    /// the two, acknowledging it would make the sender delete data that is not stored.
    #[error(
        "batch {seq} of collector {collector:?} (spool {spool}) was stored before with different content; \
         two collectors share a name and spool, or a spool was copied: give each collector its own --spool-dir"
    )]
    Conflict {
        collector: String,
        spool: String,
        seq: u64,
    },
    /// The batch speaks for a host or a GPU its token does not own.
    #[error("{0}")]
    Forbidden(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// The batch's content digest: sha256 of its JSON as this server reads it (so resending the same
/// batch matches however its bytes were compressed or spaced).
fn digest(b: &wire::Batch) -> Vec<u8> {
    let json = serde_json::to_vec(b).expect("a parsed batch serialises");
    sha2::Sha256::digest(&json).to_vec()
}

impl Library {
    /// Stores one collector batch in one transaction, once per `(collector, spool_id, seq)`: the
    /// same key with the same content again is a duplicate (acknowledged, nothing stored), with
    /// other content a conflict.
    ///
    /// `token_name` is the NAME of the token the batch came with: it may speak for one host, the
    /// first it reported, and for the GPUs no other host reported first.
    pub async fn ingest_batch(
        &self,
        b: &wire::Batch,
        token_name: &str,
    ) -> Result<wire::Ack, IngestError> {
        let _turn = self.live_writer.lock().await;
        let mut tx = self.db.begin().await?;
        check_identity(&mut tx, b, token_name).await?;
        let now_ms = crate::now_ms();
        let rows = (b.gpus.len() + b.processes.len() + b.allocator.len() + b.events.len()) as i64;
        let spool = b.spool_id.as_deref().unwrap_or("");
        let digest = digest(b);
        let fresh = sqlx::query(
            "INSERT INTO ingested_batches (collector, spool_id, seq, received_at_ms, rows, dropped, digest) \
             VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(&b.collector)
        .bind(spool)
        .bind(b.seq as i64)
        .bind(now_ms)
        .bind(rows)
        .bind(b.dropped_samples as i64)
        .bind(&digest)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !fresh {
            let stored: Option<Vec<u8>> = sqlx::query_scalar(
                "SELECT digest FROM ingested_batches WHERE collector = ? AND spool_id = ? AND seq = ?",
            )
            .bind(&b.collector)
            .bind(spool)
            .bind(b.seq as i64)
            .fetch_one(&mut *tx)
            .await?;
            // Rows stored before digests were kept cannot be compared: trust them as before.
            if stored.is_some_and(|d| d != digest) {
                return Err(IngestError::Conflict {
                    collector: b.collector.clone(),
                    spool: if spool.is_empty() {
                        "none".into()
                    } else {
                        spool.into()
                    },
                    seq: b.seq,
                });
            }
            return Ok(wire::Ack {
                seq: b.seq,
                spool_id: b.spool_id.clone(),
                duplicate: true,
                stored: 0,
            });
        }
        sqlx::query(
            "UPDATE ingest_totals SET batches = batches + 1, rows = rows + ?, dropped = dropped + ? WHERE id = 1",
        )
        .bind(rows)
        .bind(b.dropped_samples as i64)
        .execute(&mut *tx)
        .await?;
        // Each GPU once per batch (its latest reading), then the samples in multi-row inserts.
        for g in newest(&b.gpus, |x, y| x.uuid == y.uuid, |g| g.time_ms) {
            // The series' latest reading (a late batch does not move it back).
            sqlx::query(
                "INSERT INTO gpu_latest (gpu_uuid, time_ms, used_bytes, reserved_bytes, gpu_util, temperature_c, power_mw) \
                 VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (gpu_uuid) DO UPDATE SET time_ms = excluded.time_ms, \
                 used_bytes = excluded.used_bytes, reserved_bytes = excluded.reserved_bytes, gpu_util = excluded.gpu_util, \
                 temperature_c = excluded.temperature_c, power_mw = excluded.power_mw \
                 WHERE excluded.time_ms >= gpu_latest.time_ms",
            )
            .bind(&g.uuid)
            .bind(g.time_ms)
            .bind(g.memory_used_bytes.map(|v| v as i64))
            .bind(g.memory_reserved_bytes.map(|v| v as i64))
            .bind(g.gpu_util_percent.map(|v| v as i64))
            .bind(g.temperature_c)
            .bind(g.power_mw.map(|v| v as i64))
            .execute(&mut *tx)
            .await?;
            // A GPU keeps the host that first reported it (check_identity refused any other).
            sqlx::query(
                "INSERT INTO gpus (uuid, host, idx, name, total_bytes, last_seen_ms) VALUES (?, ?, ?, ?, ?, ?) \
                 ON CONFLICT (uuid) DO UPDATE SET idx = excluded.idx, \
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
        // Each allocator series' latest sample in this batch, then into the latest table.
        let same = |x: &wire::AllocatorSample, y: &wire::AllocatorSample| {
            (x.pid, x.start_time_ms, x.device) == (y.pid, y.start_time_ms, y.device)
        };
        for a in newest(&b.allocator, same, |a| a.time_ms) {
            sqlx::query(
                "INSERT INTO allocator_latest (host, pid, start_key, start_time_ms, device, gpu_uuid, time_ms, step, \
                 allocated_bytes, reserved_bytes, alloc_retries, ooms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
                 ON CONFLICT (host, pid, start_key, device) DO UPDATE SET gpu_uuid = excluded.gpu_uuid, \
                 time_ms = excluded.time_ms, step = excluded.step, allocated_bytes = excluded.allocated_bytes, \
                 reserved_bytes = excluded.reserved_bytes, alloc_retries = excluded.alloc_retries, ooms = excluded.ooms \
                 WHERE excluded.time_ms >= allocator_latest.time_ms",
            )
            .bind(&b.host)
            .bind(a.pid as i64)
            .bind(a.start_time_ms.unwrap_or(-1))
            .bind(a.start_time_ms)
            .bind(a.device)
            .bind(&a.gpu_uuid)
            .bind(a.time_ms)
            .bind(opt(a.step))
            .bind(a.allocated_bytes as i64)
            .bind(a.reserved_bytes as i64)
            .bind(opt(a.alloc_retries))
            .bind(opt(a.ooms))
            .execute(&mut *tx)
            .await?;
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
            spool_id: b.spool_id.clone(),
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
}

/// Refuses a batch that speaks for a host other than the one its token first reported, or for a
/// GPU another host reported first; binds the token to its host on its first batch.
async fn check_identity(
    tx: &mut sqlx::SqliteConnection,
    b: &wire::Batch,
    token_name: &str,
) -> Result<(), IngestError> {
    sqlx::query(
        "INSERT INTO collector_hosts (token_name, host, first_seen_ms) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
    )
    .bind(token_name)
    .bind(&b.host)
    .bind(crate::now_ms())
    .execute(&mut *tx)
    .await?;
    let bound: String = sqlx::query_scalar("SELECT host FROM collector_hosts WHERE token_name = ?")
        .bind(token_name)
        .fetch_one(&mut *tx)
        .await?;
    if bound != b.host {
        return Err(IngestError::Forbidden(format!(
            "the token of collector {token_name:?} reports host {bound:?}, and this batch says {:?}; \
             give each host its own --collector-token (a renamed host needs a new token name)",
            b.host
        )));
    }
    let mut uuids: Vec<&str> = b.gpus.iter().map(|g| g.uuid.as_str()).collect();
    uuids.extend(b.processes.iter().map(|p| p.gpu_uuid.as_str()));
    uuids.extend(b.allocator.iter().filter_map(|a| a.gpu_uuid.as_deref()));
    uuids.sort_unstable();
    uuids.dedup();
    for uuid in uuids {
        let owner: Option<String> = sqlx::query_scalar("SELECT host FROM gpus WHERE uuid = ?")
            .bind(uuid)
            .fetch_optional(&mut *tx)
            .await?;
        if let Some(owner) = owner.filter(|o| *o != b.host) {
            return Err(IngestError::Forbidden(format!(
                "GPU {uuid} belongs to host {owner:?}; a collector may only report its own host's GPUs"
            )));
        }
    }
    Ok(())
}

/// The newest sample of each series in a batch (a batch holds few series), in first-seen order.
fn newest<T>(
    samples: &[T],
    same_series: impl Fn(&T, &T) -> bool,
    time_ms: impl Fn(&T) -> i64,
) -> Vec<&T> {
    let mut out: Vec<&T> = Vec::new();
    for s in samples {
        match out.iter_mut().find(|x| same_series(x, s)) {
            Some(x) if time_ms(x) <= time_ms(s) => *x = s,
            Some(_) => {}
            None => out.push(s),
        }
    }
    out
}
