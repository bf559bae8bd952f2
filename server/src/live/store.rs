//! [`Live`], the live tables' owner, and storing collector batches: one transaction per batch,
//! once per `(collector, spool_id, seq)`; the host and process rows kept current by every batch;
//! its notice published in the transaction and delivered after the commit.

use sha2::Digest;

use crate::db::Db;
use crate::db::{Conn, Dialects, Tx, opt};
use crate::{with_db, with_tx};

/// The live tables' owner: stores batches, reads the tables back for the live pages and
/// `/metrics`, rolls them up, and tells the live streams of every stored batch.
#[derive(Debug, Clone)]
pub struct Live {
    pub(super) db: Db,
    /// "New live data from this host", to the live pages' event streams.
    notices: tokio::sync::broadcast::Sender<api::LiveNotice>,
}

impl Live {
    /// The live tables of `db`. Notices of batches other servers store (PostgreSQL) are heard
    /// from before this returns, so none stored after is missed, until `stop` turns true.
    pub async fn open(db: Db, stop: tokio::sync::watch::Receiver<bool>) -> anyhow::Result<Live> {
        let notices = tokio::sync::broadcast::channel(256).0;
        if let Some(listener) = db.listen_notices().await? {
            tokio::spawn(super::notices::forward(listener, notices.clone(), stop));
        }
        Ok(Live { db, notices })
    }

    /// The notices of batches stored from now on.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<api::LiveNotice> {
        self.notices.subscribe()
    }

    /// Live reads stopped because their request went away (`/metrics`).
    pub fn reads_interrupted(&self) -> u64 {
        self.db.live_reads_interrupted()
    }
}

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

/// Upserts whose merge takes the larger or smaller of two values: scalar `max`/`min` in SQLite,
/// `greatest`/`least` in PostgreSQL; and the process key on a nullable start time.
macro_rules! gpus_upsert {
    ($max:literal) => {
        concat!(
            "INSERT INTO gpus (uuid, host, idx, name, total_bytes, last_seen_ms) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (uuid) DO UPDATE SET idx = excluded.idx, \
             name = coalesce(excluded.name, gpus.name), total_bytes = coalesce(excluded.total_bytes, gpus.total_bytes), \
             last_seen_ms = ",
            $max,
            "(gpus.last_seen_ms, excluded.last_seen_ms)"
        )
    };
}
const GPUS_UPSERT: Dialects = Dialects {
    sqlite: gpus_upsert!("max"),
    postgres: gpus_upsert!("greatest"),
};
macro_rules! hosts_upsert {
    ($max:literal) => {
        concat!(
            "INSERT INTO hosts (host, collector, first_seen_ms, last_seen_ms) VALUES ($1, $2, $3, $3) \
             ON CONFLICT (host) DO UPDATE SET collector = excluded.collector, last_seen_ms = ",
            $max,
            "(hosts.last_seen_ms, excluded.last_seen_ms)"
        )
    };
}
const HOSTS_UPSERT: Dialects = Dialects {
    sqlite: hosts_upsert!("max"),
    postgres: hosts_upsert!("greatest"),
};
macro_rules! processes_upsert {
    ($key:literal, $max:literal, $min:literal) => {
        concat!(
            "INSERT INTO processes (host, pid, start_time_ms, name, cgroup, has_agent, first_seen_ms, last_seen_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT ",
            $key,
            " DO UPDATE SET name = coalesce(excluded.name, processes.name), \
             cgroup = coalesce(excluded.cgroup, processes.cgroup), \
             has_agent = processes.has_agent OR excluded.has_agent, first_seen_ms = ",
            $min,
            "(processes.first_seen_ms, excluded.first_seen_ms), last_seen_ms = ",
            $max,
            "(processes.last_seen_ms, excluded.last_seen_ms)"
        )
    };
}
const PROCESSES_UPSERT: Dialects = Dialects {
    sqlite: processes_upsert!("(host, pid, coalesce(start_time_ms, -1))", "max", "min"),
    postgres: processes_upsert!("(host, pid, start_time_ms)", "greatest", "least"),
};

