//! Outbound HTTP for plugins (`wasi:http/outgoing-handler`, linked for every world), behind
//! the plugin's grants ([`crate::runtime::host::grants`]).
//!
//! - **Denied by default.** A request whose origin no grant matches is refused before any
//!   name is looked up or any connection made: the guest gets `HTTP-request-denied`, the log
//!   a line. A granted name is resolved here, and addresses that are not public are dropped
//!   unless granted literally (`destination-IP-prohibited` when none is left).
//! - **Bounded.** Connect, first-byte and between-bytes timeouts (seconds, where wasi-http's
//!   defaults are 600 s; a guest's `request-options` may only lower them); a cap on the
//!   response body (`HTTP-response-body-size` past it); per plugin, at most
//!   [`OUTBOUND_CONNECTIONS_PER_ORIGIN`] requests in flight and connections open to one origin
//!   and [`OUTBOUND_CONNECTIONS_PER_PLUGIN`] in all (a request past them waits, within the
//!   call's deadline, which every outbound wait counts against).
//! - **Pooled.** Each plugin has its own client: connections to one origin are kept alive and
//!   reused. Plugins share no connection.
//! - **TLS** with rustls and the webpki roots.
//! - **Counted** per plugin and origin in `/metrics` (at most
//!   [`OUTBOUND_ORIGINS_COUNTED`](crate::limits::OUTBOUND_ORIGINS_COUNTED) origins a plugin,
//!   the rest as `other`).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody};

use crate::limits::{OUTBOUND_CONNECTIONS_PER_ORIGIN, OUTBOUND_CONNECTIONS_PER_PLUGIN};
use crate::metrics::PluginMetrics;
use crate::runtime::host::grants::{HttpGrants, Scheme, literal};

/// The bounds of every plugin's outbound requests (`[outbound]` in the configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundConfig {
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub between_bytes_timeout: Duration,
    pub max_response_bytes: u64,
}

impl OutboundConfig {
    /// The bounds the server's limits set.
    pub fn from_limits(limits: &crate::limits::Limits) -> Self {
        OutboundConfig {
            connect_timeout: limits.outbound_connect_timeout,
            first_byte_timeout: limits.outbound_first_byte_timeout,
            between_bytes_timeout: limits.outbound_between_bytes_timeout,
            max_response_bytes: limits.outbound_max_response_bytes,
        }
    }
}

impl Default for OutboundConfig {
    fn default() -> Self {
        OutboundConfig::from_limits(&crate::limits::Limits::default())
    }
}

/// `scheme://host:port`, the key of the pool and of the figures.
type Origin = String;

/// Bounds on things a plugin holds at once (requests in flight, or open connections): so many
/// per origin, so many in all.
struct Gates {
    per_origin: usize,
    origins: Mutex<HashMap<Origin, Arc<Semaphore>>>,
    total: Arc<Semaphore>,
}

/// One place taken at a [`Gates`], given back when dropped.
struct Pass {
    _origin: OwnedSemaphorePermit,
    _total: OwnedSemaphorePermit,
}

impl Gates {
    fn new(per_origin: usize, total: usize) -> Self {
        Gates {
            per_origin,
            origins: Mutex::new(HashMap::new()),
            total: Arc::new(Semaphore::new(total)),
        }
    }

