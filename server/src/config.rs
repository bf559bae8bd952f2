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
    /// A file whose first line is the PostgreSQL password, so that it need not be written in
    /// --database-url (which `ps` shows); or set MEMSCOPE_DATABASE_PASSWORD. The URL then names
    /// the user without a password.
    #[arg(long, env = "MEMSCOPE_DATABASE_PASSWORD_FILE")]
    pub database_password_file: Option<PathBuf>,
    /// Largest upload accepted, in bytes (default 8 GiB).
    #[arg(long, env = "MEMSCOPE_MAX_UPLOAD_BYTES", default_value_t = 8 << 30)]
    pub max_upload_bytes: u64,
    /// Parsed snapshots kept in memory for queries (least recently used are dropped).
    #[arg(long, env = "MEMSCOPE_CACHED_SNAPSHOTS", default_value_t = 4)]
    pub cached_snapshots: usize,
    /// Collector tokens, `NAME=TOKEN` (repeat the flag, or comma-separate in the variable): NAME
    /// is the host the token speaks for (one token per host), TOKEN at least 16 characters. A
    /// collector authenticates with `Authorization: Bearer TOKEN`, and its batches are stored as
    /// host NAME's; any other token gets 401 and nothing is stored.
    #[arg(
        long = "collector-token",
        env = "MEMSCOPE_COLLECTOR_TOKENS",
        value_delimiter = ','
    )]
    pub collector_tokens: Vec<String>,
    /// API tokens: `TOKEN` or `write:TOKEN` (may upload, rename, retag, delete and read),
    /// `read:TOKEN` (may read). With any token set, changing the library needs a write token;
    /// with a read token set, reading needs a token too. Repeat the flag, or comma-separate in
    /// the variable.
    #[arg(long = "api-token", env = "MEMSCOPE_API_TOKENS", value_delimiter = ',')]
    pub api_tokens: Vec<String>,
    /// A file of API tokens, one per line: `write TOKEN` or `read TOKEN` (`#` starts a comment).
    #[arg(long, env = "MEMSCOPE_API_TOKENS_FILE")]
    pub api_tokens_file: Option<PathBuf>,
    /// Host names this server answers for (the `Host` header, port aside); any other is refused,
    /// which stops DNS rebinding. Default: on a loopback address, `localhost`, `127.0.0.1` and
    /// `[::1]`; on any other, any.
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
    /// Snapshots parsed at the same time (each takes one core while it has bytes to parse; an
    /// upload waiting for its client's next bytes holds none). Four times as many uploads may
    /// be open at once, and one client address may have half as many open (at least one).
    #[arg(long, env = "MEMSCOPE_INDEX_WORKERS", default_value_t = 2)]
    pub index_workers: usize,
    /// Most bytes a compressed upload may decompress to (default 16 GiB); parsing takes memory
    /// in proportion (see the README's "Deploying").
    #[arg(long, env = "MEMSCOPE_MAX_DECODED_BYTES", default_value_t = 16 << 30)]
    pub max_decoded_bytes: u64,
    /// Most memory the uploads being parsed at once may hold together, in bytes (default: half
    /// of this machine's memory). Each parse also holds at most 1.5x the bytes it has read
    /// plus 128 MiB. An upload that finds this budget held by other parses is answered 503
    /// (retry shortly); one that alone would need more is refused.
    #[arg(long, env = "MEMSCOPE_MAX_PARSE_MEMORY_BYTES")]
    pub max_parse_memory_bytes: Option<u64>,
    /// Most a compressed upload may expand past its first 64 MiB, in decompressed bytes per
    /// compressed byte (real snapshots: 10–30×; a decompression bomb: 1000×). 0: no limit.
    #[arg(long, env = "MEMSCOPE_MAX_EXPANSION", default_value_t = 100)]
    pub max_expansion: u64,
    /// Slowest upload that is kept open: fewer bytes per second than this, averaged over the
    /// body idle timeout, and the upload is cut off (so slow clients cannot hold every open
    /// upload).
    #[arg(long, env = "MEMSCOPE_MIN_UPLOAD_RATE", default_value_t = 16 << 10)]
    pub min_upload_bytes_per_s: u64,
    /// Longest any one upload may take to arrive, in seconds; a smaller one gets a minute and its
    /// size at --min-upload-rate (so an endless body sent just above the rate cannot hold a parse
    /// slot for days).
    #[arg(long, env = "MEMSCOPE_MAX_UPLOAD_SECS", default_value_t = 3600.0)]
    pub max_upload_secs: f64,
    /// Most connections at once; past it new ones wait to be accepted.
    #[arg(long, env = "MEMSCOPE_MAX_CONNECTIONS", default_value_t = 512)]
    pub max_connections: usize,
    /// Most connections one client address may hold at once (default: an eighth of
    /// --max-connections); past it its new ones are answered 503 and closed, so one client
    /// cannot hold every connection.
    #[arg(long, env = "MEMSCOPE_MAX_CONNECTIONS_PER_CLIENT")]
    pub max_connections_per_client: Option<usize>,
    /// Most live event streams (the live pages) open at once; past it a new one is answered
    /// 503. Default: a quarter of --max-connections.
    #[arg(long, env = "MEMSCOPE_MAX_LIVE_STREAMS")]
    pub max_live_streams: Option<usize>,
    /// Seconds a response may wait for its client to take its next bytes before the connection
    /// is closed (a download nobody reads cannot hold a connection).
    #[arg(long, env = "MEMSCOPE_WRITE_TIMEOUT_SECS", default_value_t = 30.0)]
    pub write_timeout_secs: f64,
    /// Seconds a client has to send a request's headers (also how long an idle keep-alive
    /// connection stays open).
    #[arg(long, env = "MEMSCOPE_HEADER_TIMEOUT_SECS", default_value_t = 10.0)]
    pub header_timeout_secs: f64,
    /// Seconds a request body may stall before the request is ended.
    #[arg(long, env = "MEMSCOPE_BODY_IDLE_TIMEOUT_SECS", default_value_t = 30.0)]
    pub body_idle_timeout_secs: f64,
    /// A webhook told of every live OOM and every process found growing step over step, as
    /// Slack-compatible JSON (`{"text": …}`; a Slack incoming webhook's address works as it
    /// is). Delivered at least once, retried until the receiver takes it, across restarts.
    #[arg(long, env = "MEMSCOPE_WEBHOOK_URL", hide_env_values = true)]
    pub webhook_url: Option<String>,
    /// The dashboard's address as its users reach it (e.g. `https://memscope.example.com`), for
    /// links in webhook messages.
    #[arg(long, env = "MEMSCOPE_PUBLIC_URL")]
    pub public_url: Option<String>,
}