impl Live {
    /// Stores one collector batch in one transaction, once per `(collector, spool_id, seq)`: the
    /// same key with the same content again is a duplicate (acknowledged, nothing stored), with
    /// other content a conflict.
    ///
    /// `token_name` is the NAME of the token the batch came with: the one host it speaks for (its
    /// configuration says so, not the batch: another token cannot claim this host, nor this one
    /// another), with the GPUs no other host reported first. Samples stamped more than
    /// [`MAX_AHEAD_MS`] ahead are not stored, and counted.
    pub async fn ingest_batch(
        &self,
        b: &wire::Batch,
        token_name: &str,
    ) -> Result<wire::Ack, IngestError> {
        if b.host != token_name {
            return Err(IngestError::Forbidden(format!(
                "the token of {token_name:?} speaks for host {token_name:?}, and this batch says {:?}: \
                 run the collector with --host {token_name} (or leave --host out), or give that host its own \
                 --collector-token {}=TOKEN",
                b.host, b.host
            )));
        }
        let _turn = self.db.writer_turn().await;
        let now_ms = crate::now_ms();
        // Digested as received (a resend matches), stored without what is stamped ahead.
        let received = b;
        let (b, ahead) = without_future(received, now_ms);
        let b = b.as_ref();
        if ahead > 0 {
            tracing::warn!(
                host = b.host,
                samples = ahead,
                "samples stamped more than {} minutes ahead of this server's clock were refused: check the host's clock (NTP)",
                MAX_AHEAD_MS / 60_000
            );
        }
        let rows = (b.gpus.len() + b.processes.len() + b.allocator.len() + b.events.len()) as u64;
        let mut tx = self.db.begin().await?;
        check_identity(&mut tx, b).await?;
        if !record_batch(&mut tx, received, rows, now_ms).await? {
            return Ok(wire::Ack {
                seq: b.seq,
                spool_id: b.spool_id.clone(),
                duplicate: true,
                stored: 0,
            });
        }
        store_gpus(&mut tx, b).await?;
        with_tx!(&mut tx, |c| c.insert_samples(b).await)?;
        store_latest(&mut tx, b).await?;
        store_events(&mut tx, b).await?;
        keep_host_and_processes(&mut tx, b, now_ms).await?;
        add_to_totals(&mut tx, rows, b.dropped_samples, ahead).await?;
        let notice = api::LiveNotice {
            host: b.host.clone(),
            time_ms: now_ms,
            rows,
            events: b.events.len(),
        };
        let notice = with_tx!(&mut tx, |c| c.publish_notice(notice).await)?;
        tx.commit().await?;
        // After the commit: pages told to fetch again find the batch.
        notice.deliver(&self.notices);
        Ok(wire::Ack {
            seq: b.seq,
            spool_id: b.spool_id.clone(),
            duplicate: false,
            stored: rows,
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
            out[i] = with_db!(&self.db, |p| sqlx::query_scalar(q).fetch_one(p).await)?;
        }
        Ok(out)
    }
}

/// Samples stamped further ahead of this server's clock than this are refused and counted: one
/// from a host with a wrong clock would hold the latest values (which never move back) until
/// wall time passed it.
pub const MAX_AHEAD_MS: i64 = 5 * 60_000;

/// Most GPUs one host may own (8 GPUs split into 7 MIG instances each is 56).
pub const MAX_GPUS_PER_HOST: usize = 1024;

/// The batch without its samples and events stamped more than [`MAX_AHEAD_MS`] after `now_ms`,
/// and how many those were.
fn without_future(b: &wire::Batch, now_ms: i64) -> (std::borrow::Cow<'_, wire::Batch>, u64) {
    let limit = now_ms.saturating_add(MAX_AHEAD_MS);
    let ahead = b.gpus.iter().filter(|g| g.time_ms > limit).count()
        + b.processes.iter().filter(|p| p.time_ms > limit).count()
        + b.allocator.iter().filter(|a| a.time_ms > limit).count()
        + b.events.iter().filter(|e| e.time_ms > limit).count();
    if ahead == 0 {
        return (std::borrow::Cow::Borrowed(b), 0);
    }
    let mut kept = b.clone();
    kept.gpus.retain(|g| g.time_ms <= limit);
    kept.processes.retain(|p| p.time_ms <= limit);
    kept.allocator.retain(|a| a.time_ms <= limit);
    kept.events.retain(|e| e.time_ms <= limit);
    (std::borrow::Cow::Owned(kept), ahead as u64)
}

/// GPU UUIDs per `IN (…)` list: well under SQLite's and PostgreSQL's bound parameters.
const UUIDS_PER_QUERY: usize = 500;

/// Refuses a batch that speaks for a GPU another host reported first, or that would give its
/// host more than [`MAX_GPUS_PER_HOST`]. (Which host a batch may speak for is its token's NAME,
/// checked before: `http::ingest`.) One query per few hundred GPUs, not one per GPU.
async fn check_identity(tx: &mut Tx, b: &wire::Batch) -> Result<(), IngestError> {
    let uuids = batch_gpus(b);
    let mut owners: Vec<(String, String)> = Vec::new();
    let owned: i64 = with_tx!(tx, |c| {
        for chunk in uuids.chunks(UUIDS_PER_QUERY) {
            let list: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 1)).collect();
            let sql = format!(
                "SELECT uuid, host FROM gpus WHERE uuid IN ({})",
                list.join(", ")
            );
            let mut q = sqlx::query_as(sqlx::AssertSqlSafe(sql));
            for uuid in chunk {
                q = q.bind(*uuid);
            }
            owners.extend(q.fetch_all(&mut *c).await?);
        }
        sqlx::query_scalar("SELECT count(*) FROM gpus WHERE host = $1")
            .bind(&b.host)
            .fetch_one(&mut *c)
            .await?
    });
    if let Some((uuid, owner)) = owners.iter().find(|(_, o)| *o != b.host) {
        return Err(IngestError::Forbidden(format!(
            "GPU {uuid} belongs to host {owner:?}; a collector may only report its own host's GPUs"
        )));
    }
    let new = uuids.len() - owners.len();
    if owned as usize + new > MAX_GPUS_PER_HOST {
        return Err(IngestError::Forbidden(format!(
            "host {:?} would own {} GPUs; at most {MAX_GPUS_PER_HOST} per host",
            b.host,
            owned as usize + new
        )));
    }
    Ok(())
}