    /// Waits for a place at `origin` and in all. Places are given in the order they were
    /// asked for, from the first poll of this future.
    async fn enter(self: Arc<Self>, origin: String) -> Pass {
        let gate = {
            let mut map = self.origins.lock().unwrap_or_else(PoisonError::into_inner);
            // Bounded: a plugin reaches only granted origins, but a wildcard grant names many;
            // an origin with nothing in use is forgotten first.
            if map.len() >= crate::limits::OUTBOUND_ORIGINS_POOLED && !map.contains_key(&origin) {
                map.retain(|_, s| s.available_permits() < self.per_origin);
            }
            map.entry(origin)
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_origin)))
                .clone()
        };
        // Neither semaphore is ever closed.
        let origin = gate.acquire_owned().await.expect("an open semaphore");
        let total = self
            .total
            .clone()
            .acquire_owned()
            .await
            .expect("an open semaphore");
        Pass {
            _origin: origin,
            _total: total,
        }
    }

    /// A place at `origin` asked for now (its turn fixed), to be awaited later.
    fn line_up(self: &Arc<Self>, origin: String) -> Pin<Box<dyn Future<Output = Pass> + Send>> {
        let mut place = Box::pin(self.clone().enter(origin));
        // One poll puts it in line, or gives it its place at once.
        match place
            .as_mut()
            .poll(&mut Context::from_waker(std::task::Waker::noop()))
        {
            Poll::Ready(pass) => Box::pin(std::future::ready(pass)),
            Poll::Pending => place,
        }
    }
}

/// One plugin's outbound HTTP: its grants, its connection pool, its figures.
pub struct Outbound {
    plugin: Arc<str>,
    grants: Arc<HttpGrants>,
    config: OutboundConfig,
    /// Built on the first request (inside the runtime that drives it).
    client: std::sync::OnceLock<Client<Connector, WasiBody>>,
    /// Requests in flight: a request holds its place until its response body is done.
    in_flight: Arc<Gates>,
    metrics: Arc<PluginMetrics>,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("plugin", &self.plugin)
            .field("grants", &self.grants)
            .finish_non_exhaustive()
    }
}

/// Why a request went out no further, as the guest learns it and as the log says it.
fn refuse(plugin: &str, origin: &str, why: &str) {
    warn_limited!(plugin, origin, "outbound HTTP refused: {why}");
}

impl Outbound {
    pub fn new(
        plugin: Arc<str>,
        grants: HttpGrants,
        config: OutboundConfig,
        metrics: Arc<PluginMetrics>,
    ) -> Self {
        Outbound {
            plugin,
            grants: Arc::new(grants),
            config,
            client: std::sync::OnceLock::new(),
            in_flight: Arc::new(Gates::new(
                OUTBOUND_CONNECTIONS_PER_ORIGIN,
                OUTBOUND_CONNECTIONS_PER_PLUGIN,
            )),
            metrics,
        }
    }

    fn client(&self) -> &Client<Connector, WasiBody> {
        self.client.get_or_init(|| {
            let connector = Connector {
                grants: self.grants.clone(),
                connect_timeout: self.config.connect_timeout,
                open: Arc::new(Gates::new(
                    OUTBOUND_CONNECTIONS_PER_ORIGIN,
                    OUTBOUND_CONNECTIONS_PER_PLUGIN,
                )),
            };
            // Every connection may stay for reuse: the connection bound is the idle bound.
            Client::builder(TokioExecutor::new())
                .pool_timer(TokioTimer::new())
                .pool_idle_timeout(crate::limits::OUTBOUND_IDLE_TIMEOUT)
                .pool_max_idle_per_host(OUTBOUND_CONNECTIONS_PER_ORIGIN)
                .build(connector)
        })
    }