impl ServeArgs {
    /// What one client may hold, for the connection loop.
    pub fn conn_limits(&self) -> crate::listen::ConnLimits {
        let secs = |s: f64| std::time::Duration::from_secs_f64(s.clamp(0.01, 86_400.0));
        crate::listen::ConnLimits {
            max_connections: self.max_connections,
            max_connections_per_client: self
                .max_connections_per_client
                .unwrap_or(self.max_connections / 8)
                .max(1),
            header_timeout: secs(self.header_timeout_secs),
            body_idle_timeout: secs(self.body_idle_timeout_secs),
            write_timeout: secs(self.write_timeout_secs),
            shutdown_grace: std::time::Duration::from_secs(10),
        }
    }

    /// The database URL to connect to, with the password from `--database-password-file` or
    /// `MEMSCOPE_DATABASE_PASSWORD` put in (percent-encoded); `None` for SQLite.
    pub fn database(&self) -> anyhow::Result<Option<String>> {
        let from_file = match &self.database_password_file {
            Some(p) => Some(
                std::fs::read_to_string(p)
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "cannot read the database password file {}: {e}",
                            p.display()
                        )
                    })?
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string(),
            ),
            None => None,
        };
        let password = from_file.or_else(|| std::env::var(DATABASE_PASSWORD_VAR).ok());
        match (&self.database_url, password) {
            (None, Some(_)) => anyhow::bail!(
                "a database password was given ({DATABASE_PASSWORD_VAR} or --database-password-file) but no --database-url: it is for PostgreSQL"
            ),
            (None, None) => Ok(None),
            (Some(url), None) => Ok(Some(url.clone())),
            (Some(url), Some(password)) => with_password(url, &password).map(Some),
        }
    }

    /// Live event streams open at once (the streams' own budget).
    pub fn live_streams(&self) -> usize {
        self.max_live_streams
            .unwrap_or(self.max_connections / 4)
            .max(1)
    }

    /// The access settings (tokens, roles, allowed hosts); reads the tokens file.
    pub fn access(&self) -> anyhow::Result<crate::access::Access> {
        let file = match &self.api_tokens_file {
            Some(p) => Some(std::fs::read_to_string(p).map_err(|e| {
                anyhow::anyhow!("cannot read the API tokens file {}: {e}", p.display())
            })?),
            None => None,
        };
        let hosts = crate::access::HostRule::new(&self.allowed_hosts, self.addr.ip().is_loopback());
        crate::access::Access::new(&self.api_tokens, file.as_deref(), hosts)?
            .with_collectors(&self.collector_tokens)
    }

    /// The engine's limits for an upload of `size_hint_bytes` (0 if unknown).
    /// The engine's limits for uploads, with the one memory budget they all share (call once).
    pub fn read_limits(&self) -> snapshot::Limits {
        snapshot::Limits {
            max_decoded_bytes: self.max_decoded_bytes,
            max_expansion: self.max_expansion,
            budget: Some(snapshot::MemoryBudget::new(self.parse_memory_bytes())),
            ..snapshot::Limits::default()
        }
    }

    /// `--max-parse-memory-bytes`, or half of this machine's memory (4 GiB where it cannot
    /// be read).
    pub fn parse_memory_bytes(&self) -> u64 {
        self.max_parse_memory_bytes
            .unwrap_or_else(|| machine_memory_bytes().map_or(4 << 30, |m| m / 2))
    }

    /// Settings for tests: a given data dir, defaults otherwise.
    pub fn for_data_dir(data_dir: PathBuf) -> ServeArgs {
        ServeArgs {
            addr: "127.0.0.1:0".parse().expect("literal address"),
            data_dir,
            database_url: None,
            database_password_file: None,
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
            // A fixed figure (not half of this machine's memory): tests see the same answers
            // on every machine.
            max_parse_memory_bytes: Some(4 << 30),
            min_upload_bytes_per_s: 16 << 10,
            max_upload_secs: 3600.0,
            max_connections: 512,
            max_connections_per_client: None,
            max_live_streams: None,
            write_timeout_secs: 30.0,
            header_timeout_secs: 10.0,
            body_idle_timeout_secs: 30.0,
            webhook_url: None,
            public_url: None,
        }
    }
}

