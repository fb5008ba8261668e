//! The server's outbound HTTP/1.1 client — tool callbacks and the chat upstreams: hyper's
//! connection API, with a keep-alive pool per thread.
//!
//! hyper reads every framing RFC 9112 allows (close-delimited bodies, interim 1xx answers) and
//! reports a cut-short body as an error. Its connection API is used directly rather than through
//! hyper-util's pooled client: an exchange drives its own connection inside the task that asked
//! for it — no connection task, no task spawned per exchange to watch for the connection becoming
//! idle, no shared pool behind a lock. Between exchanges a connection waits in its thread's pool
//! (by origin), unpolled; the next exchange that takes it finds out at once whether the peer has
//! closed it, and goes on with another connection if the request could not be sent. Idle
//! connections older than their [`Peer`]'s keep-alive are closed by a sweep on the thread's
//! arbiter (and, on any thread, whenever the pool is used). Redirects are never followed. A new
//! connection is bounded: its TCP connect, and for `https` its TLS handshake after it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, Response, Uri};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower_service::Service;

use super::{
    CALLBACK_CONNECT_TIMEOUT, CALLBACK_CONNECTION_LIMIT, CALLBACK_KEEP_ALIVE, TLS_HANDSHAKE_TIMEOUT,
};

/// Whom connections go to: how long a TCP connect may take, and how long an idle connection
/// is kept for the next exchange.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer {
    pub connect_timeout: Duration,
    pub keep_alive: Duration,
}

/// Tool callbacks: plugins on loopback.
pub(crate) const CALLBACKS: Peer = Peer {
    connect_timeout: CALLBACK_CONNECT_TIMEOUT,
    keep_alive: CALLBACK_KEEP_ALIVE,
};

type Io = MaybeHttpsStream<TokioIo<TcpStream>>;
type Body = Full<Bytes>;

/// Why an exchange got no response.
pub(crate) enum SendError {
    /// No connection could be made (or its TLS handshake failed).
    Connect(Box<dyn std::error::Error + Send + Sync>),
    /// A connection was made, and the exchange on it failed before the response head.
    Exchange(hyper::Error),
}

thread_local! {
    /// A connector per connect timeout (one per kind of peer).
    static CONNECTORS: RefCell<Vec<(Duration, HttpsConnector<HttpConnector>)>> =
        const { RefCell::new(Vec::new()) };
    static POOL: RefCell<Pool> = RefCell::new(Pool::default());
}

fn connector(connect_timeout: Duration) -> HttpsConnector<HttpConnector> {
    CONNECTORS.with(|connectors| {
        let mut connectors = connectors.borrow_mut();
        if let Some((_, connector)) = connectors.iter().find(|(t, _)| *t == connect_timeout) {
            return connector.clone();
        }
        let connector = new_connector(connect_timeout);
        connectors.push((connect_timeout, connector.clone()));
        connector
    })
}

fn new_connector(connect_timeout: Duration) -> HttpsConnector<HttpConnector> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    // Calls and rounds are one small request each: waiting to fill a segment only adds latency.
    http.set_nodelay(true);
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
        .expect("ring supports the default TLS versions")
        .https_or_http()
        .enable_http1()
        .wrap_connector(http)
}

/// A connection to one callback origin: the request side and the connection future that does
/// its reads and writes, polled only while an exchange runs on it.
pub(crate) struct Connection {
    sender: SendRequest<Body>,
    driver: Driver,
    /// It served an exchange before (it came from the pool).
    reused: bool,
    /// How long it is kept idle.
    keep_alive: Duration,
}

/// The connection future; `None` once it has finished (the connection is closed, or broke).
/// Dropping it then is what tells the request side, whose requests fail from there on.
struct Driver {
    io: Option<Pin<Box<http1::Connection<Io, Body>>>>,
}

impl Driver {
    /// Runs `work` while polling the connection, so its reads and writes happen.
    async fn drive<T>(&mut self, work: impl Future<Output = T>) -> T {
        let mut work = pin!(work);
        poll_fn(|cx| self.poll_with(cx, |cx| work.as_mut().poll(cx))).await
    }