    /// Sends `request` for the guest (the `send_request` hook of wasi-http, called while the
    /// guest makes the request).
    pub fn send(
        self: Arc<Self>,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> impl Future<Output = Result<http::Response<WasiBody>, HttpError>> + Send + 'static {
        let started = Instant::now();
        // Whatever happens to the request, the guest's writes into its body keep working and
        // the guest learns the reason from the response (see `Drained`).
        let request = request.map(|body| Drained(Some(body)).boxed_unsync());
        let target = target(request.uri());
        let origin = target
            .as_ref()
            .map(|(scheme, host, port)| format!("{}://{host}:{port}", scheme.as_str()));
        // Its place in line at the origin is taken now, so requests go out in the order the
        // guest made them: a guest that starts many and reads the answers in that order never
        // waits on itself, however few places there are.
        let place = match (&target, &origin) {
            (Some((scheme, host, port)), Some(origin))
                if self.grants.allows(*scheme, host, *port).is_some() =>
            {
                Some(self.in_flight.line_up(origin.clone()))
            }
            _ => None,
        };
        async move {
            let (Some(origin), Some(place)) = (origin, place) else {
                return Err(match target {
                    None => HttpError::HttpRequestUriInvalid,
                    Some((scheme, host, port)) => {
                        let origin = format!("{}://{host}:{port}", scheme.as_str());
                        refuse(
                            &self.plugin,
                            &origin,
                            "no grant in capabilities.http matches",
                        );
                        self.metrics.outbound(&origin, started.elapsed(), false);
                        HttpError::HttpRequestDenied
                    }
                });
            };
            let result = self.exchange(request, options, place).await;
            if let Err(HttpError::DestinationIpProhibited) = &result {
                refuse(
                    &self.plugin,
                    &origin,
                    "the name resolves only to addresses that are not public (grant the address itself to allow it)",
                );
            }
            self.metrics
                .outbound(&origin, started.elapsed(), result.is_ok());
            result
        }
    }

    async fn exchange(
        &self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        place: Pin<Box<dyn Future<Output = Pass> + Send>>,
    ) -> Result<http::Response<WasiBody>, HttpError> {
        let lower = |ours: Duration, theirs: Option<Duration>| theirs.map_or(ours, |t| t.min(ours));
        let options = options.unwrap_or_default();
        let first_byte = lower(self.config.first_byte_timeout, options.first_byte_timeout);
        let between_bytes = lower(
            self.config.between_bytes_timeout,
            options.between_bytes_timeout,
        );
        let permit = place.await;
        let response = tokio::time::timeout(first_byte, self.client().request(request))
            .await
            .map_err(|_| HttpError::ConnectionReadTimeout)?
            .map_err(client_error)?;
        let max = self.config.max_response_bytes;
        if let Some(len) = response.body().size_hint().exact()
            && len > max
        {
            return Err(HttpError::HttpResponseBodySize(Some(len)));
        }
        Ok(response.map(|incoming| {
            Bounded {
                inner: incoming,
                left: max,
                between_bytes,
                timer: None,
                _permit: permit,
            }
            .boxed_unsync()
        }))
    }
}

/// The scheme, host and port a request goes to.
fn target(uri: &http::Uri) -> Option<(Scheme, String, u16)> {
    let scheme = Scheme::parse(uri.scheme_str()?)?;
    let host = uri.host()?.to_owned();
    let port = uri.port_u16().unwrap_or(scheme.default_port());
    Some((scheme, host, port))
}

/// The wasi-http error for what the client reports: the connector's own reasons first.
fn client_error(e: hyper_util::client::legacy::Error) -> HttpError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = source {
        if let Some(c) = err.downcast_ref::<ConnectError>() {
            return c.to_wasi();
        }
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            if h.is_timeout() {
                return HttpError::HttpResponseTimeout;
            }
            if h.is_incomplete_message() || h.is_closed() {
                return HttpError::HttpResponseIncomplete;
            }
            if h.is_parse() {
                return HttpError::HttpProtocolError;
            }
        }
        source = err.source();
    }
    if e.is_connect() {
        HttpError::ConnectionRefused
    } else {
        HttpError::HttpProtocolError
    }
}

/// A response body under the cap and the between-bytes timeout, holding its origin's permit
/// until it is done.
struct Bounded {
    inner: hyper::body::Incoming,
    left: u64,
    between_bytes: Duration,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    _permit: Pass,
}

