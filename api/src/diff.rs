//! Two snapshots compared (`GET /api/diff/{a}/{b}`, what `memscope diff --json` prints plus both
//! names): call sites matched by file, line and function, so two runs of the same code line up.

use serde::{Deserialize, Serialize};

use crate::Frame;

/// `GET /api/diff/{a}/{b}` query: which device of each side (default: the first with a trace).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DiffQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_a: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_b: Option<i32>,
}

/// A headline figure in both snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FigureDelta {
    /// What it is, for people (`peak requested bytes`, `segments`, …).
    pub name: String,
    pub a: u64,
    pub b: u64,
    /// `b - a`.
    pub delta: i64,
    /// Bytes (true) or a count.
    pub bytes: bool,
    /// What a change means: more memory, leaks or OOMs cost; more trace events or segments are
    /// neither better nor worse by themselves (a longer recording is not a regression).
    #[serde(default)]
    pub change: ChangeMeaning,
}

/// How a change of a figure reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeMeaning {
    /// Up is worse, down is better.
    #[default]
    Cost,
    /// Neither: shown without a colour.
    Neutral,
}

/// Memory one call site holds at each snapshot's peak.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteDelta {
    pub site: Option<Frame>,
    pub a_bytes: u64,
    pub b_bytes: u64,
    /// `b_bytes - a_bytes`.
    pub delta_bytes: i64,
    pub a_count: u32,
    pub b_count: u32,
    /// The largest stack of the site, from the side that holds more.
    pub frames: Vec<Frame>,
}

/// A leak suspect's call site and what each snapshot says of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeakDelta {
    pub site: Option<Frame>,
    /// Bytes alive at the end from this site where it is a suspect in that snapshot, else none.
    pub a_bytes: Option<u64>,
    pub b_bytes: Option<u64>,
    pub frames: Vec<Frame>,
}

/// A snapshot named in a diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRef {
    pub id: String,
    pub name: String,
}

/// `memscope diff --json`: snapshot `b` against snapshot `a`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diff {
    pub device_a: i32,
    pub device_b: i32,
    pub figures: Vec<FigureDelta>,
    /// Call sites whose bytes at the peak changed, largest change first.
    pub sites_at_peak: Vec<SiteDelta>,
    /// How many call sites hold the same at both peaks.
    pub unchanged_sites: usize,
    pub leaks: Vec<LeakDelta>,
    /// What was alive by category at each side's peak, when both have a trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub categories_at_peak: Option<CategoriesDelta>,
}

/// Bytes per category at A's peak and at B's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CategoriesDelta {
    pub a: crate::categories::CategoryBytes,
    pub b: crate::categories::CategoryBytes,
}

/// `GET /api/diff/{a}/{b}`: the diff and both snapshots' ids and names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiffAnswer {
    #[serde(flatten)]
    pub diff: Diff,
    pub a: SnapshotRef,
    pub b: SnapshotRef,
}
