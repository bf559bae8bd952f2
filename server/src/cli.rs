//! Command-line flags and what each subcommand does.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// memscope: a GPU memory observatory for PyTorch.
#[derive(Debug, Parser)]
#[command(name = "memscope", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Analyse a PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot` pickle, plain or
    /// gzip/zstd/xz compressed, or its JSON form) and print a report.
    Analyze(AnalyzeArgs),
    /// Compare two snapshots (B against A): headline figures, memory by call site at each peak,
    /// leak suspects new or gone. Call sites are matched by file, line and function.
    Diff(DiffArgs),
    /// What if: replay the snapshot's trace through a model of PyTorch's caching allocator under
    /// other PYTORCH_CUDA_ALLOC_CONF settings (the recorded ones first, as a check) and rank them
    /// by peak reserved memory, OOM or not under the limit.
    Whatif(WhatifArgs),
    /// Memory by category at one moment: every live allocation labelled parameter, gradient,
    /// optimizer_state, activation, input, temporary, autograd_detail, cuda_graph or unknown,
    /// with the rule that decided and a confidence, and the bytes per category.
    Categories(CategoriesArgs),
    /// Will it fit: peak memory and OOM at sizes never recorded (a larger batch, a longer
    /// sequence), from two or three recordings of the same program at small sizes
    /// (`a.pickle=8 b.pickle=16`): their requests matched and fitted against the size, then
    /// replayed through the allocator model at each size asked (or, with a limit and no size,
    /// searched for the largest that fits).
    Predict(PredictArgs),
    /// Run the dashboard server: the JSON API under /api, with an embedded SQLite library.
    Serve(crate::config::ServeArgs),
}

