//! Runs: the snapshots of one job, one per rank, as one report. Which snapshots make a run and
//! which stands for each rank (the library's tags, or the CLI's files) is decided here, and the
//! engine's run analysis (`snapshot::analysis::run`) is joined with each rank's own stored report,
//! so the run page shows the same figures as each rank's page.
//!
//! Pure: the HTTP layer and the CLI load the models and reports and call in.

use std::collections::BTreeMap;
use std::sync::Mutex;

use snapshot::analysis::run::{self as engine, RankInput};
use snapshot::analysis::{Index, run::Alignment};
use snapshot::units::human_bytes;

use crate::convert;

/// A snapshot tagged `job=…`, as the library lists it.
#[derive(Debug, Clone)]
pub struct JobRow {
    pub job: String,
    pub id: String,
    pub name: String,
    pub uploaded_at_ms: i64,
    pub peak_bytes: u64,
    pub ooms: u64,
    /// Its `rank=` tag, if any.
    pub rank_tag: Option<String>,
}

/// The snapshot that stands for a rank, and how many older ones the job has of it.
#[derive(Debug, Clone)]
pub struct Chosen {
    pub rank: u32,
    pub row: JobRow,
    pub earlier: u32,
}

/// A snapshot's rank: its `rank=` tag, else `rank{N}` in its name (torchtitan's
/// `rank{N}_memory_snapshot.pickle`).
pub fn rank_of(row: &JobRow) -> Option<u32> {
    match &row.rank_tag {
        Some(t) => t.trim().parse().ok(),
        None => api::rank_in_name(&row.name),
    }
}

/// Per job, its ranks in order: the latest upload of each rank (the latest dump of a rank holds
/// the most of its history), with the count of older ones. Snapshots without a rank are not
/// part of a run.
pub fn choose(rows: Vec<JobRow>) -> BTreeMap<String, Vec<Chosen>> {
    let mut by_job: BTreeMap<String, BTreeMap<u32, Chosen>> = BTreeMap::new();
    for row in rows {
        let Some(rank) = rank_of(&row) else { continue };
        let ranks = by_job.entry(row.job.clone()).or_default();
        match ranks.get_mut(&rank) {
            None => {
                ranks.insert(
                    rank,
                    Chosen {
                        rank,
                        row,
                        earlier: 0,
                    },
                );
            }
            Some(c) => {
                c.earlier += 1;
                if (row.uploaded_at_ms, &row.id) > (c.row.uploaded_at_ms, &c.row.id) {
                    c.row = row;
                }
            }
        }
    }
    by_job
        .into_iter()
        .map(|(job, ranks)| (job, ranks.into_values().collect()))
        .collect()
}

/// The library's runs: jobs with two ranks or more, newest first.
pub fn list(rows: Vec<JobRow>) -> Vec<api::RunInfo> {
    let mut runs: Vec<api::RunInfo> = choose(rows)
        .into_iter()
        .filter(|(_, ranks)| ranks.len() >= 2)
        .map(|(job, ranks)| api::RunInfo {
            uploaded_at_ms: ranks
                .iter()
                .map(|c| c.row.uploaded_at_ms)
                .max()
                .unwrap_or(0),
            ranks: ranks
                .into_iter()
                .map(|c| api::RunMember {
                    rank: c.rank,
                    snapshot_id: c.row.id,
                    name: c.row.name,
                    peak_bytes: c.row.peak_bytes,
                    ooms: c.row.ooms,
                })
                .collect(),
            id: job,
        })
        .collect();
    runs.sort_by(|a, b| {
        b.uploaded_at_ms
            .cmp(&a.uploaded_at_ms)
            .then(a.id.cmp(&b.id))
    });
    runs
}

/// One rank with everything the run report reads.
pub struct Member<'a> {
    pub rank: u32,
    pub snapshot_id: String,
    pub name: String,
    pub earlier: u32,
    /// Its own report (stored at upload, or the CLI's).
    pub report: &'a api::Report,
    pub snap: &'a snapshot::Snapshot,
    pub index: &'a Index,
}

/// The device a rank's figures are about: the one that held the most memory.
fn device_of(m: &Member) -> i32 {
    m.index.default_device().map_or(0, |d| d.device)
}