    /// Polls the connection, then `work`: twice, so a request handed to the connection is
    /// written, and a response (or body part) the connection has read is taken, in the same
    /// poll rather than after a wake-up.
    fn poll_with<T>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        mut work: impl FnMut(&mut std::task::Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        for _ in 0..2 {
            if let Some(io) = &mut self.io
                && io.as_mut().poll(cx).is_ready()
            {
                self.io = None;
            }
            if let Poll::Ready(out) = work(cx) {
                return Poll::Ready(out);
            }
        }
        Poll::Pending
    }

    /// Polls the connection once without waiting; true if it has ended.
    fn has_ended(&mut self) -> bool {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if let Some(io) = &mut self.io
            && io.as_mut().poll(&mut cx).is_ready()
        {
            self.io = None;
        }
        self.io.is_none()
    }
}

impl Connection {
    /// Runs `work` (reading the response's body) while polling the connection.
    pub(crate) async fn drive<T>(&mut self, work: impl Future<Output = T>) -> T {
        self.driver.drive(work).await
    }

    /// Gives the connection back to this thread's pool for the next exchange with `origin`,
    /// unless it is closing. Call only after the response was read whole.
    pub(crate) fn release(mut self, origin: &str) {
        // One poll without waiting lets the connection finish a close the answer asked for
        // (`Connection: close`, a close-delimited body) instead of being pooled first.
        if self.driver.has_ended() || self.sender.is_closed() {
            return;
        }
        POOL.with(|pool| pool.borrow_mut().put(origin, self));
    }
}

/// A response body whose reading drives the connection it arrives on; read to its end, the
/// connection goes back to its thread's pool. Dropped before that, it closes the connection:
/// that is how the peer learns the exchange was abandoned.
pub struct PooledBody {
    body: hyper::body::Incoming,
    /// `None` once the body has ended (and the connection went back to the pool).
    connection: Option<Connection>,
    origin: String,
}

