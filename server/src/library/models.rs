//! Parsed snapshots kept in memory for queries, least recently used dropped first. A snapshot not
//! in memory is loaded from its model file (never from the pickle); if that file is missing or
//! damaged it is rebuilt once from the original upload. Concurrent requests for a snapshot not in
//! memory wait for one load instead of each loading it (each load holds a whole index).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use anyhow::Context;
use snapshot::Snapshot;
use snapshot::analysis::Index;

use snapshot::analysis::whatif::{Progress, WhatIfError};

use super::files::{Library, Waited, write_model_file};

/// A snapshot ready for queries.
#[derive(Debug)]
pub struct Loaded {
    pub snap: Snapshot,
    pub index: Index,
    /// Answers too slow to compute again, kept as long as the model is in memory.
    pub answers: Answers,
}

impl Loaded {
    pub fn new(snap: Snapshot, index: Index) -> Loaded {
        Loaded {
            snap,
            index,
            answers: Answers::default(),
        }
    }

    /// The what-if answer `q` asks for (the trace replayed under the candidates or one
    /// setting), computed on at most `threads` threads (0: every core): callers look in
    /// [`Answers`] first.
    pub fn whatif(
        &self,
        q: &api::WhatIfQuery,
        cancel: &snapshot::Cancel,
        progress: Option<Arc<Progress>>,
    ) -> Result<api::WhatIf, WhatIfError> {
        let options = whatif_options(q, cancel.clone(), progress);
        snapshot::analysis::whatif::whatif(&self.snap, &self.index, &options)
            .map(crate::convert::whatif)
    }

    /// What the what-if `q` will replay and the figures known before any replay (no replay).
    pub fn whatif_outline(&self, q: &api::WhatIfQuery) -> Result<api::WhatIfOutline, WhatIfError> {
        let options = whatif_options(q, Default::default(), None);
        snapshot::analysis::whatif::outline(&self.snap, &self.index, &options)
            .map(crate::convert::whatif_outline)
    }
}

/// The engine's options for the what-if `q` asks for. Without `progress`, the replays take
/// every core.
fn whatif_options(
    q: &api::WhatIfQuery,
    cancel: snapshot::Cancel,
    progress: Option<Arc<Progress>>,
) -> snapshot::analysis::whatif::Options {
    snapshot::analysis::whatif::Options {
        device: q.device,
        alloc_confs: q.alloc_conf.iter().cloned().collect(),
        limit_bytes: q.limit_bytes,
        limit_is_fraction: q.limit_kind == Some(api::LimitKind::Fraction),
        curves: q.curves.unwrap_or(false),
        cancel,
        threads: 0,
        progress,
    }
}

/// What-if answers by query. The What if tab opens on the table of every candidate setting,
/// which replays the trace ten times (about 11 s for a 13M-event trace on two cores): an upload
/// computes that table, with every run's curve, in the background once it is answered
/// (`library::replays`), and every answer is kept here. Opening the tab again, or after the
/// background replay, is a lookup, and so is a chart of one candidate ([`narrowed`]).
#[derive(Debug, Default)]
pub struct Answers {
    whatif: Mutex<Vec<(String, Arc<api::WhatIf>)>>,
    /// What-ifs under way or waiting their turn, to watch (`library::replays`).
    pub flights: Mutex<Vec<Arc<Flight>>>,
    /// Held while a what-if answer is computed: a request for the one being computed waits for
    /// it and finds it here instead of replaying the trace again.
    pub computing: tokio::sync::Mutex<()>,
}

/// A what-if under way or waiting its turn (`library::replays`).
#[derive(Debug)]
pub struct Flight {
    pub key: String,
    pub progress: Arc<Progress>,
    /// When its replays started (none while it waits for another what-if of the model).
    started: OnceLock<Instant>,
    /// Why it failed, for whoever watches next.
    failed: OnceLock<String>,
}

impl Flight {
    pub fn new(key: String, threads: usize) -> Flight {
        Flight {
            key,
            progress: Arc::new(Progress::new(threads)),
            started: OnceLock::new(),
            failed: OnceLock::new(),
        }
    }

    /// Its replays start now.
    pub fn start(&self) {
        let _ = self.started.set(Instant::now());
    }