/// Records the batch's key, once: true if it is new; false for the same batch again (the same
/// content: a duplicate to acknowledge); a conflict for other content under the same key.
async fn record_batch(
    tx: &mut Tx,
    b: &wire::Batch,
    rows: u64,
    now_ms: i64,
) -> Result<bool, IngestError> {
    let spool = b.spool_id.as_deref().unwrap_or("");
    let digest = digest(b);
    let stored: Option<Option<Vec<u8>>> = with_tx!(tx, |c| {
        let fresh = sqlx::query(
            "INSERT INTO ingested_batches (collector, spool_id, seq, received_at_ms, rows, dropped, digest) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
        )
        .bind(&b.collector)
        .bind(spool)
        .bind(b.seq as i64)
        .bind(now_ms)
        .bind(rows as i64)
        .bind(b.dropped_samples as i64)
        .bind(&digest)
        .execute(&mut *c)
        .await?
        .rows_affected()
            == 1;
        if fresh {
            None
        } else {
            Some(
                sqlx::query_scalar(
                    "SELECT digest FROM ingested_batches WHERE collector = $1 AND spool_id = $2 AND seq = $3",
                )
                .bind(&b.collector)
                .bind(spool)
                .bind(b.seq as i64)
                .fetch_one(&mut *c)
                .await?,
            )
        }
    });
    match stored {
        None => Ok(true),
        // Rows stored before digests were kept cannot be compared: trust them as before.
        Some(Some(d)) if d != digest => Err(IngestError::Conflict {
            collector: b.collector.clone(),
            spool: if spool.is_empty() {
                "none".into()
            } else {
                spool.into()
            },
            seq: b.seq,
        }),
        Some(_) => Ok(false),
    }
}

