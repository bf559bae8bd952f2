//! memscope's server crate: the command line (`memscope analyze`, `memscope serve`), the HTTP API
//! and the snapshot library (SQLite + data folder). The snapshot engine itself is the `snapshot`
//! crate; this crate does the IO around it. What crosses HTTP is the `api` crate's types
//! (`convert` turns the engine's into them); what collectors send is `wire`'s.

pub mod access;
pub mod assets;
pub mod cli;
pub mod config;
pub mod convert;
pub mod db;
pub mod http;
pub mod library;
pub mod listen;
pub mod live;
pub mod local;
pub mod mcp;
pub mod notify;
pub mod open;
pub mod predict;
pub mod report;
pub mod runs;
pub mod serve;
pub mod state;
pub mod testing;
pub mod text;

/// Now, in Unix epoch milliseconds (the unit every stored time uses).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
