//! Answers about snapshot files on this machine: what the CLI prints (`analyze`, `diff`, `whatif`,
//! `categories`, `predict`), what `memscope mcp`'s tools answer and what `memscope report`
//! renders. Each reads files through the engine (which executes nothing), runs one analysis and
//! returns the `api` type the HTTP API answers for the same question, so the three ways in give
//! the same figures as the dashboard.

use std::path::{Path, PathBuf};

use anyhow::Context;
use snapshot::Snapshot;
use snapshot::analysis::{self, Index, index::DeviceIndex};

/// A snapshot file read and indexed.
#[derive(Debug)]
pub struct Opened {
    /// The path as given (what messages name).
    pub name: String,
    pub snap: Snapshot,
    pub index: Index,
}

impl Opened {
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let (snap, index) = read(path)?;
        Ok(Self {
            name: path.display().to_string(),
            snap,
            index,
        })
    }

    /// Every analysis's report (the object `GET /api/snapshots/{id}` answers).
    pub fn report(&self, device_total_bytes: Option<u64>) -> api::Report {
        let options = analysis::Options { device_total_bytes };
        crate::convert::report(analysis::report(&self.snap, &self.index, &options))
    }

    /// The device asked for, else the one that held the most memory; it must have a trace.
    pub fn traced_device(&self, chosen: Option<i32>, what: &str) -> anyhow::Result<&DeviceIndex> {
        let name = &self.name;
        let d = match chosen {
            Some(c) => self.index.device(c).with_context(|| {
                let have: Vec<String> = self
                    .index
                    .devices
                    .iter()
                    .map(|d| d.device.to_string())
                    .collect();
                format!(
                    "{name} has nothing on device {c} (devices with a trace or segments: {})",
                    if have.is_empty() { "none".to_string() } else { have.join(", ") }
                )
            })?,
            None => self.index.default_device().with_context(|| {
                format!(
                    "{name} has no device trace: {what} is read from the allocation history (record it with torch.cuda.memory._record_memory_history)"
                )
            })?,
        };
        anyhow::ensure!(
            d.len > 0,
            "{name} has no trace for device {}: {what} is read from the allocation history (record it with torch.cuda.memory._record_memory_history)",
            d.device
        );
        Ok(d)
    }

    /// A position in a device's trace: the one asked for (at most the trace's length, the
    /// snapshot's own moment), else the peak of live bytes.
    pub fn position(&self, d: &DeviceIndex, at: Option<u32>) -> anyhow::Result<u32> {
        let at = at.unwrap_or(d.peak_position);
        anyhow::ensure!(
            at <= d.len,
            "position {at} is past the trace's end: device {} has {} events",
            d.device,
            d.len
        );
        Ok(at)
    }

    /// Memory by category at a position (default: the peak), every allocation or the largest
    /// `limit`.
    pub fn categories(
        &self,
        device: Option<i32>,
        at: Option<u32>,
        only: Option<api::Category>,
        limit: Option<usize>,
    ) -> anyhow::Result<api::CategoriesAt> {
        let d = self.traced_device(device, "memory by category")?;
        let at = self.position(d, at)?;
        let c = analysis::categories::at(&self.snap, &self.index, d, at);
        Ok(crate::convert::categories_at(
            c,
            &self.snap,
            &self.index,
            only,
            limit,
        ))
    }

    /// Memory by call stack as `q` asks (default: live at the peak), the largest `max_sites`.
    pub fn stacks(
        &self,
        q: &api::StacksQuery,
        max_sites: usize,
    ) -> anyhow::Result<api::StackReport> {
        let d = self.traced_device(q.device, "memory by stack")?;
        let at = self.position(d, q.position)?;
        let q = api::StacksQuery {
            position: Some(at),
            ..q.clone()
        };
        crate::convert::stacks_answer(&self.snap, &self.index, d.device, &q, max_sites)
            .with_context(|| format!("{} has no trace for device {}", self.name, d.device))
    }

    /// The trace replayed through the allocator model under other settings.
    pub fn whatif(
        &self,
        options: &analysis::whatif::Options,
    ) -> anyhow::Result<analysis::whatif::WhatIf> {
        analysis::whatif::whatif(&self.snap, &self.index, options)
            .with_context(|| format!("cannot replay {}", self.name))
    }
}

/// Reads a snapshot file (`-`: standard input), indexed while it parses.
pub fn read(path: &Path) -> anyhow::Result<(Snapshot, Index)> {
    let name = path.display().to_string();
    if name == "-" {
        return snapshot::read_indexed_with_limits(std::io::stdin().lock(), Default::default())
            .with_context(|| "cannot read standard input");
    }
    std::fs::File::open(path).with_context(|| format!("cannot open {name}"))?;
    crate::library::models::read_snapshot_file(path).with_context(|| format!("cannot read {name}"))
}

/// B compared with A, on the devices asked for (else each one's busiest), `max_sites` call
/// sites.
pub fn diff(
    a: &Opened,
    b: &Opened,
    devices: (Option<i32>, Option<i32>),
    max_sites: usize,
) -> anyhow::Result<analysis::Diff> {
    fn side(o: &Opened, chosen: Option<i32>) -> anyhow::Result<analysis::Side<'_>> {
        let device = match chosen {
            Some(_) => o.traced_device(chosen, "a diff")?.device,
            None => {
                o.index
                    .default_device()
                    .with_context(|| {
                        format!(
                            "{} has no device trace (record history with torch.cuda.memory._record_memory_history)",
                            o.name
                        )
                    })?
                    .device
            }
        };
        Ok(analysis::Side {
            snap: &o.snap,
            index: &o.index,
            device,
        })
    }
    Ok(analysis::compare(
        side(a, devices.0)?,
        side(b, devices.1)?,
        max_sites,
    ))
}

