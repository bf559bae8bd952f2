//! What the collector's integration tests share: a scratch folder with a free port, and a real
//! memscope server (in this process) that knows the token `c1=t1`.
#![allow(dead_code)]

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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let mut args = server::testing::serve_args(dir.to_path_buf());
    args.collector_tokens = vec!["c1=t1".into()];
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