impl Body for Bounded {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.timer = None;
                if let Some(data) = frame.data_ref() {
                    let len = data.len() as u64;
                    if len > this.left {
                        return Poll::Ready(Some(Err(HttpError::HttpResponseBodySize(None))));
                    }
                    this.left -= len;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(if e.is_timeout() {
                HttpError::HttpResponseTimeout
            } else {
                HttpError::HttpResponseIncomplete
            }))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let between = this.between_bytes;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(between)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that, dropped before its end (the request was refused, or its connection
/// failed), goes on being read in the background until the guest ends it. Without this the
/// guest's next write or `finish` fails with a reset stream, and a guest that writes its body
/// before it asks for the response (as most do) reports that instead of the refusal.
struct Drained(Option<WasiBody>);

impl Body for Drained {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let Some(body) = self.0.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = Pin::new(body).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            self.0 = None;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.0.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.0
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for Drained {
    fn drop(&mut self) {
        let Some(mut body) = self.0.take() else {
            return;
        };
        // Bounded by the guest: the writer is its stream, which ends with its call at the
        // latest. Outside a runtime (never, for a request the hook took) it is just dropped.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { while let Some(Ok(_)) = body.frame().await {} });
        }
    }
}

/// Why the connector made no connection.
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    #[error("name lookup failed: {0}")]
    Dns(io::Error),
    #[error("every address of the name is prohibited ({0:?})")]
    Prohibited(Vec<IpAddr>),
    #[error("connect timed out")]
    Timeout,
    #[error("connection refused: {0}")]
    Refused(io::Error),
    #[error("cannot connect: {0}")]
    Io(io::Error),
    #[error("TLS: {0}")]
    Tls(io::Error),
    #[error("a URL without a host or scheme")]
    BadUri,
}

impl ConnectError {
    fn to_wasi(&self) -> HttpError {
        match self {
            ConnectError::Dns(_) => HttpError::DnsError {
                rcode: None,
                info_code: None,
            },
            ConnectError::Prohibited(_) => HttpError::DestinationIpProhibited,
            ConnectError::Timeout => HttpError::ConnectionTimeout,
            ConnectError::Refused(_) => HttpError::ConnectionRefused,
            ConnectError::Io(_) => HttpError::DestinationUnavailable,
            ConnectError::Tls(_) => HttpError::TlsProtocolError,
            ConnectError::BadUri => HttpError::HttpRequestUriInvalid,
        }
    }
}

/// Opens connections for the pool: resolves the name itself, drops the addresses the grants
/// do not allow, connects within the timeout, and speaks TLS for `https`.
#[derive(Clone)]
struct Connector {
    grants: Arc<HttpGrants>,
    connect_timeout: Duration,
    /// Connections open, per origin and in all.
    open: Arc<Gates>,
}

impl tower_service::Service<http::Uri> for Connector {
    type Response = Conn;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + this.connect_timeout;
            tokio::time::timeout_at(deadline, this.connect(uri))
                .await
                .map_err(|_| ConnectError::Timeout)?
        })
    }
}

impl Connector {
    async fn connect(self, uri: http::Uri) -> Result<Conn, ConnectError> {
        let (scheme, host, port) = target(&uri).ok_or(ConnectError::BadUri)?;
        // A place among the plugin's connections, held for as long as the connection lives.
        let open = self
            .open
            .clone()
            .enter(format!("{}://{host}:{port}", scheme.as_str()))
            .await;
        let addrs: Vec<SocketAddr> = match literal(&host) {
            Some(ip) => vec![SocketAddr::new(ip, port)],
            None => tokio::net::lookup_host((host.as_str(), port))
                .await
                .map_err(ConnectError::Dns)?
                .collect(),
        };
        let (allowed, prohibited): (Vec<_>, Vec<_>) = addrs
            .into_iter()
            .partition(|a| self.grants.may_connect(scheme, a.ip(), port));
        if allowed.is_empty() {
            return Err(ConnectError::Prohibited(
                prohibited.iter().map(SocketAddr::ip).collect(),
            ));
        }
        let mut last = None;
        let mut tcp = None;
        for addr in allowed {
            match TcpStream::connect(addr).await {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let tcp = match tcp {
            Some(tcp) => tcp,
            None => {
                let e = last.unwrap_or_else(|| io::Error::other("no address"));
                return Err(if e.kind() == io::ErrorKind::ConnectionRefused {
                    ConnectError::Refused(e)
                } else {
                    ConnectError::Io(e)
                });
            }
        };
        let _ = tcp.set_nodelay(true);
        let stream = match scheme {
            Scheme::Http => Stream::Plain(tcp),
            Scheme::Https => {
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .map_err(|e| ConnectError::Tls(io::Error::other(e)))?;
                let tls = tokio_rustls::TlsConnector::from(tls_config())
                    .connect(name, tcp)
                    .await
                    .map_err(ConnectError::Tls)?;
                Stream::Tls(Box::new(tls))
            }
        };
        Ok(Conn {
            io: TokioIo::new(stream),
            _open: open,
        })
    }
}

/// One rustls client configuration with the webpki roots, for every plugin.
fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: std::sync::LazyLock<Arc<rustls::ClientConfig>> =
        std::sync::LazyLock::new(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.into(),
            };
            let config = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
            Arc::new(config)
        });
    CONFIG.clone()
}

