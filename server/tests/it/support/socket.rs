//! A server on a real loopback socket through the server's own connection loop
//! (`server::listen::serve`), for the tests that need its limits: slow and half-sent requests,
//! floods of connections. Stopped when dropped. And the ports a `memscope serve` process is
//! started on.

use std::net::SocketAddr;

use server::config::ServeArgs;
use server::state::AppState;

pub struct Running {
    pub state: AppState,
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop.take().map(|s| s.send(()));
    }
}

/// A server on data folder `memscope-TAG-PID` (emptied first), on the run's backend, with
/// `edit` applied to its settings, listening on 127.0.0.1.
pub async fn listening(tag: &str, edit: impl FnOnce(&mut ServeArgs)) -> Running {
    let dir = std::env::temp_dir().join(format!("memscope-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut args = server::testing::serve_args(dir);
    edit(&mut args);
    let state = AppState::open(args).await.unwrap();
    let limits = state.config.conn_limits();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let app = server::http::app(state.clone());
    tokio::spawn(server::listen::serve(listener, app, limits, async {
        rx.await.ok();
    }));
    Running {
        state,
        addr,
        stop: Some(tx),
    }
}

/// Waits (up to 10 s) until something listens on loopback `port`; whether it did.
pub fn wait_for_port(port: u16) -> bool {
    (0..200).any(|_| {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        false
    })
}
