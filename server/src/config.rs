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
    /// A PostgreSQL database to keep the library and the live data in (`postgres://USER:PASSWORD@HOST:PORT/DB`),
    /// shared by every server started with it. Default: SQLite in the data folder. With
    /// several servers, the data folder must be one shared folder too (uploads' files live there).
    #[arg(long, env = "MEMSCOPE_DATABASE_URL")]
    pub database_url: Option<String>,
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
    /// API tokens: `TOKEN` or `write:TOKEN` (may upload, rename, retag, delete and read),
    /// `read:TOKEN` (may read). With a write token set, changing the library needs one; with a
    /// read token set, reading does too. Repeat the flag, or comma-separate in the variable.
    #[arg(long = "api-token", env = "MEMSCOPE_API_TOKENS", value_delimiter = ',')]
    pub api_tokens: Vec<String>,
    /// A file of API tokens, one per line: `write TOKEN` or `read TOKEN` (`#` starts a comment).
    #[arg(long, env = "MEMSCOPE_API_TOKENS_FILE")]
    pub api_tokens_file: Option<PathBuf>,
    /// Host names this server answers for (the `Host` header, port aside); any other is refused,
    /// which stops DNS rebinding. Default: any.
    #[arg(
        long = "allowed-host",
        env = "MEMSCOPE_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,
    /// Raw live samples are kept this long, then rolled up into one-minute min/max/mean rows.
    #[arg(long, env = "MEMSCOPE_RAW_RETENTION_HOURS", default_value_t = 48.0)]
    pub raw_retention_hours: f64,
    /// One-minute roll-ups (and live events) are kept this long.
    #[arg(long, env = "MEMSCOPE_ROLLUP_RETENTION_DAYS", default_value_t = 30.0)]
    pub rollup_retention_days: f64,
    /// Snapshots indexed at the same time (each takes one core while it runs).
    #[arg(long, env = "MEMSCOPE_INDEX_WORKERS", default_value_t = 2)]
    pub index_workers: usize,
    /// Most bytes a compressed upload may decompress to (default 16 GiB); parsing takes memory
    /// in proportion (see the README's "Deploying").
    #[arg(long, env = "MEMSCOPE_MAX_DECODED_BYTES", default_value_t = 16 << 30)]
    pub max_decoded_bytes: u64,
    /// Most a compressed upload may expand past its first 64 MiB, in decompressed bytes per
    /// compressed byte (real snapshots: 10–30×; a decompression bomb: 1000×). 0: no limit.
    #[arg(long, env = "MEMSCOPE_MAX_EXPANSION", default_value_t = 100)]
    pub max_expansion: u64,
    /// Slowest upload that keeps its parse slot: fewer bytes per second than this, averaged over
    /// the body idle timeout, and the upload is cut off (so slow clients cannot hold every slot).
    #[arg(long, env = "MEMSCOPE_MIN_UPLOAD_RATE", default_value_t = 16 << 10)]
    pub min_upload_bytes_per_s: u64,
    /// Most connections at once; past it new ones wait to be accepted.
    #[arg(long, env = "MEMSCOPE_MAX_CONNECTIONS", default_value_t = 512)]
    pub max_connections: usize,
    /// Seconds a client has to send a request's headers (also how long an idle keep-alive
    /// connection stays open).
    #[arg(long, env = "MEMSCOPE_HEADER_TIMEOUT_SECS", default_value_t = 10.0)]
    pub header_timeout_secs: f64,
    /// Seconds a request body may stall before the request is ended.
    #[arg(long, env = "MEMSCOPE_BODY_IDLE_TIMEOUT_SECS", default_value_t = 30.0)]
    pub body_idle_timeout_secs: f64,
}

impl ServeArgs {
    /// What one client may hold, for the connection loop.
    pub fn conn_limits(&self) -> crate::listen::ConnLimits {
        let secs = |s: f64| std::time::Duration::from_secs_f64(s.clamp(0.01, 86_400.0));
        crate::listen::ConnLimits {
            max_connections: self.max_connections,
            header_timeout: secs(self.header_timeout_secs),
            body_idle_timeout: secs(self.body_idle_timeout_secs),
            shutdown_grace: std::time::Duration::from_secs(10),
        }
    }

    /// The access settings (tokens, roles, allowed hosts); reads the tokens file.
    pub fn access(&self) -> anyhow::Result<crate::access::Access> {
        let file = match &self.api_tokens_file {
            Some(p) => Some(std::fs::read_to_string(p).map_err(|e| {
                anyhow::anyhow!("cannot read the API tokens file {}: {e}", p.display())
            })?),
            None => None,
        };
        crate::access::Access::new(&self.api_tokens, file.as_deref(), &self.allowed_hosts)
    }

    /// The engine's limits for an upload of `size_hint_bytes` (0 if unknown).
    pub fn read_limits(&self, size_hint_bytes: u64) -> snapshot::Limits {
        snapshot::Limits {
            max_decoded_bytes: self.max_decoded_bytes,
            max_expansion: self.max_expansion,
            size_hint_bytes,
            ..snapshot::Limits::default()
        }
    }

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
            database_url: None,
            max_upload_bytes: 8 << 30,
            cached_snapshots: 4,
            collector_tokens: Vec::new(),
            api_tokens: Vec::new(),
            api_tokens_file: None,
            allowed_hosts: Vec::new(),
            index_workers: 2,
            raw_retention_hours: 48.0,
            rollup_retention_days: 30.0,
            max_decoded_bytes: 16 << 30,
            max_expansion: 100,
            min_upload_bytes_per_s: 16 << 10,
            max_connections: 512,
            header_timeout_secs: 10.0,
            body_idle_timeout_secs: 30.0,
        }
    }
}