impl hyper::body::Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let body = &mut this.body;
        let polled = match &mut this.connection {
            Some(connection) => connection
                .driver
                .poll_with(cx, |cx| Pin::new(&mut *body).poll_frame(cx)),
            None => Pin::new(body).poll_frame(cx),
        };
        if let Poll::Ready(None) = polled
            && let Some(connection) = this.connection.take()
        {
            connection.release(&this.origin);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// Sends `request` to `origin` as [`send`] does, to a `peer` of its own kind, and returns the
/// response whose body drives its connection ([`PooledBody`]).
pub(crate) async fn exchange(
    peer: &Peer,
    origin: &str,
    request: Request<Body>,
) -> Result<Response<PooledBody>, SendError> {
    let (response, connection) = send_to(peer, origin, request).await?;
    Ok(response.map(|body| PooledBody {
        body,
        connection: Some(connection),
        origin: origin.to_owned(),
    }))
}

/// Sends `request` to the callback `origin` (`scheme://host:port`, the request carrying its own
/// `Host` and an origin-form URI) on a pooled connection or a new one, and returns the response
/// with the connection its body arrives on: read the body inside [`Connection::drive`], then
/// [`Connection::release`] it.
pub(crate) async fn send(
    origin: &str,
    request: Request<Body>,
) -> Result<(Response<hyper::body::Incoming>, Connection), SendError> {
    send_to(&CALLBACKS, origin, request).await
}

async fn send_to(
    peer: &Peer,
    origin: &str,
    mut request: Request<Body>,
) -> Result<(Response<hyper::body::Incoming>, Connection), SendError> {
    loop {
        let mut connection = match POOL.with(|pool| pool.borrow_mut().take(origin)) {
            Some(connection) => connection,
            None => open(peer, origin).await?,
        };
        let Connection { sender, driver, .. } = &mut connection;
        let outcome = driver
            .drive(async {
                if let Err(e) = sender.ready().await {
                    return Err((e, Some(request)));
                }
                sender.try_send_request(request).await.map_err(|mut e| {
                    let unsent = e.take_message();
                    (e.into_error(), unsent)
                })
            })
            .await;
        match outcome {
            Ok(response) => return Ok((response, connection)),
            // A kept-alive connection the plugin closed before our request went out: the request
            // is untouched, so it goes on another connection.
            Err((_, Some(unsent))) if connection.reused => request = unsent,
            Err((e, _)) => return Err(SendError::Exchange(e)),
        }
    }
}

async fn open(peer: &Peer, origin: &str) -> Result<Connection, SendError> {
    let uri: Uri = origin
        .parse()
        .map_err(|e| SendError::Connect(Box::new(e)))?;
    let tls = uri.scheme() == Some(&hyper::http::uri::Scheme::HTTPS);
    let connecting = connector(peer.connect_timeout).call(uri);
    // The connector bounds the TCP connection itself; an https connection then has its TLS
    // handshake, which it does not bound.
    let io = if tls {
        let bound = peer.connect_timeout + TLS_HANDSHAKE_TIMEOUT;
        match tokio::time::timeout(bound, connecting).await {
            Ok(io) => io,
            Err(_) => Err(format!(
                "the connection and its TLS handshake did not finish within {} s",
                bound.as_secs()
            )
            .into()),
        }
    } else {
        connecting.await
    }
    .map_err(SendError::Connect)?;
    let (sender, io) = http1::handshake(io).await.map_err(SendError::Exchange)?;
    Ok(Connection {
        sender,
        driver: Driver {
            io: Some(Box::pin(io)),
        },
        reused: false,
        keep_alive: peer.keep_alive,
    })
}

/// A thread's idle connections, by origin, the most recently used last.
#[derive(Default)]
struct Pool {
    idle: HashMap<String, Vec<Idle>, foldhash::fast::RandomState>,
    /// A sweep is scheduled on this thread's arbiter.
    sweeping: bool,
    last_sweep: Option<Instant>,
}

struct Idle {
    connection: Connection,
    since: Instant,
}

impl Pool {
    fn take(&mut self, origin: &str) -> Option<Connection> {
        let now = Instant::now();
        let idle = self.idle.get_mut(origin)?;
        while let Some(Idle { connection, since }) = idle.pop() {
            if now.duration_since(since) < connection.keep_alive && !connection.sender.is_closed() {
                return Some(connection);
            }
        }
        None
    }

    fn put(&mut self, origin: &str, mut connection: Connection) {
        let now = Instant::now();
        connection.reused = true;
        match self.idle.get_mut(origin) {
            Some(idle) if idle.len() >= CALLBACK_CONNECTION_LIMIT => return,
            Some(idle) => idle.push(Idle {
                connection,
                since: now,
            }),
            None => {
                self.idle.insert(
                    origin.to_owned(),
                    vec![Idle {
                        connection,
                        since: now,
                    }],
                );
            }
        }
        if !self.sweeping {
            self.sweeping = schedule_sweeps();
        }
        if !self.sweeping
            && self
                .last_sweep
                .is_none_or(|last| now.duration_since(last) >= CALLBACK_KEEP_ALIVE)
        {
            self.sweep(now);
        }
    }

    /// Closes the connections idle for longer than the keep-alive; true when none is left.
    fn sweep(&mut self, now: Instant) -> bool {
        self.last_sweep = Some(now);
        self.idle.retain(|_, idle| {
            idle.retain(|i| now.duration_since(i.since) < i.connection.keep_alive);
            !idle.is_empty()
        });
        self.idle.is_empty()
    }
}

/// Sweeps this thread's pool every keep-alive period while it holds connections, on the
/// thread's arbiter; false when the thread has none (the pool then sweeps as it is used).
fn schedule_sweeps() -> bool {
    let Some(arbiter) = actix::Arbiter::try_current() else {
        return false;
    };
    arbiter.spawn(async {
        loop {
            tokio::time::sleep(CALLBACK_KEEP_ALIVE).await;
            let empty = POOL.with(|pool| {
                let mut pool = pool.borrow_mut();
                let empty = pool.sweep(Instant::now());
                if empty {
                    pool.sweeping = false;
                }
                empty
            });
            if empty {
                return;
            }
        }
    })
}