    pub fn fail(&self, why: String) {
        let _ = self.failed.set(why);
    }

    /// Milliseconds since its replays started.
    pub fn elapsed_ms(&self) -> u64 {
        self.started
            .get()
            .map_or(0, |t| t.elapsed().as_millis() as u64)
    }

    pub fn failed(&self) -> Option<&str> {
        self.failed.get().map(String::as_str)
    }
}

/// What-if answers kept per model (the table and a few charts' settings).
const KEPT_WHATIF_ANSWERS: usize = 16;

impl Answers {
    /// The key of a what-if query: its canonical JSON.
    pub fn whatif_key(q: &api::WhatIfQuery) -> String {
        serde_json::to_string(q).unwrap_or_default()
    }

    /// The query whose answer serves every query of its device and limit ([`narrowed`]): every
    /// candidate setting, with the curves.
    pub fn table_query(q: &api::WhatIfQuery) -> api::WhatIfQuery {
        api::WhatIfQuery {
            alloc_conf: None,
            curves: Some(true),
            ..q.clone()
        }
    }

    /// What is computed to answer `q`: for the table, the table with every run's curve (it then
    /// answers each candidate's chart too); one setting as asked.
    pub fn computed_query(q: &api::WhatIfQuery) -> api::WhatIfQuery {
        match q.alloc_conf {
            None => Self::table_query(q),
            Some(_) => q.clone(),
        }
    }

    /// The kept answer to `q`: its own, or one narrowed from the table of its device and limit.
    pub fn whatif(&self, q: &api::WhatIfQuery) -> Option<Arc<api::WhatIf>> {
        let kept = self.whatif.lock().expect("answers lock");
        let by_key = |key: &str| kept.iter().find(|(k, _)| k == key).map(|(_, a)| a.clone());
        if let Some(own) = by_key(&Self::whatif_key(q)) {
            return Some(own);
        }
        let table = by_key(&Self::whatif_key(&Self::table_query(q)))?;
        narrowed(&table, q).map(Arc::new)
    }

    /// Every what-if under way runs on every core from now on: someone waits.
    pub fn hurry(&self) {
        for f in self.flights.lock().expect("answers lock").iter() {
            f.progress.hurry();
        }
    }

    pub fn keep_whatif(&self, key: String, answer: Arc<api::WhatIf>) {
        let mut kept = self.whatif.lock().expect("answers lock");
        kept.retain(|(k, _)| *k != key);
        if kept.len() >= KEPT_WHATIF_ANSWERS {
            kept.remove(0);
        }
        kept.push((key, answer));
    }
}

/// `table` (every candidate setting with its curve, `Answers::table_query`) as the engine would
/// answer `q`, a query of the same device and limit: one candidate beside the recorded settings,
/// or the table without curves. None when `q` names a setting the table did not replay.
pub fn narrowed(table: &api::WhatIf, q: &api::WhatIfQuery) -> Option<api::WhatIf> {
    let mut w = table.clone();
    if let Some(conf) = &q.alloc_conf {
        let asked = w.runs.iter().find(|r| r.alloc_conf == *conf)?.clone();
        w.runs = if asked.recorded {
            vec![asked]
        } else {
            // Asked alone, the recorded settings are the run the engine adds, named as the
            // snapshot names them.
            let mut recorded = w.runs.iter().find(|r| r.recorded)?.clone();
            recorded.alloc_conf = w.recorded_alloc_conf.clone();
            recorded.not_simulated.clear();
            let mut runs = vec![recorded, asked];
            api::whatif::rank_runs(&mut runs);
            runs
        };
    }
    if q.curves != Some(true) {
        w.curves = None;
        for r in &mut w.runs {
            r.reserved_curve.clear();
        }
    }
    Some(w)
}

/// A server's what-if replays, over every model, for `/metrics`: those replaying now, in the
/// background (after an upload) or watched (someone asked), and those ended, by how. Owned by
/// the server's [`Models`]; counted by `library::replays`.
#[derive(Debug, Default)]
pub struct ReplayCounts {
    pub background_running: AtomicU64,
    pub watched_running: AtomicU64,
    /// Answers computed and kept.
    pub answered_total: AtomicU64,
    /// Traces the model could not replay (nothing to replay, or a trace it refuses): the
    /// watchers are told why.
    pub no_answer_total: AtomicU64,
    /// Replays that crashed.
    pub failed_total: AtomicU64,
}

