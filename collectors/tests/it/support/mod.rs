//! What the collector's integration tests share: a scratch folder with a free port, and a real
//! memscope server (in this process) that knows the token `c1=t1-0123456789abcdef`.
#![allow(dead_code)]

#[path = "../../../../server/tests/it/support/pg.rs"]
pub mod pg;

#[path = "../../../../server/tests/it/support/hostile.rs"]
pub mod hostile;

use std::path::PathBuf;
use std::time::Duration;

pub fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/leak_detached_cache.nvml.json")
}

/// A fresh scratch folder and a free local port.
pub fn scratch(tag: &str) -> (PathBuf, u16) {
    let base = std::env::temp_dir().join(format!("memscope-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    (base, port)
}

pub struct Server {
    pub rt: tokio::runtime::Runtime,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

pub fn start_server(dir: &std::path::Path, port: u16) -> Server {
    start_server_on(
        dir,
        port,
        server::testing::database_for(dir),
        &["c1=t1-0123456789abcdef".to_string()],
    )
}

/// A server on `dir` whose database is `database_url` (SQLite in `dir` when `None`), whatever
/// the run's backend (the benchmarks compare both in one run), taking `collector_tokens`
/// (`NAME=TOKEN` each).
pub fn start_server_on(
    dir: &std::path::Path,
    port: u16,
    database_url: Option<String>,
    collector_tokens: &[String],
) -> Server {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let mut args = server::config::ServeArgs::for_data_dir(dir.to_path_buf());
    args.database_url = database_url;
    args.collector_tokens = collector_tokens.to_vec();
    rt.spawn(async move {
        let state = server::state::AppState::open(args).await.unwrap();
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        axum::serve(listener, server::http::app(state))
            .with_graceful_shutdown(async {
                rx.await.ok();
            })
            .await
            .unwrap();
    });
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Server { rt, stop: Some(tx) }
}

impl Server {
    pub fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.rt.shutdown_timeout(Duration::from_secs(2));
    }
}