/// Each GPU once per batch: its latest reading (a late batch does not move it back) and its row
/// (a GPU keeps the host that first reported it: `check_identity` refused any other).
async fn store_gpus(tx: &mut Tx, b: &wire::Batch) -> sqlx::Result<()> {
    with_tx!(tx, |c| {
        for g in newest(&b.gpus, |g| g.uuid.as_str(), |g| g.time_ms) {
            sqlx::query(
                "INSERT INTO gpu_latest (gpu_uuid, time_ms, used_bytes, reserved_bytes, gpu_util, temperature_c, \
                 power_mw) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (gpu_uuid) DO UPDATE SET \
                 time_ms = excluded.time_ms, used_bytes = excluded.used_bytes, \
                 reserved_bytes = excluded.reserved_bytes, gpu_util = excluded.gpu_util, \
                 temperature_c = excluded.temperature_c, power_mw = excluded.power_mw \
                 WHERE excluded.time_ms >= gpu_latest.time_ms",
            )
            .bind(&g.uuid)
            .bind(g.time_ms)
            .bind(opt(g.memory_used_bytes))
            .bind(opt(g.memory_reserved_bytes))
            .bind(g.gpu_util_percent.map(i64::from))
            .bind(g.temperature_c.map(i64::from))
            .bind(g.power_mw.map(i64::from))
            .execute(&mut *c)
            .await?;
            sqlx::query(c.sql(&GPUS_UPSERT))
                .bind(&g.uuid)
                .bind(&b.host)
                .bind(i64::from(g.index))
                .bind(&g.name)
                .bind(opt(g.memory_total_bytes))
                .bind(g.time_ms)
                .execute(&mut *c)
                .await?;
        }
        Ok(())
    })
}

/// Each allocator series' and each process's (per GPU) latest sample in this batch, into the
/// latest tables (a late batch does not move them back).
async fn store_latest(tx: &mut Tx, b: &wire::Batch) -> sqlx::Result<()> {
    with_tx!(tx, |c| {
        for a in newest(
            &b.allocator,
            |a| (a.pid, a.start_time_ms, a.device),
            |a| a.time_ms,
        ) {
            sqlx::query(
                "INSERT INTO allocator_latest (host, pid, start_key, start_time_ms, device, gpu_uuid, time_ms, \
                 step, allocated_bytes, reserved_bytes, alloc_retries, ooms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                 ON CONFLICT (host, pid, start_key, device) DO UPDATE SET gpu_uuid = excluded.gpu_uuid, \
                 time_ms = excluded.time_ms, step = excluded.step, allocated_bytes = excluded.allocated_bytes, \
                 reserved_bytes = excluded.reserved_bytes, alloc_retries = excluded.alloc_retries, \
                 ooms = excluded.ooms WHERE excluded.time_ms >= allocator_latest.time_ms",
            )
            .bind(&b.host)
            .bind(i64::from(a.pid))
            .bind(a.start_time_ms.unwrap_or(-1))
            .bind(a.start_time_ms)
            .bind(i64::from(a.device))
            .bind(&a.gpu_uuid)
            .bind(a.time_ms)
            .bind(opt(a.step))
            .bind(a.allocated_bytes as i64)
            .bind(a.reserved_bytes as i64)
            .bind(opt(a.alloc_retries))
            .bind(opt(a.ooms))
            .execute(&mut *c)
            .await?;
        }
        for p in newest(
            &b.processes,
            |p| (p.gpu_uuid.as_str(), p.pid, p.start_time_ms),
            |p| p.time_ms,
        ) {
            sqlx::query(
                "INSERT INTO process_latest (gpu_uuid, pid, start_key, start_time_ms, host, time_ms, name, \
                 used_bytes) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                 ON CONFLICT (gpu_uuid, pid, start_key) DO UPDATE SET host = excluded.host, \
                 time_ms = excluded.time_ms, name = excluded.name, used_bytes = excluded.used_bytes \
                 WHERE excluded.time_ms >= process_latest.time_ms",
            )
            .bind(&p.gpu_uuid)
            .bind(i64::from(p.pid))
            .bind(p.start_time_ms.unwrap_or(-1))
            .bind(p.start_time_ms)
            .bind(&b.host)
            .bind(p.time_ms)
            .bind(&p.name)
            .bind(p.used_bytes as i64)
            .execute(&mut *c)
            .await?;
        }
        Ok(())
    })
}

