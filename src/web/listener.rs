//! The accept loop: connection cap, TLS, timeouts and header limits in front of the routes.
//!
//! axum's own `serve` has no knobs for any of these, so connections are driven by hyper's
//! HTTP/1.1 server directly. Every connection runs in its own task on the one async thread;
//! nothing here blocks, so slow or hostile clients cost a little memory each, up to the cap.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, Response, StatusCode};
use axum::response::IntoResponse;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::time::{sleep, timeout, Sleep};
use tower::ServiceExt as _;

use super::auth::BasicAuth;
use super::reload::WebConfig;
use super::stats::HttpStats;
use crate::config::Web as Limits;
use crate::snapshot::Rejection;

/// How long a shutdown waits for requests in progress.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Connections past the cap answered with a 503 at the same time. Past that, the accept loop
/// waits for one of them to finish: further clients wait in the kernel's listen backlog and are
/// answered in turn, instead of being closed unanswered (which a client sees as a reset).
const REFUSING_AT_ONCE: usize = 64;

/// Paths answered without basic auth: liveness and readiness reveal nothing, and the kubelet's
/// probes cannot easily present credentials.
const OPEN_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// Serves `app` on `listener` until `shutdown` completes; then stops accepting, lets requests
/// in progress finish (up to [`SHUTDOWN_GRACE`]) and closes the connections.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    web: Arc<WebConfig>,
    limits: &Limits,
    stats: Arc<HttpStats>,
    shutdown: impl Future<Output = ()>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout.0)
        .max_header_size(limits.max_header_bytes);
    let connection = Arc::new(Connection {
        http,
        app,
        web,
        auth: BasicAuth::default(),
        stats,
        limits: limits.clone(),
    });
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    // Refusing politely holds the socket until the client has read the 503 (at most about two
    // seconds); refusals at once are bounded so a flood cannot exhaust descriptors.
    let refusals = Arc::new(Semaphore::new(REFUSING_AT_ONCE));
    let (closing, closing_seen) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(%error, "cannot accept a connection");
                    sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let connection = connection.clone();
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                let closing = closing_seen.clone();
                tokio::spawn(async move {
                    connection.run(stream, closing).await;
                    drop(slot);
                });
            }
            Err(_) => {
                connection.stats.reject(Rejection::ConnectionLimit);
                let tls = connection.web.current().tls.is_some();
                // Every refused client gets its answer: when as many refusals as allowed are
                // in progress, stop accepting until one ends.
                let refusing = tokio::select! {
                    () = &mut shutdown => break,
                    permit = refusals.clone().acquire_owned() => permit,
                };
                let Ok(refusing) = refusing else { break };
                tokio::spawn(async move {
                    refuse(stream, tls).await;
                    drop(refusing);
                });
            }
        }
    }
    let _ = closing.send(true);
    // Every connection gives its slot back when it has closed.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    if timeout(SHUTDOWN_GRACE, slots.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the shutdown grace period; closing them");
    }
}

/// Everything a connection task needs; shared by all of them.
struct Connection {
    http: hyper::server::conn::http1::Builder,
    app: Router,
    web: Arc<WebConfig>,
    auth: BasicAuth,
    stats: Arc<HttpStats>,
    limits: Limits,
}

impl Connection {
    async fn run(self: Arc<Self>, stream: TcpStream, closing: watch::Receiver<bool>) {
        let _open = self.stats.open_connection();
        // TLS settings are taken per connection (a reloaded certificate applies to the next
        // handshake); auth settings per request, so keep-alive connections see reloads too.
        let tls = self.web.current().tls.clone();
        match tls {
            None => self.http_over(stream, closing).await,
            Some(acceptor) => {
                let handshake = async {
                    if speaks_plain_http(&stream).await {
                        return Err(answer_plain_http(stream).await);
                    }
                    acceptor.accept(stream).await
                };
                match timeout(self.limits.header_read_timeout.0, handshake).await {
                    Ok(Ok(stream)) => self.http_over(stream, closing).await,
                    Ok(Err(error)) => {
                        tracing::debug!(%error, "TLS handshake failed");
                        self.stats.reject(Rejection::TlsHandshake);
                    }
                    Err(_) => self.stats.reject(Rejection::TlsHandshake),
                }
            }
        }
    }