#[derive(Debug, clap::Args)]
pub struct PredictArgs {
    /// Recordings as FILE=SIZE (the batch size or sequence length each was made at), or one
    /// folder of them whose names differ in one number, the size (b8.pickle, b16.pickle).
    #[arg(required = true, num_args = 1..)]
    pub recordings: Vec<String>,
    /// A size to predict (repeat for several; none: search the largest that fits the limit).
    #[arg(long = "size")]
    pub sizes: Vec<u64>,
    /// Memory the process may use, in bytes.
    #[arg(long)]
    pub limit_bytes: Option<u64>,
    /// What --limit-bytes is: `fraction` (torch.cuda.set_per_process_memory_fraction's
    /// allowance) or `device` (what the device can give the process).
    #[arg(long, default_value = "device", value_parser = ["device", "fraction"])]
    pub limit_kind: String,
    /// A GPU whose total memory is the limit (e.g. "H100"): the first known model whose name
    /// holds it.
    #[arg(long)]
    pub gpu: Option<String>,
    /// The allocator setting to replay under, as PYTORCH_CUDA_ALLOC_CONF takes it.
    #[arg(long, default_value = "")]
    pub alloc_conf: String,
    /// The device of the recordings (default: the one that held the most memory).
    #[arg(long)]
    pub device: Option<i32>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct CategoriesArgs {
    /// The snapshot file; `-` reads standard input.
    pub file: PathBuf,
    /// The moment: after this many events of the device's trace (default: the peak of live
    /// bytes; the trace's length is the snapshot's own moment).
    #[arg(long)]
    pub at: Option<u32>,
    /// The device (default: the one that held the most memory).
    #[arg(long)]
    pub device: Option<i32>,
    /// Only allocations of this category (e.g. `activation`).
    #[arg(long)]
    pub category: Option<String>,
    /// Allocations to list in the human report, largest first.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Print one JSON object (every live allocation) instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct WhatifArgs {
    /// The snapshot file; `-` reads standard input.
    pub file: PathBuf,
    /// A setting to try, as PYTORCH_CUDA_ALLOC_CONF takes it (repeat for several; "" is
    /// PyTorch's defaults). Without any: a built-in set of candidates.
    #[arg(long = "alloc-conf")]
    pub alloc_conf: Vec<String>,
    /// Memory the device could give the process, in bytes (default: what the trace's OOM
    /// implies, else no limit).
    #[arg(long)]
    pub limit_bytes: Option<u64>,
    /// What --limit-bytes is: `device` (what the device could give the process: a new segment
    /// fails when it does not fit) or `fraction` (the allowed bytes of
    /// torch.cuda.set_per_process_memory_fraction, fraction × device total: checked against each
    /// new segment's allocation size, as PyTorch does).
    #[arg(long, default_value = "device", value_parser = ["device", "fraction"])]
    pub limit_kind: String,
    /// The device to replay (default: the one that held the most memory).
    #[arg(long)]
    pub device: Option<i32>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The baseline snapshot (A).
    pub a: PathBuf,
    /// The snapshot compared with it (B).
    pub b: PathBuf,
    /// Print one JSON object (the same as `GET /api/diff/A/B`, without names) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Call sites to list.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// The device of A to compare (default: the one that held the most memory).
    #[arg(long)]
    pub device_a: Option<i32>,
    /// The device of B to compare (default: the one that held the most memory).
    #[arg(long)]
    pub device_b: Option<i32>,
}

#[derive(Debug, clap::Args)]
pub struct AnalyzeArgs {
    /// The snapshot file (`-` reads standard input); or a folder of per-rank snapshots, or
    /// several files: the ranks of one run side by side (ranks from `rank{N}` in the file names,
    /// else the files' order by name).
    #[arg(required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// Print one JSON object instead of the human report.
    #[arg(long)]
    pub json: bool,
    /// Total memory of the device in bytes (e.g. from nvidia-smi), so OOM reports can tell memory
    /// held outside PyTorch apart from PyTorch's own.
    #[arg(long, env = "MEMSCOPE_DEVICE_TOTAL_BYTES")]
    pub device_total_bytes: Option<u64>,
    /// Leak suspects to list in the human report.
    #[arg(long, default_value_t = 5)]
    pub top: usize,
}

/// Snapshot files in a folder (not its subfolders), by name: what `analyze DIR` reads.
fn snapshot_files(dir: &std::path::Path) -> anyhow::Result<Vec<PathBuf>> {
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

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Analyze(args) => analyze(args),
        Command::Diff(args) => diff(args),
        Command::Whatif(args) => whatif(args),
        Command::Categories(args) => categories(args),
        Command::Predict(args) => predict(args),
        Command::Serve(args) => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_env("MEMSCOPE_LOG")
                        .unwrap_or_else(|_| "info".into()),
                )
                .init();
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?
                .block_on(crate::serve::serve(args))
        }
    }
}

/// Reads a snapshot file (`-`: standard input).
fn read(path: &std::path::Path) -> anyhow::Result<snapshot::Snapshot> {
    let name = path.display().to_string();
    if name == "-" {
        return snapshot::read(std::io::stdin().lock())
            .with_context(|| "cannot read standard input");
    }
    File::open(path).with_context(|| format!("cannot open {name}"))?;
    crate::library::models::read_snapshot_file(path).with_context(|| format!("cannot read {name}"))
}

fn diff(args: DiffArgs) -> anyhow::Result<()> {
    let (a, b) = (read(&args.a)?, read(&args.b)?);
    let (ia, ib) = (
        snapshot::analysis::Index::new(&a),
        snapshot::analysis::Index::new(&b),
    );
    let device = |index: &snapshot::analysis::Index,
                  path: &std::path::Path,
                  chosen: Option<i32>| {
        match chosen {
            Some(c) => index.device(c).map(|d| d.device).with_context(|| {
                let have: Vec<String> = index.devices.iter().map(|d| d.device.to_string()).collect();
                format!(
                    "{} has nothing on device {c} (devices with a trace or segments: {})",
                    path.display(),
                    if have.is_empty() { "none".to_string() } else { have.join(", ") }
                )
            }),
            None => index.default_device().map(|d| d.device).with_context(|| {
                format!(
                    "{} has no device trace (record history with torch.cuda.memory._record_memory_history)",
                    path.display()
                )
            }),
        }
    };
    let side = |snap, index, path, chosen| -> anyhow::Result<snapshot::analysis::Side> {
        Ok(snapshot::analysis::Side {
            snap,
            index,
            device: device(index, path, chosen)?,
        })
    };
    let d = snapshot::analysis::compare(
        side(&a, &ia, &args.a, args.device_a)?,
        side(&b, &ib, &args.b, args.device_b)?,
        if args.json { 200 } else { args.top },
    );
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &crate::convert::diff(d))?;
        writeln!(out)?;
    } else {
        let names = (args.a.display().to_string(), args.b.display().to_string());
        out.write_all(crate::text::render_diff(&names.0, &names.1, &d).as_bytes())?;
    }
    Ok(())
}