/// The variable a PostgreSQL password may come in (not a flag: `ps` shows flags).
pub const DATABASE_PASSWORD_VAR: &str = "MEMSCOPE_DATABASE_PASSWORD";

/// What a URL may hold unencoded (RFC 3986's unreserved characters): the rest of a password is
/// percent-encoded.
const URL_UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `url` (`postgres://USER@HOST…`) with `password` put after the user, percent-encoded.
fn with_password(url: &str, password: &str) -> anyhow::Result<String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        anyhow::bail!("--database-url must look like postgres://USER@HOST:PORT/DB");
    };
    let Some((user, host)) = rest.split_once('@') else {
        anyhow::bail!(
            "--database-url names no user (postgres://USER@HOST:PORT/DB): the password needs one"
        );
    };
    if user.contains(':') {
        anyhow::bail!(
            "--database-url already holds a password: give it there or in the password file or variable, not both"
        );
    }
    let encoded = percent_encoding::utf8_percent_encode(password, URL_UNRESERVED);
    Ok(format!("{scheme}://{user}:{encoded}@{host}"))
}

/// This machine's memory (`MemTotal` in `/proc/meminfo`), where it can be read.
fn machine_memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib << 10)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_password_from_a_file_goes_into_the_url_encoded() {
        let dir = std::env::temp_dir().join(format!("memscope-pw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pw");
        std::fs::write(&file, "p@ss:w/rd\n").unwrap();
        let mut args = super::ServeArgs::for_data_dir(dir.clone());
        args.database_url = Some("postgres://memscope@db:5432/memscope".into());
        args.database_password_file = Some(file);
        assert_eq!(
            args.database().unwrap().unwrap(),
            "postgres://memscope:p%40ss%3Aw%2Frd@db:5432/memscope"
        );
        args.database_url = Some("postgres://memscope:x@db/memscope".into());
        assert!(
            args.database()
                .unwrap_err()
                .to_string()
                .contains("not both")
        );
        args.database_url = None;
        assert!(args.database().is_err(), "a password without PostgreSQL");
    }
}