impl ReplayCounts {
    /// Counts one replay as running until the returned guard is dropped.
    pub(super) fn replaying(self: &Arc<Self>, background: bool) -> Replaying {
        self.running(background).fetch_add(1, Ordering::Relaxed);
        Replaying {
            counts: self.clone(),
            background,
        }
    }

    fn running(&self, background: bool) -> &AtomicU64 {
        match background {
            true => &self.background_running,
            false => &self.watched_running,
        }
    }
}

/// One replay counted as running while it is held.
pub(super) struct Replaying {
    counts: Arc<ReplayCounts>,
    background: bool,
}

impl Drop for Replaying {
    fn drop(&mut self) {
        self.counts
            .running(self.background)
            .fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
pub struct Models {
    capacity: usize,
    /// (id, model, last use); small, so a Vec.
    entries: Mutex<Vec<(String, Arc<Loaded>, u64)>>,
    clock: std::sync::atomic::AtomicU64,
    /// One lock per snapshot being loaded: the first request loads, the others wait for it.
    loading: Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Loads from disk so far (model file or original).
    loads: std::sync::atomic::AtomicU64,
    /// The what-if replays of these models, for `/metrics`.
    pub replays: Arc<ReplayCounts>,
}

impl Models {
    pub fn new(capacity: usize) -> Models {
        Models {
            capacity: capacity.max(1),
            entries: Mutex::new(Vec::new()),
            clock: Default::default(),
            loading: Default::default(),
            loads: Default::default(),
            replays: Default::default(),
        }
    }

    /// How many times a snapshot was loaded from disk (a figure for tests and logs).
    pub fn loads(&self) -> u64 {
        self.loads.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn tick(&self) -> u64 {
        self.clock
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    pub fn cached(&self, id: &str) -> Option<Arc<Loaded>> {
        let now = self.tick();
        let mut e = self.entries.lock().expect("cache lock");
        e.iter_mut().find(|(i, _, _)| i == id).map(|(_, m, t)| {
            *t = now;
            m.clone()
        })
    }

    pub fn insert(&self, id: &str, model: Arc<Loaded>) {
        let now = self.tick();
        let mut e = self.entries.lock().expect("cache lock");
        e.retain(|(i, _, _)| i != id);
        if e.len() >= self.capacity
            && let Some(oldest) = e
                .iter()
                .enumerate()
                .min_by_key(|(_, (_, _, t))| *t)
                .map(|(i, _)| i)
        {
            e.swap_remove(oldest);
        }
        e.push((id.to_string(), model, now));
    }

    pub fn remove(&self, id: &str) {
        self.entries
            .lock()
            .expect("cache lock")
            .retain(|(i, _, _)| i != id);
    }

    /// The snapshot `id`, from memory or its model file; `None` if the library has no such id.
    pub async fn get(&self, lib: &Library, id: &str) -> anyhow::Result<Option<Arc<Loaded>>> {
        if let Some(m) = self.cached(id) {
            return Ok(Some(m));
        }
        // One load per snapshot at a time; who waited finds it in memory.
        let turn = self
            .loading
            .lock()
            .expect("loading lock")
            .entry(id.to_string())
            .or_default()
            .clone();
        let _turn = turn.lock().await;
        let result = self.load(lib, id).await;
        self.loading
            .lock()
            .expect("loading lock")
            .retain(|_, l| Arc::strong_count(l) > 2 || !Arc::ptr_eq(l, &turn));
        result
    }

    async fn load(&self, lib: &Library, id: &str) -> anyhow::Result<Option<Arc<Loaded>>> {
        if let Some(m) = self.cached(id) {
            return Ok(Some(m));
        }
        self.loads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(info) = lib.get(id).await? else {
            return Ok(None);
        };
        let model_path = lib.model_path(&info.sha256);
        let original = lib.original_path(&info.sha256);
        if !model_path.exists() {
            // Perhaps still being written after its upload (`upload::write_model_later`): that
            // is cheaper to wait for than a parse of the original.
            lib.model_writes_done().await;
        }
        // The load runs on a blocking thread; its log lines belong to the request that asked.
        let span = tracing::Span::current();
        let sha256 = info.sha256.clone();
        let (loaded, rebuilt) = tokio::task::spawn_blocking(move || -> anyhow::Result<(Loaded, bool)> {
            let _in_request = span.enter();
            let mut rebuilt = false;
            let t0 = std::time::Instant::now();
            let (snap, stored) = match std::fs::File::open(&model_path).map_err(anyhow::Error::from).and_then(|f| {
                snapshot::store::read_for(std::io::BufReader::with_capacity(1 << 20, f), &sha256).map_err(anyhow::Error::from)
            }) {
                Ok(read) => read,
                Err(e) => {
                    if model_path.exists() {
                        tracing::warn!(error = %e, path = %model_path.display(), "model file unusable; rebuilding it from the original upload");
                    } else {
                        // The server stopped before writing it, or it was removed.
                        tracing::info!(path = %model_path.display(), "no model file; building it from the original upload");
                    }
                    std::fs::metadata(&original).with_context(|| format!("original upload {} is missing", original.display()))?;
                    let (snap, index) = read_snapshot_file(&original).with_context(|| format!("original upload {} is unreadable", original.display()))?;
                    rebuilt = true;
                    (snap, Some(index))
                }
            };
            let read_ms = t0.elapsed().as_secs_f64() * 1e3;
            // Files written before the index was stored (model version 3) are rebuilt above;
            // one without it is indexed here.
            let index_stored = stored.is_some();
            let index = stored.unwrap_or_else(|| Index::new(&snap));
            tracing::info!(
                events = snap.trace.len(),
                read_ms = read_ms.round(),
                index_ms = (t0.elapsed().as_secs_f64() * 1e3 - read_ms).round(),
                index_stored,
                "snapshot model loaded"
            );
            Ok((Loaded::new(snap, index), rebuilt))
        })
        .await??;
        let loaded = Arc::new(loaded);
        if rebuilt {
            // Placed like an upload's (under the files lock, only while the row stands).
            let from = loaded.clone();
            let sha256 = info.sha256.clone();
            lib.write_model(id, &info.sha256, Waited::ByARequest, move |path| {
                write_model_file(&from.snap, &from.index, &sha256, path)
            })
            .await?;
        }
        self.insert(id, loaded.clone());
        warm_later(loaded.clone());
        Ok(Some(loaded))
    }
}

/// [`snapshot::analysis::warm`] on a thread of its own at the lowest priority: what the model
/// file does not keep, worked out off the requests' path (after a load, after an upload's
/// model write).
pub(super) async fn warm(loaded: Arc<Loaded>) -> anyhow::Result<()> {
    crate::background::run("memscope-warm", move || {
        snapshot::analysis::warm(&loaded.snap, &loaded.index)
    })
    .await
}

/// What the model file does not keep (each device's labels, the frees that waited), worked out
/// after a load at the lowest priority: the segment view's first state after a reopen otherwise
/// found the labels itself (0.17–0.23 s on a 12M-event trace, beside the page building itself).
/// A request that needs one meanwhile waits for this work rather than repeating it.
fn warm_later(loaded: Arc<Loaded>) {
    tokio::spawn(async move {
        let t0 = Instant::now();
        match warm(loaded).await {
            Ok(()) => tracing::debug!(
                warm_ms = t0.elapsed().as_millis() as u64,
                "derived views warmed after a load"
            ),
            Err(e) => tracing::warn!(error = %e, "could not warm the derived views after a load"),
        }
    });
}

/// Reads a snapshot file and indexes its traces while it parses (`snapshot::read_file_indexed`):
/// a big one is read from disk on a second thread and its trace table and index built on a
/// third, so the index is ready a small constant after the last byte instead of a pass over the
/// trace after it (0.5 s on a 1 GB file, bench/README.md, issue 41).
pub fn read_snapshot_file(
    path: &std::path::Path,
) -> anyhow::Result<(snapshot::Snapshot, snapshot::analysis::Index)> {
    let file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    Ok(snapshot::read_file_indexed(file, size)?)
}