/// A connection, plain or TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// What the pool holds: a connection it may reuse.
struct Conn {
    io: TokioIo<Stream>,
    _open: Pass,
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl Read for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl Write for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// wasi-http's hooks for one store: its plugin's outbound client, and the body buffers of
/// wasi:http streams (see `runtime::engine::proxy` for why they are sized so).
pub struct HttpHooks {
    pub outbound: Arc<Outbound>,
    /// Writes a body stream may buffer before it is read.
    pub body_buffer_chunks: usize,
}

impl wasmtime_wasi_http::WasiHttpHooks for HttpHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<
        dyn Future<
                Output = Result<
                    (
                        http::Response<WasiBody>,
                        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
                    ),
                    HttpError,
                >,
            > + Send,
    > {
        // The pool drives each connection itself: nothing to report back on `fut`.
        drop(fut);
        let send = self.outbound.clone().send(request, options);
        Box::new(async move {
            let response = send.await?;
            let done: Box<dyn Future<Output = Result<(), HttpError>> + Send> =
                Box::new(std::future::ready(Ok(())));
            Ok((response, done))
        })
    }

    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        self.body_buffer_chunks
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        crate::limits::HTTP_BODY_WRITE_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls `f` once: its output if it is ready at once.
    fn at_once<F: Future>(f: F) -> Option<F::Output> {
        let mut f = std::pin::pin!(f);
        match f
            .as_mut()
            .poll(&mut Context::from_waker(std::task::Waker::noop()))
        {
            Poll::Ready(out) => Some(out),
            Poll::Pending => None,
        }
    }

    #[test]
    fn gates_bound_each_origin_and_the_whole() {
        let gates = Arc::new(Gates::new(2, 3));
        let enter = |origin: &str| gates.clone().enter(origin.to_owned());
        let a1 = at_once(enter("http://a:80")).expect("a place");
        let _a2 = at_once(enter("http://a:80")).expect("a place");
        assert!(
            at_once(enter("http://a:80")).is_none(),
            "a third at one origin"
        );
        let _b1 = at_once(enter("http://b:80")).expect("a place");
        assert!(at_once(enter("http://c:80")).is_none(), "a fourth in all");
        drop(a1);
        assert!(
            at_once(enter("http://c:80")).is_some(),
            "a place given back"
        );
    }

    #[test]
    fn places_are_given_in_the_order_they_were_asked_for() {
        let gates = Arc::new(Gates::new(1, 10));
        let first = at_once(gates.clone().enter("o".into())).expect("a place");
        let mut second = gates.line_up("o".into());
        let mut third = gates.line_up("o".into());
        drop(first);
        let noop = &mut Context::from_waker(std::task::Waker::noop());
        assert!(
            third.as_mut().poll(noop).is_pending(),
            "the third went first"
        );
        let Poll::Ready(second) = second.as_mut().poll(noop) else {
            panic!("the second's turn")
        };
        drop(second);
        assert!(third.as_mut().poll(noop).is_ready());
    }
}