    async fn http_over<I>(self: &Arc<Self>, io: I, mut closing: watch::Receiver<bool>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let io = TokioIo::new(WriteDeadline::new(io, self.limits.write_timeout.0));
        let this = self.clone();
        let service = hyper::service::service_fn(move |request| {
            let this = this.clone();
            async move { Ok::<_, Infallible>(this.respond(request).await) }
        });
        let connection = self.http.serve_connection(io, service);
        tokio::pin!(connection);
        let result = tokio::select! {
            result = connection.as_mut() => result,
            // The flag only ever turns true, so any change means closing.
            _ = closing.changed() => {
                // Finish the request in progress, if any, then close.
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        };
        if let Err(error) = result {
            if let Some(reason) = classify(&error) {
                tracing::debug!(%error, reason = reason.label(), "connection closed");
                self.stats.reject(reason);
            }
        }
    }

    async fn respond(&self, request: Request<Incoming>) -> Response<Body> {
        let settings = self.web.current();
        let work = async {
            if !settings.users.is_empty()
                && !OPEN_PATHS.contains(&request.uri().path())
                && !self
                    .auth
                    .allows(
                        &settings.users,
                        request.headers().get(header::AUTHORIZATION),
                    )
                    .await
            {
                self.stats.reject(Rejection::Unauthorized);
                return (
                    StatusCode::UNAUTHORIZED,
                    [(
                        header::WWW_AUTHENTICATE,
                        "Basic realm=\"gpu-bottleneck-exporter\"",
                    )],
                    "unauthorized\n",
                )
                    .into_response();
            }
            match self.app.clone().oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        };
        let mut response = match timeout(self.limits.request_timeout.0, work).await {
            Ok(response) => response,
            Err(_) => {
                self.stats.reject(Rejection::RequestTimeout);
                (StatusCode::SERVICE_UNAVAILABLE, "request timed out\n").into_response()
            }
        };
        for (name, value) in &settings.headers {
            response.headers_mut().insert(name.clone(), value.clone());
        }
        response
    }
}

/// Which rejection a failed connection counts as; None for clients that simply went away.
fn classify(error: &hyper::Error) -> Option<Rejection> {
    if error.is_timeout() {
        return Some(Rejection::HeaderTimeout);
    }
    if error.is_parse() || error.is_parse_too_large() {
        return Some(Rejection::BadRequest);
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            if io.kind() == io::ErrorKind::TimedOut {
                return Some(Rejection::WriteTimeout);
            }
        }
        source = cause.source();
    }
    None
}

/// Whether a client on the TLS port started with something other than a TLS handshake
/// record (0x16), i.e. a plain HTTP request.
async fn speaks_plain_http(stream: &TcpStream) -> bool {
    let mut first = [0u8; 1];
    matches!(stream.peek(&mut first).await, Ok(1) if first[0] != 0x16)
}

/// Tells a plain-HTTP client it reached an HTTPS server, as Go's server does, so a scrape
/// configured with the wrong scheme fails with a readable error rather than garbage.
async fn answer_plain_http(stream: TcpStream) -> io::Error {
    reply_and_close(stream, b"HTTP/1.0 400 Bad Request\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n").await;
    io::Error::new(io::ErrorKind::InvalidData, "plain HTTP on the TLS port")
}

/// Answers a connection past the cap: a 503 over plain HTTP, a plain close over TLS (a
/// handshake just to refuse would cost more than the refusal saves).
async fn refuse(stream: TcpStream, tls: bool) {
    if !tls {
        reply_and_close(stream, b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 21\r\nretry-after: 1\r\nconnection: close\r\n\r\ntoo many connections\n").await;
    }
}

/// Sends a canned response without reading the request, then closes within about 2 s.
async fn reply_and_close(mut stream: TcpStream, reply: &[u8]) {
    let _ = timeout(Duration::from_secs(1), stream.write_all(reply)).await;
    let _ = stream.shutdown().await;
    // Read what the client sent until it closes: closing with unread data would reset the
    // connection and could destroy the reply before the client reads it.
    let mut sink = [0u8; 1024];
    let _ = timeout(Duration::from_secs(1), async {
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// An IO whose writes fail with `TimedOut` once one has made no progress for `limit`: a client
/// that stops reading its response cannot hold a connection slot forever.
struct WriteDeadline<I> {
    io: I,
    limit: Duration,
    stalled_since: Option<Pin<Box<Sleep>>>,
}

impl<I> WriteDeadline<I> {
    fn new(io: I, limit: Duration) -> Self {
        WriteDeadline {
            io,
            limit,
            stalled_since: None,
        }
    }

    fn watch<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stalled_since = None;
            return poll;
        }
        let limit = self.limit;
        let deadline = self
            .stalled_since
            .get_or_insert_with(|| Box::pin(sleep(limit)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "client stopped reading the response",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for WriteDeadline<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write(cx, buf);
        self.watch(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_flush(cx);
        self.watch(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_shutdown(cx);
        self.watch(cx, poll)
    }
}
