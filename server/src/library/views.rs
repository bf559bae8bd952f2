//! Stored first views: the timeline answers for a whole trace (no window), kept on disk next to
//! the model file once computed, so a snapshot page opened after a restart draws without waiting
//! for the model to load.
//!
//! Why: loading a model means reading its file and rebuilding the index, ~0.45 s for a 12M-event
//! snapshot on a 2-core machine, and the page's first two requests (the timeline and its overview,
//! both for the whole trace) both wait for it. Their answers depend only on the snapshot's bytes,
//! the query and this build, so they are computed once and read back (milliseconds, whatever the
//! snapshot's size). Serving one starts loading the model in the background, so the next
//! question (a zoom, an event's state) finds it loaded.
//!
//! Invariants: a stored answer is the bytes the engine gave for the same query (written
//! atomically: a temporary file, then a rename); it is named by the server's version, so another
//! build never serves one (a stale file is ignored and replaced, and removed with its snapshot);
//! one that does not read as JSON is recomputed. At most [`MAX_PER_SNAPSHOT`] are kept per
//! snapshot (the dashboard asks for two; other clients' bucket counts are answered, not stored).

use std::path::{Path, PathBuf};

/// Stored answers per snapshot, at most.
pub const MAX_PER_SNAPSHOT: usize = 8;

/// The name a whole-trace timeline query is stored under, or `None` for a query with a window
/// (those are not stored). Defaults are spelled out, so `buckets=1000` and no `buckets` share one.
pub fn timeline_key(q: &api::TimelineQuery) -> Option<String> {
    if q.from.zip(q.to).is_some() || q.categories == Some(true) {
        return None;
    }
    let device = q.device.map_or("default".to_string(), |d| d.to_string());
    let axis = q.axis.map_or("default".to_string(), |a| {
        serde_json::to_string(&a)
            .unwrap_or_default()
            .trim_matches('"')
            .to_string()
    });
    let (buckets, allocations) = (q.buckets_or_default(), q.allocations_or_default());
    Some(format!(
        "{}timeline-d{device}-a{axis}-b{buckets}-n{allocations}",
        prefix()
    ))
}

/// What names this build's stored answers: the server's version and the answers' own schema
/// ([`api::REPORT_VERSION`]: a first view fitted by other rules is not served after an upgrade
/// that keeps the package version).
fn prefix() -> String {
    format!("v{}.{}-", env!("CARGO_PKG_VERSION"), api::REPORT_VERSION)
}

fn file(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("{key}.json"))
}

/// The stored answer for `key` in `dir` (a snapshot's views folder), when there is one that reads
/// as JSON.
pub async fn read(dir: &Path, key: &str) -> Option<Vec<u8>> {
    let bytes = tokio::fs::read(file(dir, key)).await.ok()?;
    match serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
        Ok(_) => Some(bytes),
        Err(e) => {
            tracing::warn!(error = %e, key, "a stored view does not read; computing it again");
            None
        }
    }
}

/// Stores `answer` for `key` in `dir` unless the folder already holds [`MAX_PER_SNAPSHOT`]
/// answers of this build. Failures are logged, not returned: the answer was given either way.
pub fn write(dir: &Path, key: &str, answer: &[u8]) {
    let store = || -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let prefix = prefix();
        let mut kept = 0;
        for e in std::fs::read_dir(dir)?.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if !name.starts_with(&prefix) {
                // Another build's answer: never served by this one.
                let _ = std::fs::remove_file(e.path());
            } else if name.ends_with(".json") {
                kept += 1;
            }
        }
        if kept >= MAX_PER_SNAPSHOT {
            return Ok(());
        }
        let target = file(dir, key);
        let part = target.with_extension(format!("part-{}", crate::db::instance_id()));
        std::fs::write(&part, answer)?;
        std::fs::rename(&part, &target)
    };
    if let Err(e) = store() {
        tracing::warn!(error = %e, dir = %dir.display(), "could not store a first view");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_trace_queries_have_a_key_and_defaults_share_it() {
        let whole = api::TimelineQuery::default();
        let spelled = api::TimelineQuery {
            buckets: Some(1000),
            allocations: Some(2000),
            ..Default::default()
        };
        assert_eq!(timeline_key(&whole), timeline_key(&spelled));
        let window = api::TimelineQuery {
            from: Some(1.0),
            to: Some(2.0),
            ..Default::default()
        };
        assert_eq!(timeline_key(&window), None);
        let other = api::TimelineQuery {
            buckets: Some(600),
            allocations: Some(0),
            device: Some(1),
            axis: Some(api::Axis::Event),
            ..Default::default()
        };
        let key = timeline_key(&other).unwrap();
        assert!(key.ends_with("-timeline-d1-aevent-b600-n0"), "{key}");
    }

    #[test]
    fn a_stored_view_reads_back_and_a_broken_one_does_not() {
        let dir = std::env::temp_dir().join(format!("memscope-views-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        write(&dir, "k", br#"{"a": 1}"#);
        assert_eq!(rt.block_on(read(&dir, "k")).unwrap(), br#"{"a": 1}"#);
        std::fs::write(file(&dir, "k"), b"{\"a\": ").unwrap();
        assert_eq!(rt.block_on(read(&dir, "k")), None);
        assert_eq!(rt.block_on(read(&dir, "missing")), None);
        // Another build's answers are cleared when this one stores, and the cap holds.
        std::fs::write(dir.join("v0.0.0-old.json"), b"{}").unwrap();
        let this = prefix();
        for i in 0..MAX_PER_SNAPSHOT + 3 {
            write(&dir, &format!("{this}{i}"), b"{}");
        }
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect();
        assert!(!names.iter().any(|n| n.starts_with("v0.0.0")), "{names:?}");
        assert_eq!(
            names.iter().filter(|n| n.starts_with(&this)).count(),
            MAX_PER_SNAPSHOT
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
