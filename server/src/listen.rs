//! The server's connection loop, in place of `axum::serve`, because it bounds what one client can
//! hold (issue 13, finding 5): at most `max_connections` connections at once (past that the loop
//! stops accepting and the kernel's backlog waits), a request's headers must arrive within the
//! header timeout (which also closes idle keep-alive connections), and a request body that stops
//! arriving for the idle timeout ends the request ([`IdleBody`]). Shutdown stops accepting,
//! lets requests in flight finish for a grace period, then closes what is left.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;

/// What one client may hold.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub max_connections: usize,
    /// From a connection's first byte of a request (or its last response) to the end of the
    /// request's headers.
    pub header_timeout: Duration,
    /// Longest wait for the next piece of a request body.
    pub body_idle_timeout: Duration,
    /// How long requests in flight may finish after shutdown begins.
    pub shutdown_grace: Duration,
}

/// Serves `app` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()>,
) {
    let app = app.layer(tower::util::MapRequestLayer::new(
        move |req: axum::http::Request<Body>| {
            req.map(|b| Body::new(IdleBody::new(b, limits.body_idle_timeout)))
        },
    ));
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("never closed"),
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: wait rather than spin.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            // A client that goes away or times out ends its connection; nothing to report.
            let _ = conn.await;
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "requests still running {} s after shutdown began were cut off",
            limits.shutdown_grace.as_secs()
        );
    }
}

/// A request body whose next piece must arrive within `idle` of being waited for. Time the
/// handler spends not reading (waiting for a parse slot, say) is not counted.
pub struct IdleBody {
    inner: Body,
    idle: Duration,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl IdleBody {
    pub fn new(inner: Body, idle: Duration) -> IdleBody {
        IdleBody {
            inner,
            idle,
            deadline: None,
        }
    }
}

impl http_body::Body for IdleBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.deadline = None;
                Poll::Ready(frame)
            }
            Poll::Pending => {
                let idle = this.idle;
                let deadline = this
                    .deadline
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                match deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(BodyIdle(idle))))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The error a stalled body ends with.
#[derive(Debug, thiserror::Error)]
#[error("the client sent nothing for {} s in the middle of the request body", .0.as_secs_f64())]
pub struct BodyIdle(pub Duration);
