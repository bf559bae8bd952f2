//! `memscope serve` settings: every flag has an environment variable, documented where declared.

use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "MEMSCOPE_ADDR", default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// Folder for the database (memscope.db), uploaded originals and model files; created if missing.
    #[arg(long, env = "MEMSCOPE_DATA_DIR", default_value = "./memscope-data")]
    pub data_dir: PathBuf,
    /// Largest upload accepted, in bytes (default 8 GiB).
    #[arg(long, env = "MEMSCOPE_MAX_UPLOAD_BYTES", default_value_t = 8 << 30)]
    pub max_upload_bytes: u64,
    /// Parsed snapshots kept in memory for queries (least recently used are dropped).
    #[arg(long, env = "MEMSCOPE_CACHED_SNAPSHOTS", default_value_t = 4)]
    pub cached_snapshots: usize,
    /// Collector tokens, `NAME=TOKEN` (repeat the flag, or comma-separate in the variable). A
    /// collector authenticates with `Authorization: Bearer TOKEN` and may only send batches under
    /// its NAME; any other token gets 401 and nothing is stored.
    #[arg(
        long = "collector-token",
        env = "MEMSCOPE_COLLECTOR_TOKENS",
        value_delimiter = ','
    )]
    pub collector_tokens: Vec<String>,
    /// Raw live samples are kept this long, then rolled up into one-minute min/max/mean rows.
    #[arg(long, env = "MEMSCOPE_RAW_RETENTION_HOURS", default_value_t = 48.0)]
    pub raw_retention_hours: f64,
    /// One-minute roll-ups (and live events) are kept this long.
    #[arg(long, env = "MEMSCOPE_ROLLUP_RETENTION_DAYS", default_value_t = 30.0)]
    pub rollup_retention_days: f64,
    /// Snapshots indexed at the same time (each takes one core while it runs).
    #[arg(long, env = "MEMSCOPE_INDEX_WORKERS", default_value_t = 2)]
    pub index_workers: usize,
}

impl ServeArgs {
    /// The collector name a bearer token belongs to.
    pub fn collector_for_token(&self, token: &str) -> Option<&str> {
        self.collector_tokens.iter().find_map(|entry| {
            let (name, t) = entry.split_once('=')?;
            (!t.is_empty() && t == token).then_some(name)
        })
    }

    /// The collector names that have a token (never the tokens).
    pub fn collector_names(&self) -> Vec<String> {
        self.collector_tokens
            .iter()
            .filter_map(|entry| entry.split_once('=').map(|(name, _)| name.to_string()))
            .collect()
    }

    /// Settings for tests: a given data dir, defaults otherwise.
    pub fn for_data_dir(data_dir: PathBuf) -> ServeArgs {
        ServeArgs {
            addr: "127.0.0.1:0".parse().expect("literal address"),
            data_dir,
            max_upload_bytes: 8 << 30,
            cached_snapshots: 4,
            collector_tokens: Vec::new(),
            index_workers: 2,
            raw_retention_hours: 48.0,
            rollup_retention_days: 30.0,
        }
    }
}
