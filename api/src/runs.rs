//! A job's ranks as one run (`GET /api/runs`, `GET /api/runs/{id}`, `memscope analyze DIR
//! --json`): the snapshots that share a `job` tag, one per rank, on one aligned axis, with the
//! imbalance between ranks and the rank that ran out of memory first.

use serde::{Deserialize, Serialize};

use crate::diff::SiteDelta;
use crate::report::OomReport;

/// A rank of a run in the library's list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMember {
    pub rank: u32,
    pub snapshot_id: String,
    pub name: String,
    pub peak_bytes: u64,
    pub ooms: u64,
}

/// A run in the library (`GET /api/runs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The job: a run's permalink is `/runs/{id}`.
    pub id: String,
    /// The ranks, by rank (the latest snapshot of each).
    pub ranks: Vec<RunMember>,
    /// The newest upload among them.
    pub uploaded_at_ms: i64,
}

/// How the ranks were put on one axis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "by")]
pub enum Alignment {
    /// The ranks' own clocks (their traces overlap in time).
    Clock,
    /// The start of a step mark every rank has (`ProfilerStep#N`), at one instant.
    Mark { name: String },
    /// Each rank's first event, at one instant: times across ranks are not comparable.
    Start,
    /// Event positions (no times in the traces).
    Events,
}

impl Alignment {
    /// Whether the axis is time (µs) rather than event positions.
    pub fn is_time(&self) -> bool {
        !matches!(self, Alignment::Events)
    }
}

/// One rank of a run, its figures from its own report and on the run's axis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankRow {
    pub rank: u32,
    pub snapshot_id: String,
    pub name: String,
    pub device: i32,
    pub events: u32,
    /// First and last event on the run's axis (µs from the axis origin, or positions).
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub peak_live_bytes: u64,
    /// When the peak was, on the run's axis.
    pub peak_at: Option<i64>,
    pub peak_reserved_bytes: u64,
    /// At the snapshot.
    pub reserved_bytes: u64,
    /// Cached but unused at the snapshot (reserved − allocated): the fragmentation figure.
    pub cached_free_bytes: u64,
    pub largest_free_bytes: u64,
    pub leak_suspects: u64,
    /// Bytes still alive from the leak suspects.
    pub leak_bytes: u64,
    pub ooms: u64,
    /// The rank's first OOM on the run's axis.
    pub first_oom_at: Option<i64>,
    /// Other snapshots of the same rank in the job (older uploads).
    #[serde(default)]
    pub earlier_snapshots: u32,
}

/// The heaviest rank against the lightest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Imbalance {
    pub heaviest_rank: u32,
    pub lightest_rank: u32,
    pub max_peak_bytes: u64,
    pub min_peak_bytes: u64,
    /// `max / min` (`None` when the lightest peak is 0).
    pub ratio: Option<f64>,
    /// Call sites by what the heaviest rank holds at its peak more than the lightest at its
    /// own, largest difference first (`a` is the lightest, `b` the heaviest).
    pub sites: Vec<SiteDelta>,
    /// For people: the difference and where most of it comes from.
    pub summary: String,
}

/// The rank that ran out of memory first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedRank {
    pub rank: u32,
    pub snapshot_id: String,
    /// On the run's axis.
    pub at: i64,
    /// Its OOM, as its own report explains it.
    pub oom: OomReport,
    /// Whether "first" is known: false when the ranks' times are not comparable and more than
    /// one rank ran out of memory (then this is the first of them by rank).
    pub order_known: bool,
    /// The other ranks that ran out of memory, in order.
    pub then: Vec<u32>,
}

/// A run (`GET /api/runs/{id}`, `memscope analyze DIR --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub id: String,
    pub alignment: Alignment,
    /// The alignment in words.
    pub alignment_note: String,
    /// The axis origin on the first rank's own clock (µs), for reading times back.
    pub origin_us: i64,
    /// Ranks that ran out of memory first (in order), then the others by rank.
    pub ranks: Vec<RankRow>,
    pub imbalance: Option<Imbalance>,
    pub failed: Option<FailedRank>,
}

/// `GET /api/runs/{id}/series` query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSeriesQuery {
    /// Buckets on the axis (default 600, at most 4,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buckets: Option<u32>,
}

/// One rank's memory on the run's axis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankSeries {
    pub rank: u32,
    /// Per bucket the highest live bytes, `None` outside the rank's trace.
    pub live_bytes: Vec<Option<u64>>,
    /// Per bucket the highest reserved bytes.
    pub reserved_bytes: Vec<Option<u64>>,
}