/// The batch's events.
async fn store_events(tx: &mut Tx, b: &wire::Batch) -> sqlx::Result<()> {
    with_tx!(tx, |c| {
        for e in &b.events {
            sqlx::query(
                "INSERT INTO events (host, time_ms, kind, pid, device, message, snapshot_id) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(&b.host)
            .bind(e.time_ms)
            .bind(&e.kind)
            .bind(e.pid.map(i64::from))
            .bind(e.device.map(i64::from))
            .bind(&e.message)
            .bind(&e.snapshot_id)
            .execute(&mut *c)
            .await?;
        }
        Ok(())
    })
}

/// The host and the processes the batch speaks of (one row each, kept current).
async fn keep_host_and_processes(tx: &mut Tx, b: &wire::Batch, now_ms: i64) -> sqlx::Result<()> {
    with_tx!(tx, |c| {
        sqlx::query(c.sql(&HOSTS_UPSERT))
            .bind(&b.host)
            .bind(&b.collector)
            .bind(now_ms)
            .execute(&mut *c)
            .await?;
        for ((pid, start), (name, cgroup, agent, first, last)) in seen_processes(b) {
            sqlx::query(c.sql(&PROCESSES_UPSERT))
                .bind(&b.host)
                .bind(i64::from(pid))
                .bind(start)
                .bind(name)
                .bind(cgroup)
                .bind(agent)
                .bind(first)
                .bind(last)
                .execute(&mut *c)
                .await?;
        }
        Ok(())
    })
}

/// The running totals, last: every batch updates this one row, so its lock is held only from
/// here to the commit (concurrent batches on PostgreSQL queue on it).
async fn add_to_totals(tx: &mut Tx, rows: u64, dropped: u64, ahead: u64) -> sqlx::Result<()> {
    with_tx!(tx, |c| {
        sqlx::query(
            "UPDATE ingest_totals SET batches = batches + 1, rows = rows + $1, dropped = dropped + $2, \
             future_samples = future_samples + $3 WHERE id = 1",
        )
        .bind(rows as i64)
        .bind(dropped as i64)
        .bind(ahead as i64)
        .execute(&mut *c)
        .await?;
        Ok(())
    })
}

/// A process a batch speaks of: (name, cgroup, has an agent, first seen, last seen).
type Seen<'a> = (Option<&'a str>, Option<&'a str>, bool, i64, i64);

/// The processes of a batch's NVML and agent samples, by (pid, start time).
fn seen_processes(b: &wire::Batch) -> std::collections::BTreeMap<(u32, Option<i64>), Seen<'_>> {
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
    procs
}

/// Every GPU a batch speaks of, once each.
fn batch_gpus(b: &wire::Batch) -> Vec<&str> {
    let mut uuids: Vec<&str> = b.gpus.iter().map(|g| g.uuid.as_str()).collect();
    uuids.extend(b.processes.iter().map(|p| p.gpu_uuid.as_str()));
    uuids.extend(b.allocator.iter().filter_map(|a| a.gpu_uuid.as_deref()));
    uuids.sort_unstable();
    uuids.dedup();
    uuids
}

/// The newest sample of each series in a batch, in first-seen order (one pass, a map by key: a
/// batch may hold thousands of series).
fn newest<'a, T, K: std::hash::Hash + Eq>(
    samples: &'a [T],
    key: impl Fn(&'a T) -> K,
    time_ms: impl Fn(&T) -> i64,
) -> Vec<&'a T> {
    let mut at: std::collections::HashMap<K, usize> = Default::default();
    let mut out: Vec<&T> = Vec::new();
    for s in samples {
        match at.entry(key(s)) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let x = &mut out[*e.get()];
                if time_ms(x) <= time_ms(s) {
                    *x = s;
                }
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(out.len());
                out.push(s);
            }
        }
    }
    out
}