/// Snapshot files in a folder (not its subfolders), by name: what `analyze DIR` reads.
pub fn snapshot_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| api::is_snapshot_file_name(&n.to_string_lossy()))
        })
        .collect();
    files.sort();
    anyhow::ensure!(
        !files.is_empty(),
        "{} has no snapshot files (*.pickle, *.pkl, *.json, optionally .gz/.zst/.xz)",
        dir.display()
    );
    Ok(files)
}

/// The files of a run (one folder, or several files) and its name: the folder's, or the
/// folder the files share, else "run".
pub fn run_files(given: &[PathBuf]) -> anyhow::Result<(String, Vec<PathBuf>)> {
    let name_of = |p: Option<PathBuf>| {
        p.and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "run".into())
    };
    match given {
        [dir] if dir.is_dir() => Ok((name_of(dir.canonicalize().ok()), snapshot_files(dir)?)),
        files => {
            let parents: Vec<Option<PathBuf>> = files
                .iter()
                .map(|f| {
                    f.canonicalize()
                        .ok()
                        .and_then(|p| p.parent().map(PathBuf::from))
                })
                .collect();
            let shared = parents.windows(2).all(|w| w[0] == w[1]);
            let id = name_of(parents.first().cloned().flatten().filter(|_| shared));
            Ok((id, files.to_vec()))
        }
    }
}

/// A run's report (the object `GET /api/runs/{id}` answers) from its ranks' files, and whether
/// the ranks came from the file names (`rank{N}`) rather than their order.
pub fn run_report(
    id: &str,
    files: &[PathBuf],
    device_total_bytes: Option<u64>,
    open: &mut dyn FnMut(&Path) -> anyhow::Result<std::sync::Arc<Opened>>,
) -> anyhow::Result<(api::RunReport, bool)> {
    let names: Vec<String> = files
        .iter()
        .map(|f| {
            f.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let (ranks, by_name) = api::ranks_of_names(&names);
    let mut loaded = Vec::with_capacity(files.len());
    for (i, f) in files.iter().enumerate() {
        let o = open(f)?;
        let report = o.report(device_total_bytes);
        loaded.push((ranks[i], o, report));
    }
    loaded.sort_by_key(|l| l.0);
    let members: Vec<crate::runs::Member> = loaded
        .iter()
        .map(|(rank, o, report)| crate::runs::Member {
            rank: *rank,
            snapshot_id: o.name.clone(),
            name: o.name.clone(),
            earlier: 0,
            report,
            snap: &o.snap,
            index: &o.index,
        })
        .collect();
    Ok((crate::runs::report(id, &members, 1).0, by_name))
}

/// A folder's snapshot files as FILE=SIZE, the sizes read from their names.
pub fn recordings_in(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            [".pickle", ".pickle.gz", ".pickle.xz", ".pkl"]
                .iter()
                .any(|x| n.ends_with(x))
        })
        .map(|p| p.display().to_string())
        .collect();
    files.sort();
    let names: Vec<&str> = files
        .iter()
        .map(|f| f.rsplit('/').next().unwrap_or(f))
        .collect();
    let sizes = analysis::whatif::predict::guess_sizes(&names);
    if files.len() < 2 || sizes.iter().any(Option::is_none) {
        anyhow::bail!(
            "{}: {} snapshot files whose names do not differ in exactly one number (the size); give each recording as FILE=SIZE instead",
            dir.display(),
            files.len()
        );
    }
    Ok(files
        .iter()
        .zip(sizes)
        .map(|(f, s)| format!("{f}={}", s.unwrap_or(0)))
        .collect())
}

/// `FILE=SIZE` split.
pub fn parse_recording(r: &str) -> anyhow::Result<(String, u64)> {
    let (file, size) = r
        .rsplit_once('=')
        .with_context(|| format!("{r:?}: give each recording as FILE=SIZE (e.g. run8.pickle=8)"))?;
    let size: u64 = size
        .parse()
        .with_context(|| format!("{r:?}: the size after '=' must be a whole number"))?;
    Ok((file.to_string(), size))
}

/// Will it fit: the recordings (each opened, with the size it was made at) fitted and replayed
/// at the sizes asked.
pub fn predict(
    recordings: &[(&Opened, u64)],
    device: Option<i32>,
    ask: &crate::predict::Ask,
) -> anyhow::Result<api::PredictAnswer> {
    let mut inputs = Vec::new();
    for (o, size) in recordings {
        let device = match device {
            Some(d) => d,
            None => {
                o.index
                    .default_device()
                    .with_context(|| format!("{} has no trace to learn from", o.name))?
                    .device
            }
        };
        inputs.push(analysis::whatif::predict::Recording {
            snap: &o.snap,
            index: &o.index,
            device,
            size: *size as f64,
        });
    }
    crate::predict::answer(&inputs, ask).map_err(|e| anyhow::anyhow!(e))
}