fn analyze(args: AnalyzeArgs) -> anyhow::Result<()> {
    let file = match args.files.as_slice() {
        [one] if !one.is_dir() => one.clone(),
        _ => return analyze_run(args),
    };
    let name = file.display().to_string();
    let snap = read(&file)?;
    let options = snapshot::analysis::Options {
        device_total_bytes: args.device_total_bytes,
    };
    let (index, report) = snapshot::analysis::analyze(&snap, &options);
    // The process ends after the report: handing a GB-scale model back to the allocator page by
    // page would cost more than the whole analyses (0.3 s of unmapping for a 12M-event trace).
    std::mem::forget((snap, index));
    // The same object `GET /api/snapshots/{id}` answers, as JSON or in words.
    let report = crate::convert::report(report);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.json {
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        out.write_all(crate::text::render(&name, &report, args.top).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

/// Several snapshots, or a folder of them, as the ranks of one run.
fn analyze_run(args: AnalyzeArgs) -> anyhow::Result<()> {
    let (id, files) = match args.files.as_slice() {
        [dir] => (
            dir.canonicalize()
                .ok()
                .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "run".into()),
            snapshot_files(dir)?,
        ),
        files => {
            // The folder the files share names the run.
            let parents: Vec<Option<PathBuf>> = files
                .iter()
                .map(|f| {
                    f.canonicalize()
                        .ok()
                        .and_then(|p| p.parent().map(PathBuf::from))
                })
                .collect();
            let shared = parents.windows(2).all(|w| w[0] == w[1]);
            let id = parents[0]
                .as_ref()
                .filter(|_| shared)
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "run".into());
            (id, files.to_vec())
        }
    };
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
    let options = snapshot::analysis::Options {
        device_total_bytes: args.device_total_bytes,
    };
    let mut loaded = Vec::with_capacity(files.len());
    for (i, f) in files.iter().enumerate() {
        let snap = read(f)?;
        let (index, report) = snapshot::analysis::analyze(&snap, &options);
        loaded.push((
            ranks[i],
            f.display().to_string(),
            snap,
            index,
            crate::convert::report(report),
        ));
    }
    loaded.sort_by_key(|l| l.0);
    let members: Vec<crate::runs::Member> = loaded
        .iter()
        .map(|(rank, name, snap, index, report)| crate::runs::Member {
            rank: *rank,
            snapshot_id: name.clone(),
            name: name.clone(),
            earlier: 0,
            report,
            snap,
            index,
        })
        .collect();
    let (report, _) = crate::runs::report(&id, &members, 1);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.json {
        // The same object `GET /api/runs/{id}` answers.
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        let how = if by_name {
            "from the file names"
        } else {
            "by the files' order (no rank{N} in every name)"
        };
        out.write_all(crate::text::render_run(&report, how).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

fn whatif(args: WhatifArgs) -> anyhow::Result<()> {
    let name = args.file.display().to_string();
    let snap = read(&args.file)?;
    let index = snapshot::analysis::Index::new(&snap);
    let options = snapshot::analysis::whatif::Options {
        device: args.device,
        alloc_confs: args.alloc_conf,
        limit_bytes: args.limit_bytes,
        limit_is_fraction: args.limit_kind == "fraction",
        curves: false,
        cancel: Default::default(),
    };
    let w = snapshot::analysis::whatif::whatif(&snap, &index, &options)
        .with_context(|| format!("cannot replay {name}"))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        // The same object `GET /api/snapshots/{id}/whatif` answers.
        serde_json::to_writer(&mut out, &crate::convert::whatif(w.clone()))?;
        writeln!(out)?;
    } else {
        out.write_all(crate::text::render_whatif(&name, &w).as_bytes())?;
    }
    Ok(())
}

fn categories(args: CategoriesArgs) -> anyhow::Result<()> {
    let only = match args.category.as_deref() {
        None => None,
        Some(c) => Some(api::Category::parse(c).with_context(|| {
            format!(
                "unknown category {c:?}: one of {}",
                api::Category::ALL.map(|c| c.as_str()).join(", ")
            )
        })?),
    };
    let name = args.file.display().to_string();
    let snap = read(&args.file)?;
    let index = snapshot::analysis::Index::new(&snap);
    let d = match args.device {
        Some(c) => index
            .device(c)
            .with_context(|| format!("{name} has no trace for device {c}"))?,
        None => index.default_device().with_context(|| {
            format!("{name} has no trace: categories are read from the allocation history")
        })?,
    };
    anyhow::ensure!(
        d.len > 0,
        "{name} has no trace for device {}: categories are read from the allocation history (record it with torch.cuda.memory._record_memory_history)",
        d.device
    );
    let at = args.at.unwrap_or(d.peak_position);
    anyhow::ensure!(
        at <= d.len,
        "--at {at} is past the trace's end: device {} has {} events",
        d.device,
        d.len
    );
    let c = snapshot::analysis::categories::at(&snap, &index, d, at);
    let view = crate::convert::categories_at(c, &snap, &index, only, None);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.json {
        // The same object `GET /api/snapshots/{id}/categories` answers (every allocation).
        serde_json::to_writer(&mut out, &view)?;
        writeln!(out)?;
    } else {
        let peak = args.at.is_none().then_some(d.peak_position);
        out.write_all(crate::text::render_categories(&name, &view, peak, args.top).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

/// A folder's snapshot files as FILE=SIZE, the sizes read from their names.
fn recordings_in(dir: &std::path::Path) -> anyhow::Result<Vec<String>> {
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
    let sizes = snapshot::analysis::whatif::predict::guess_sizes(&names);
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

fn predict(args: PredictArgs) -> anyhow::Result<()> {
    let mut args = args;
    if let [one] = args.recordings.as_slice()
        && std::path::Path::new(one).is_dir()
    {
        args.recordings = recordings_in(std::path::Path::new(one))?;
    }
    let mut parsed = Vec::new();
    for r in &args.recordings {
        let (file, size) = r.rsplit_once('=').with_context(|| {
            format!("{r:?}: give each recording as FILE=SIZE (e.g. run8.pickle=8)")
        })?;
        let size: u64 = size
            .parse()
            .with_context(|| format!("{r:?}: the size after '=' must be a whole number"))?;
        let snap = read(std::path::Path::new(file))?;
        parsed.push((file.to_string(), size, snap));
    }
    let indexes: Vec<snapshot::analysis::Index> = parsed
        .iter()
        .map(|(_, _, s)| snapshot::analysis::Index::new(s))
        .collect();
    let mut recordings = Vec::new();
    for ((file, size, snap), index) in parsed.iter().zip(&indexes) {
        let device = match args.device {
            Some(d) => d,
            None => {
                index
                    .default_device()
                    .with_context(|| format!("{file} has no trace to learn from"))?
                    .device
            }
        };
        recordings.push(snapshot::analysis::whatif::predict::Recording {
            snap,
            index,
            device,
            size: *size as f64,
        });
    }
    let ask = crate::predict::Ask {
        sizes: args.sizes.clone(),
        search: args.sizes.is_empty(),
        limit_bytes: args.limit_bytes,
        kind: api::LimitKind::parse(&args.limit_kind).unwrap_or_default(),
        gpu: args.gpu.clone(),
        alloc_conf: args.alloc_conf.clone(),
    };
    let view = crate::predict::answer(&recordings, &ask).map_err(|e| anyhow::anyhow!(e))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.json {
        serde_json::to_writer(&mut out, &view)?;
        writeln!(out)?;
    } else {
        out.write_all(crate::text::render_predict(&view).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}
