//! A throwaway PostgreSQL cluster for a test (`scripts/pg-cluster`: Debian's `postgresql`, which
//! `scripts/test` installs), talked to with `psql`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A cluster in a temporary folder, stopped and removed when dropped.
pub struct Cluster {
    pub dir: PathBuf,
    pub url: String,
}

impl Cluster {
    pub fn start(tag: &str) -> Cluster {
        Cluster::start_with(tag, false)
    }

    /// A cluster with PostgreSQL's durable defaults (fsync and full-page writes on), for
    /// benchmarks; `start`'s clusters skip them.
    pub fn start_durable(tag: &str) -> Cluster {
        Cluster::start_with(tag, true)
    }

    fn start_with(tag: &str, durable: bool) -> Cluster {
        let dir = std::env::temp_dir().join(format!("memscope-pg-{tag}-{}", std::process::id()));
        let mut start = Command::new(root().join("scripts/pg-cluster"));
        start.args(["start", dir.to_str().unwrap()]);
        start.env("PG_CLUSTER_FSYNC", if durable { "on" } else { "off" });
        let url = stdout_of(start, "scripts/pg-cluster start")
            .trim()
            .to_string();
        Cluster { dir, url }
    }

    /// Runs `sql` and returns the rows, fields separated by `|`.
    pub fn sql(&self, sql: &str) -> Vec<String> {
        let mut psql = Command::new("psql");
        psql.arg(&self.url)
            .args(["-v", "ON_ERROR_STOP=1", "-q", "-tA", "-F", "|", "-c", sql]);
        stdout_of(psql, &format!("psql -c {sql:?}"))
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }
}

/// What `cmd` printed, once it succeeded (its error output otherwise, in the panic).
pub fn stdout_of(mut cmd: Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(root().join("scripts/pg-cluster"))
            .args(["stop", self.dir.to_str().unwrap()])
            .status();
    }
}
