//! `memscope-collector`: flags, then `collector::run`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use clap::Parser;
use collectors::{collector, relay, sender, source, spool};

/// Collects GPU memory readings on this host and ships them to a memscope server.
#[derive(Debug, Parser)]
#[command(name = "memscope-collector", version)]
struct Args {
    /// The memscope server, e.g. http://127.0.0.1:8080.
    #[arg(long, env = "MEMSCOPE_SERVER")]
    server: String,
    /// This collector's token (the server's --collector-token NAME=TOKEN).
    #[arg(long, env = "MEMSCOPE_COLLECTOR_TOKEN")]
    token: String,
    /// This collector's name (the NAME of its token); default: the host name.
    #[arg(long, env = "MEMSCOPE_COLLECTOR_NAME")]
    name: Option<String>,
    /// The host its readings are of, as the server shows it: the token's NAME, which the server
    /// requires (default: --name).
    #[arg(long, env = "MEMSCOPE_HOST")]
    host: Option<String>,
    /// Sampling interval in milliseconds (100 works).
    #[arg(long, env = "MEMSCOPE_INTERVAL_MS", default_value_t = 1000)]
    interval_ms: u64,
    /// Readings per batch.
    #[arg(long, default_value_t = 10)]
    readings_per_batch: usize,
    /// Spool folder (unsent batches survive restarts here); default
    /// `$XDG_STATE_HOME/memscope/spool`, else `~/.local/state/memscope/spool`. Give each
    /// collector on a host its own.
    #[arg(long, env = "MEMSCOPE_SPOOL_DIR")]
    spool_dir: Option<PathBuf>,
    /// Spool size cap in bytes; the oldest batches are dropped (and counted) beyond it.
    #[arg(long, default_value_t = 256 << 20)]
    spool_max_bytes: u64,
    /// Replay recorded NVML readings (a `*.nvml.json`) instead of reading NVML.
    #[arg(long)]
    replay: Option<PathBuf>,
    /// The folder in-process agents (`memscope_agent`, relay mode) leave their data in.
    #[arg(
        long,
        env = "MEMSCOPE_AGENT_DIR",
        default_value = "/tmp/memscope-agent"
    )]
    agent_dir: PathBuf,
    /// Exit when NVML is missing, instead of relaying agent data only.
    #[arg(long)]
    require_nvml: bool,
    /// Stop after this many readings (default: run until killed).
    #[arg(long)]
    readings: Option<u64>,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let src: Box<dyn source::Source> = match &args.replay {
        Some(p) => match source::Recorded::open(p) {
            Ok(r) => Box::new(r),
            Err(e) => {
                eprintln!("memscope-collector: {e:#}");
                return std::process::ExitCode::FAILURE;
            }
        },
        None => match source::Nvml::open() {
            Ok(n) => Box::new(n),
            Err(why) if args.require_nvml => {
                eprintln!("memscope-collector: {why}");
                return std::process::ExitCode::FAILURE;
            }
            Err(why) => {
                eprintln!(
                    "memscope-collector: {why}; relaying agent data from {} only",
                    args.agent_dir.display()
                );
                Box::new(source::NoGpu)
            }
        },
    };
    eprintln!("memscope-collector: {}", src.describe());
    let name = args.name.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/etc/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "localhost".into())
    });
    let cfg = collector::Config {
        host: args.host.clone().unwrap_or_else(|| name.clone()),
        name,
        interval: Duration::from_millis(args.interval_ms.max(10)),
        readings_per_batch: args.readings_per_batch.max(1),
        relay: Some(relay::Relay::new(&args.agent_dir)),
    };
    let spool_dir = args.spool_dir.clone().unwrap_or_else(spool::default_dir);
    let sp = spool::Spool::open(&spool_dir, args.spool_max_bytes);
    match &sp.disk_error {
        None => eprintln!(
            "memscope-collector: spool {} (id {}, {} batches waiting)",
            spool_dir.display(),
            sp.id(),
            sp.pending().map_or(0, |p| p.len())
        ),
        Some(why) => eprintln!(
            "memscope-collector: {why}; batches are kept in memory (id {}) until it can be written",
            sp.id()
        ),
    }
    let result = collector::run(
        cfg,
        src,
        sp,
        sender::Sender::new(&args.server, &args.token),
        args.readings,
        Arc::new(AtomicBool::new(false)),
    );
    match result {
        Ok((spooled, shipped)) => {
            eprintln!(
                "memscope-collector: {spooled} samples spooled, {} batches acknowledged, {} set aside",
                shipped.acked, shipped.set_aside
            );
            if let Some(why) = &shipped.gave_up {
                eprintln!("memscope-collector: gave up: {why}");
            }
            if shipped.set_aside > 0 {
                eprintln!(
                    "memscope-collector: {} batches were refused by the server and not delivered; they are kept under {}",
                    shipped.set_aside,
                    spool_dir.display()
                );
            }
            if shipped.delivered_all() {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("memscope-collector: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