/// Call sites of the imbalance to list.
const IMBALANCE_SITES: usize = 10;

/// The run's report and its series in `buckets` buckets; `members` in rank order.
pub fn report(id: &str, members: &[Member], buckets: usize) -> (api::RunReport, api::RunSeries) {
    let inputs: Vec<RankInput> = members
        .iter()
        .map(|m| RankInput {
            rank: m.rank,
            snap: m.snap,
            index: m.index,
            device: device_of(m),
        })
        .collect();
    let run = engine::analyze_run(&inputs);
    let time_axis = run.alignment != Alignment::Events;
    let origin = run.ranks.iter().filter_map(|f| f.start).min().unwrap_or(0);
    let rel = |t: i64| t - origin;

    // Failing ranks first, in the order they ran out of memory, then the others by rank.
    let failing: Vec<usize> = run.oom_order.iter().map(|&(i, _)| i).collect();
    let order: Vec<usize> = failing
        .iter()
        .copied()
        .chain((0..members.len()).filter(|i| !failing.contains(i)))
        .collect();

    let rows: Vec<api::RankRow> = order
        .iter()
        .map(|&i| {
            let (m, f) = (&members[i], &run.ranks[i]);
            let frag = m
                .report
                .fragmentation
                .iter()
                .find(|d| d.device == f.device)
                .map(|d| &d.total);
            let leaks = m
                .report
                .leak_suspects
                .iter()
                .filter(|l| l.device == f.device);
            api::RankRow {
                rank: m.rank,
                snapshot_id: m.snapshot_id.clone(),
                name: m.name.clone(),
                device: f.device,
                events: f.events,
                start: f.start.map(rel),
                end: f.end.map(rel),
                peak_live_bytes: f.peak_live_bytes,
                peak_at: f.peak_at.map(rel),
                peak_reserved_bytes: f.peak_reserved_bytes,
                reserved_bytes: frag.map_or(m.report.reserved_bytes, |t| t.reserved_bytes),
                cached_free_bytes: frag.map_or(0, |t| t.external_bytes),
                largest_free_bytes: frag.map_or(0, |t| t.largest_free_bytes),
                leak_suspects: leaks.clone().count() as u64,
                leak_bytes: leaks.map(|l| l.bytes).sum(),
                ooms: f.ooms.len() as u64,
                first_oom_at: f.ooms.first().map(|&(_, t)| rel(t)),
                earlier_snapshots: m.earlier,
            }
        })
        .collect();

    let imbalance = engine::imbalance(&inputs, &run, usize::MAX).map(|d| {
        let (h, l) = (
            run.heaviest.expect("an imbalance has a heaviest rank"),
            run.lightest.expect("and a lightest"),
        );
        let (max, min) = (run.ranks[h].peak_live_bytes, run.ranks[l].peak_live_bytes);
        let mut sites: Vec<api::SiteDelta> = convert::diff(d)
            .sites_at_peak
            .into_iter()
            .filter(|s| s.delta_bytes > 0)
            .collect();
        sites.sort_by_key(|s| std::cmp::Reverse(s.delta_bytes));
        sites.truncate(IMBALANCE_SITES);
        let gap = max - min;
        let mut summary = format!(
            "Rank {} peaks at {}, rank {} at {}",
            members[h].rank,
            human_bytes(max),
            members[l].rank,
            human_bytes(min)
        );
        if min > 0 {
            summary += &format!(" ({:.2}×)", max as f64 / min as f64);
        }
        summary += ".";
        if let Some(top) = sites.first().filter(|_| gap > 0) {
            let site = top
                .site
                .as_ref()
                .map_or("an unattributed call site".to_string(), |f| f.short());
            summary += &format!(
                " At its peak, {site} holds {} more on rank {} ({:.0}% of the {} difference).",
                human_bytes(top.delta_bytes as u64),
                members[h].rank,
                100.0 * top.delta_bytes as f64 / gap as f64,
                human_bytes(gap)
            );
        }
        api::Imbalance {
            heaviest_rank: members[h].rank,
            lightest_rank: members[l].rank,
            max_peak_bytes: max,
            min_peak_bytes: min,
            ratio: (min > 0).then(|| max as f64 / min as f64),
            sites,
            summary,
        }
    });

    let failed = run.oom_order.first().and_then(|&(i, position)| {
        let (m, f) = (&members[i], &run.ranks[i]);
        // The rank's own report of that OOM (its page shows the same), matched by position.
        let oom = m
            .report
            .ooms
            .iter()
            .filter(|o| o.device == f.device)
            .min_by_key(|o| o.position.abs_diff(position))?
            .clone();
        Some(api::FailedRank {
            rank: m.rank,
            snapshot_id: m.snapshot_id.clone(),
            at: rel(f.ooms.first()?.1),
            oom,
            order_known: run.oom_order_known,
            then: run.oom_order[1..]
                .iter()
                .map(|&(j, _)| members[j].rank)
                .collect(),
        })
    });

    let s = engine::series(&inputs, &run, buckets);
    let series = api::RunSeries {
        alignment: convert::alignment(&run.alignment),
        from: rel(s.from),
        to: rel(s.to),
        bucket: s.bucket,
        ranks: order
            .iter()
            .map(|&i| api::RankSeries {
                rank: members[i].rank,
                live_bytes: s.ranks[i].iter().map(|p| p.map(|p| p.0)).collect(),
                reserved_bytes: s.ranks[i].iter().map(|p| p.map(|p| p.1)).collect(),
            })
            .collect(),
        idle: s.idle.iter().map(|&(a, b)| (rel(a), rel(b))).collect(),
    };
    let report = api::RunReport {
        id: id.to_string(),
        alignment: convert::alignment(&run.alignment),
        alignment_note: run.alignment_note,
        origin_us: if time_axis { origin } else { 0 },
        ranks: rows,
        imbalance,
        failed,
    };
    (report, series)
}