/// `GET /api/runs/{id}/series`: every rank's live and reserved bytes in equal buckets of the
/// run's axis, ranks in the report's order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSeries {
    pub alignment: Alignment,
    /// The axis from the first event of any rank to the last (µs from the origin, or positions).
    pub from: i64,
    pub to: i64,
    pub bucket: i64,
    pub ranks: Vec<RankSeries>,
    /// Stretches of the axis where no rank has an event (each at least 5 % of the axis and
    /// 1 ms; none on the events axis), `[from, to]` on the axis.
    #[serde(default)]
    pub idle: Vec<(i64, i64)>,
}

/// The rank in a file name: `rank{N}` (`rank3_memory_snapshot.pickle`, `rank_3`, `rank-3`,
/// `Rank3`), where `rank` does not continue a word; the last such in the name (a folder of
/// ranks inside a path with another number is named by the file).
pub fn rank_in_name(name: &str) -> Option<u32> {
    let lower = name.to_ascii_lowercase();
    let b = lower.as_bytes();
    let mut found = None;
    let mut from = 0;
    while let Some(i) = lower[from..].find("rank").map(|i| i + from) {
        from = i + 4;
        if i > 0 && b[i - 1].is_ascii_alphabetic() {
            continue;
        }
        let mut j = i + 4;
        if matches!(b.get(j), Some(b'_' | b'-' | b'=')) {
            j += 1;
        }
        let digits = b[j..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits > 0 && digits <= 9 {
            found = lower[j..j + digits].parse().ok();
        }
    }
    found
}

/// Whether a file's name is a snapshot's: `.pickle`, `.pkl` or `.json`, optionally `.gz`, `.zst`
/// or `.xz` (what `memscope analyze DIR` reads, and what the dashboard uploads from a folder).
pub fn is_snapshot_file_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [".pickle", ".pkl", ".json"].iter().any(|ext| {
        ["", ".gz", ".zst", ".xz"]
            .iter()
            .any(|c| n.ends_with(&format!("{ext}{c}")))
    })
}

/// A snapshot's name without its suffixes (`.pickle`, `.pkl`, `.json`, each optionally
/// compressed): `run.pickle.gz` → `run`; other names as they are.
pub fn strip_snapshot_suffix(name: &str) -> &str {
    let lower = name.to_ascii_lowercase();
    for ext in [".pickle", ".pkl", ".json"] {
        for c in [".gz", ".zst", ".xz", ""] {
            let suffix = format!("{ext}{c}");
            if lower.ends_with(&suffix) && lower.len() > suffix.len() {
                return &name[..name.len() - suffix.len()];
            }
        }
    }
    name
}

/// The ranks of files taken together as one run: `rank{N}` from every name when the names give
/// each file a different rank (`true`), else the files' order (`false`).
pub fn ranks_of_names<S: AsRef<str>>(names: &[S]) -> (Vec<u32>, bool) {
    let named: Vec<Option<u32>> = names.iter().map(|n| rank_in_name(n.as_ref())).collect();
    let mut distinct: Vec<u32> = named.iter().flatten().copied().collect();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() == names.len() {
        (named.into_iter().flatten().collect(), true)
    } else {
        ((0..names.len() as u32).collect(), false)
    }
}

#[cfg(test)]
mod tests {
    use super::{is_snapshot_file_name, rank_in_name, ranks_of_names};

    #[test]
    fn snapshot_files_are_known_by_their_names() {
        for name in [
            "rank0.pickle",
            "a.PKL",
            "s.json.gz",
            "s.pickle.zst",
            "s.pickle.xz",
        ] {
            assert!(is_snapshot_file_name(name), "{name}");
        }
        for name in ["notes.txt", "s.pickle.bz2", "pickle"] {
            assert!(!is_snapshot_file_name(name), "{name}");
        }
    }

    #[test]
    fn ranks_come_from_names_only_when_every_name_has_its_own() {
        assert_eq!(
            ranks_of_names(&["rank1.pickle", "rank0.pickle"]),
            (vec![1, 0], true)
        );
        assert_eq!(
            ranks_of_names(&["a.pickle", "rank0.pickle"]),
            (vec![0, 1], false)
        );
        assert_eq!(
            ranks_of_names(&["rank0.pickle", "x/rank0.pickle"]),
            (vec![0, 1], false)
        );
    }

    #[test]
    fn ranks_are_read_from_file_names() {
        for (name, rank) in [
            ("rank3_memory_snapshot.pickle", Some(3)),
            ("iteration_10/rank12_memory_snapshot.pickle", Some(12)),
            ("oom_Rank-2.pickle.gz", Some(2)),
            ("rank_0.pickle", Some(0)),
            ("frank2.pickle", None),
            ("ranking.pickle", None),
            ("snapshot.pickle", None),
        ] {
            assert_eq!(rank_in_name(name), rank, "{name}");
        }
    }
}
