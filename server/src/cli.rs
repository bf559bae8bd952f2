//! Command-line flags and what each subcommand does.

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
    Serve(Box<crate::config::ServeArgs>),
    /// A report to share: one self-contained HTML file (charts inline, opens offline) or a
    /// Markdown summary for a GitHub issue, with the verdicts, the memory over the trace, the call
    /// sites at the peak, what the memory was, leaks, OOMs and what-if.
    Report(ReportArgs),
    /// Open snapshots in the dashboard: uploads them to the memscope server at --addr (starting
    /// one in this process if none answers there), prints what the analyses found and opens the
    /// browser on the snapshot, or on the run when several files or a folder of ranks are given.
    Open(crate::open::OpenArgs),
    /// A Model Context Protocol server on standard input and output, for coding agents: tools for
    /// the report, OOM verdicts, leak suspects, peak memory, memory by stack or category,
    /// what-if, predict, diff and a run's ranks, over snapshot files on this machine.
    Mcp,
}

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The snapshot file; `-` reads standard input.
    pub file: PathBuf,
    /// Where to write it (default: standard output).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// html or md (default: from the output's extension, else html).
    #[arg(long, value_parser = ["html", "md"])]
    pub format: Option<String>,
    /// Total memory of the device in bytes, for the OOM verdicts.
    #[arg(long, env = "MEMSCOPE_DEVICE_TOTAL_BYTES")]
    pub device_total_bytes: Option<u64>,
    /// Leave out the what-if replay (the slowest part on long traces).
    #[arg(long)]
    pub no_whatif: bool,
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

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Analyze(args) => analyze(args),
        Command::Diff(args) => diff(args),
        Command::Whatif(args) => whatif(args),
        Command::Categories(args) => categories(args),
        Command::Predict(args) => predict(args),
        Command::Report(args) => report(args),
        Command::Mcp => crate::mcp::serve(std::io::stdin().lock(), std::io::stdout().lock()),
        Command::Serve(args) => {
            logs("info");
            runtime()?.block_on(crate::serve::serve(*args))
        }
        Command::Open(args) => {
            logs("warn");
            runtime()?.block_on(crate::open::open(args))
        }
    }
}

/// Server logs on standard error, at `MEMSCOPE_LOG`'s level (else `default`).
fn logs(default: &str) {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MEMSCOPE_LOG")
                .unwrap_or_else(|_| default.into()),
        )
        .init();
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

use crate::local::{self, Opened};

fn diff(args: DiffArgs) -> anyhow::Result<()> {
    let (a, b) = (Opened::read(&args.a)?, Opened::read(&args.b)?);
    let top = if args.json { 200 } else { args.top };
    let d = local::diff(&a, &b, (args.device_a, args.device_b), top)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &crate::convert::diff(d))?;
        writeln!(out)?;
    } else {
        out.write_all(crate::text::render_diff(&a.name, &b.name, &d).as_bytes())?;
    }
    Ok(())
}

fn analyze(args: AnalyzeArgs) -> anyhow::Result<()> {
    let file = match args.files.as_slice() {
        [one] if !one.is_dir() => one.clone(),
        _ => return analyze_run(args),
    };
    let name = file.display().to_string();
    let (snap, index) = local::read(&file)?;
    let options = snapshot::analysis::Options {
        device_total_bytes: args.device_total_bytes,
    };
    let report = snapshot::analysis::report(&snap, &index, &options);
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
    let (id, files) = local::run_files(&args.files)?;
    let mut open = |p: &std::path::Path| Opened::read(p).map(std::sync::Arc::new);
    let (report, by_name) = local::run_report(&id, &files, args.device_total_bytes, &mut open)?;
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
    let o = Opened::read(&args.file)?;
    let options = snapshot::analysis::whatif::Options {
        device: args.device,
        alloc_confs: args.alloc_conf,
        limit_bytes: args.limit_bytes,
        limit_is_fraction: args.limit_kind == "fraction",
        curves: false,
        cancel: Default::default(),
        threads: 0,
        progress: None,
    };
    let w = o.whatif(&options)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        // The same object `GET /api/snapshots/{id}/whatif` answers.
        serde_json::to_writer(&mut out, &crate::convert::whatif(w.clone()))?;
        writeln!(out)?;
    } else {
        out.write_all(crate::text::render_whatif(&o.name, &w).as_bytes())?;
    }
    Ok(())
}

/// A category's name as the CLI and the MCP tools take it.
pub fn parse_category(c: &str) -> anyhow::Result<api::Category> {
    api::Category::parse(c).with_context(|| {
        format!(
            "unknown category {c:?}: one of {}",
            api::Category::ALL.map(|c| c.as_str()).join(", ")
        )
    })
}

fn categories(args: CategoriesArgs) -> anyhow::Result<()> {
    let only = args.category.as_deref().map(parse_category).transpose()?;
    let o = Opened::read(&args.file)?;
    let view = o.categories(args.device, args.at, only, None)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.json {
        // The same object `GET /api/snapshots/{id}/categories` answers (every allocation).
        serde_json::to_writer(&mut out, &view)?;
        writeln!(out)?;
    } else {
        let peak = match args.at {
            None => Some(
                o.traced_device(args.device, "memory by category")?
                    .peak_position,
            ),
            Some(_) => None,
        };
        out.write_all(crate::text::render_categories(&o.name, &view, peak, args.top).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

fn predict(args: PredictArgs) -> anyhow::Result<()> {
    let mut args = args;
    if let [one] = args.recordings.as_slice()
        && std::path::Path::new(one).is_dir()
    {
        args.recordings = local::recordings_in(std::path::Path::new(one))?;
    }
    let mut opened = Vec::new();
    for r in &args.recordings {
        let (file, size) = local::parse_recording(r)?;
        opened.push((Opened::read(std::path::Path::new(&file))?, size));
    }
    let recordings: Vec<(&Opened, u64)> = opened.iter().map(|(o, s)| (o, *s)).collect();
    let ask = crate::predict::Ask {
        sizes: args.sizes.clone(),
        search: args.sizes.is_empty(),
        limit_bytes: args.limit_bytes,
        kind: api::LimitKind::parse(&args.limit_kind).unwrap_or_default(),
        gpu: args.gpu.clone(),
        alloc_conf: args.alloc_conf.clone(),
    };
    let view = local::predict(&recordings, args.device, &ask)?;
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

fn report(args: ReportArgs) -> anyhow::Result<()> {
    let format = match (&args.format, &args.output) {
        (Some(f), _) => api::ReportFormat::parse(f).unwrap_or_default(),
        (None, Some(p)) if p.extension().is_some_and(|e| e == "md" || e == "markdown") => {
            api::ReportFormat::Md
        }
        _ => api::ReportFormat::Html,
    };
    let o = Opened::read(&args.file)?;
    let name = args
        .file
        .file_name()
        .map_or_else(|| o.name.clone(), |n| n.to_string_lossy().into_owned());
    let report = o.report(args.device_total_bytes);
    let shared = crate::report::gather(&name, &o.snap, &o.index, report, !args.no_whatif);
    let text = crate::report::render(&shared, format);
    match &args.output {
        Some(path) => {
            std::fs::write(path, &text)
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!(
                "memscope: wrote {} ({} KiB)",
                path.display(),
                text.len() / 1024
            );
        }
        None => std::io::stdout().lock().write_all(text.as_bytes())?,
    }
    Ok(())
}
