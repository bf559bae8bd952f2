//! Command-line flags and what each subcommand does.

use std::fs::File;
use std::io::{Read, Write};
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
    /// Run the dashboard server: the JSON API under /api, with an embedded SQLite library.
    Serve(crate::config::ServeArgs),
}

#[derive(Debug, clap::Args)]
pub struct AnalyzeArgs {
    /// The snapshot file; `-` reads standard input.
    pub file: PathBuf,
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

fn analyze(args: AnalyzeArgs) -> anyhow::Result<()> {
    let name = args.file.display().to_string();
    let (reader, size): (Box<dyn Read>, u64) = if name == "-" {
        (Box::new(std::io::stdin().lock()), 0)
    } else {
        let file = File::open(&args.file).with_context(|| format!("cannot open {name}"))?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        (Box::new(file), size)
    };
    let snap = snapshot::read_sized(reader, size).with_context(|| format!("cannot read {name}"))?;
    let options = snapshot::analysis::Options {
        device_total_bytes: args.device_total_bytes,
    };
    let (_index, report) = snapshot::analysis::analyze(&snap, &options);
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        out.write_all(crate::text::render(&name, &report, args.top).as_bytes())?;
    }
    Ok(())
}
