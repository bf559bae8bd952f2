//! The server's connection loop, in place of `axum::serve`, because it bounds what one client can
//! hold (issue 13, finding 5; issue 38, item 2): at most `max_connections` connections at once
//! (past it the loop stops accepting and the kernel's backlog waits) and
//! `max_connections_per_client` from one address (past it, a new connection of that address is
//! answered 503 and closed at once, taking no slot: one client cannot fill the server and make
//! everyone else wait behind it); a request's headers must arrive within the header
//! timeout (which also closes idle keep-alive connections); a request body that stops arriving
//! for the idle timeout ends the request ([`IdleBody`]); a response the client stops reading for
//! the write timeout ends its connection ([`WriteTimeout`]). Each request carries its client's
//! address (`ConnectInfo`), for the budgets kept per client. Shutdown stops accepting, lets
//! requests in flight finish for a grace period, then closes what is left.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

/// What one client may hold.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub max_connections: usize,
    /// Connections one address may hold at once.
    pub max_connections_per_client: usize,
    /// From a connection's first byte of a request (or its last response) to the end of the
    /// request's headers.
    pub header_timeout: Duration,
    /// Longest wait for the next piece of a request body.
    pub body_idle_timeout: Duration,
    /// Longest a response may wait for the client to take its next bytes.
    pub write_timeout: Duration,
    /// How long requests in flight may finish after shutdown begins.
    pub shutdown_grace: Duration,
}

/// The answer to a connection over its client's cap, before it is closed.
fn over_capacity() -> Vec<u8> {
    const BODY: &str = r#"{"error":"too many connections from this client at once; try again"}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    )
    .into_bytes()
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
    let clients = Clients::default();
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
        let (mut stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait rather than spin.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Some(client) = clients.admit(peer.ip(), limits.max_connections_per_client) else {
            drop(slot);
            // Answered and closed at once (bounded: a client that does not read it is dropped).
            tokio::spawn(async move {
                let _ = tokio::time::timeout(
                    Duration::from_secs(1),
                    stream.write_all(&over_capacity()),
                )
                .await;
            });
            continue;
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(WriteTimeout::new(stream, limits.write_timeout));
        let service = tower::ServiceBuilder::new()
            .map_request(move |mut req: axum::http::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                req
            })
            .service(app.clone());
        let conn = builder.serve_connection(io, TowerToHyperService::new(service));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            // A client that goes away or times out ends its connection; nothing to report.
            let _ = conn.await;
            drop((slot, client));
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

/// Connections held per client address.
#[derive(Debug, Clone, Default)]
struct Clients(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// One connection of a client, counted until dropped.
struct ClientConn {
    clients: Clients,
    ip: IpAddr,
}

impl Clients {
    /// A connection of `ip`, if it holds fewer than `cap`.
    fn admit(&self, ip: IpAddr, cap: usize) -> Option<ClientConn> {
        let mut held = self.0.lock().expect("clients lock");
        let n = held.entry(ip).or_default();
        if *n >= cap.max(1) {
            return None;
        }
        *n += 1;
        Some(ClientConn {
            clients: self.clone(),
            ip,
        })
    }
}

impl Drop for ClientConn {
    fn drop(&mut self) {
        let mut held = self.clients.0.lock().expect("clients lock");
        if let Some(n) = held.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.ip);
            }
        }
    }
}

/// A connection whose writes must make progress: a write (or flush) the client has not taken
/// for `timeout` fails, which ends the connection. A client that asks for a large download and
/// never reads it would otherwise hold its connection (and the file) for as long as it likes.
/// Time the server itself spends not writing (an event stream between events) is not counted.
pub struct WriteTimeout<S> {
    inner: S,
    timeout: Duration,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteTimeout<S> {
    pub fn new(inner: S, timeout: Duration) -> WriteTimeout<S> {
        WriteTimeout {
            inner,
            timeout,
            deadline: None,
        }
    }

    /// A write's (or flush's) outcome, watched: progress clears the deadline; `Pending` starts
    /// it, and becomes an error once it has passed.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        match polled {
            Poll::Pending => self.stalled(cx).map(Err),
            done => {
                self.deadline = None;
                done
            }
        }
    }

    /// After a write that returned `Pending`: an error once the deadline passed.
    fn stalled(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Error> {
        let timeout = self.timeout;
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the client took nothing for {} s", timeout.as_secs_f64()),
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
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