/// Computed runs: (job, its members' ids and older-upload counts, buckets) → report and series.
pub type Key = (String, Vec<(String, u32)>, u32);
pub type Computed = std::sync::Arc<(api::RunReport, api::RunSeries)>;

/// The last few computed runs. One computation at a time: the run page asks for the report and
/// the series at once, and the second waits for the first and finds it here.
#[derive(Debug, Default)]
pub struct RunCache(Mutex<Vec<(Key, Computed)>>, pub tokio::sync::Mutex<()>);

const CACHED_RUNS: usize = 4;

impl RunCache {
    pub fn get(&self, key: &Key) -> Option<Computed> {
        let mut v = self.0.lock().expect("run cache lock");
        let i = v.iter().position(|(k, _)| k == key)?;
        let hit = v.remove(i);
        let value = hit.1.clone();
        v.push(hit);
        Some(value)
    }
    pub fn put(&self, key: Key, value: Computed) {
        let mut v = self.0.lock().expect("run cache lock");
        v.retain(|(k, _)| k != &key);
        if v.len() >= CACHED_RUNS {
            v.remove(0);
        }
        v.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(job: &str, id: &str, name: &str, at: i64, rank: Option<&str>) -> JobRow {
        JobRow {
            job: job.into(),
            id: id.into(),
            name: name.into(),
            uploaded_at_ms: at,
            peak_bytes: 0,
            ooms: 0,
            rank_tag: rank.map(Into::into),
        }
    }

    #[test]
    fn a_run_is_a_job_with_ranks_from_tags_or_names_latest_per_rank() {
        let rows = vec![
            row("j", "a", "x.pickle", 1, Some("0")),
            row("j", "b", "rank1_memory_snapshot.pickle", 2, None),
            row("j", "c", "again.pickle", 3, Some("1")),
            row("j", "d", "no rank here.pickle", 4, None),
            row("solo", "e", "rank0.pickle", 5, None),
        ];
        let runs = list(rows.clone());
        assert_eq!(runs.len(), 1, "one rank is not a run: {runs:?}");
        let r = &runs[0];
        assert_eq!(r.id, "j");
        assert_eq!(
            r.ranks
                .iter()
                .map(|m| (m.rank, m.snapshot_id.as_str()))
                .collect::<Vec<_>>(),
            [(0, "a"), (1, "c")]
        );
        assert_eq!(r.uploaded_at_ms, 3);
        let chosen = choose(rows);
        assert_eq!(chosen["j"][1].earlier, 1);
    }
}
