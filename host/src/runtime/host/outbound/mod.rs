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
//!   `[outbound] connections_per_origin` requests in flight and connections open to one
//!   origin ([`OUTBOUND_CONNECTIONS_PER_ORIGIN`](crate::limits::OUTBOUND_CONNECTIONS_PER_ORIGIN)
//!   unless set) and [`OUTBOUND_CONNECTIONS_PER_PLUGIN`] in all (a request past them waits,
//!   within the call's deadline, which every outbound wait counts against).
//! - **Pooled.** Each plugin has its own client: connections to one origin are kept alive and
//!   reused. Plugins share no connection.
//! - **TLS** with rustls and the webpki roots.
//! - **Counted** per plugin and origin in `/metrics` (at most
//!   [`OUTBOUND_ORIGINS_COUNTED`](crate::limits::OUTBOUND_ORIGINS_COUNTED) origins a plugin,
//!   the rest as `other`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body::Body;
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody};

mod body;
mod connect;
mod gates;

use body::{Bounded, Drained};
use connect::{ConnectError, Connector};
use gates::{Gates, Pass};

use crate::limits::OUTBOUND_CONNECTIONS_PER_PLUGIN;
use crate::metrics::PluginMetrics;
use crate::runtime::host::grants::{HttpGrants, Scheme};

/// The bounds of every plugin's outbound requests (`[outbound]` in the configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutboundConfig {
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub between_bytes_timeout: Duration,
    pub max_response_bytes: u64,
    /// Requests in flight, and connections open, to one origin.
    pub connections_per_origin: usize,
}

impl OutboundConfig {
    /// The bounds the server's limits set.
    pub(crate) fn from_limits(limits: &crate::limits::Limits) -> Self {
        OutboundConfig {
            connect_timeout: limits.outbound_connect_timeout,
            first_byte_timeout: limits.outbound_first_byte_timeout,
            between_bytes_timeout: limits.outbound_between_bytes_timeout,
            max_response_bytes: limits.outbound_max_response_bytes,
            connections_per_origin: limits.outbound_connections_per_origin,
        }
    }
}

impl Default for OutboundConfig {
    fn default() -> Self {
        OutboundConfig::from_limits(&crate::limits::Limits::default())
    }
}

/// One plugin's outbound HTTP: its grants, its connection pool, its figures.
pub(crate) struct Outbound {
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

/// The origin label of the requests that went nowhere (refused before any connection).
const DENIED: &str = "denied";

/// Why a request went out no further, as the guest learns it and as the log says it.
fn refuse(plugin: &str, origin: &str, why: &str) {
    warn_limited!(plugin, origin, "outbound HTTP refused: {why}");
}

impl Outbound {
    pub(crate) fn new(
        plugin: Arc<str>,
        grants: HttpGrants,
        config: OutboundConfig,
        metrics: Arc<PluginMetrics>,
    ) -> Self {
        Outbound {
            plugin,
            grants: Arc::new(grants),
            client: std::sync::OnceLock::new(),
            in_flight: Arc::new(Gates::new(
                config.connections_per_origin,
                OUTBOUND_CONNECTIONS_PER_PLUGIN,
            )),
            config,
            metrics,
        }
    }

    fn client(&self) -> &Client<Connector, WasiBody> {
        self.client.get_or_init(|| {
            let connector = Connector {
                grants: self.grants.clone(),
                connect_timeout: self.config.connect_timeout,
                open: Arc::new(Gates::new(
                    self.config.connections_per_origin,
                    OUTBOUND_CONNECTIONS_PER_PLUGIN,
                )),
            };
            // Every connection may stay for reuse: the connection bound is the idle bound.
            Client::builder(TokioExecutor::new())
                .pool_timer(TokioTimer::new())
                .pool_idle_timeout(crate::limits::OUTBOUND_IDLE_TIMEOUT)
                .pool_max_idle_per_host(self.config.connections_per_origin)
                .build(connector)
        })
    }

    /// Sends `request` for the guest (the `send_request` hook of wasi-http, called while the
    /// guest makes the request).
    pub(crate) fn send(
        self: Arc<Self>,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> impl Future<Output = Result<http::Response<WasiBody>, HttpError>> + Send + 'static {
        let started = Instant::now();
        // Whatever happens to the request, the guest's writes into its body keep working and
        // the guest learns the reason from the response (see `Drained`).
        let request = request.map(|body| Drained(Some(body)).boxed_unsync());
        // Credentials in the authority (`http://user:pass@host/`) are refused: HTTP senders
        // must not generate them (RFC 9110, 4.2.4), and they would reach the `Host` header.
        let userinfo = request
            .uri()
            .authority()
            .is_some_and(|a| a.as_str().contains('@'));
        let target = target(request.uri()).filter(|_| !userinfo);
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
                // Counted under one label: a denied origin is the guest's text, and must not
                // take one of the plugin's labels.
                self.metrics.outbound(DENIED, started.elapsed(), false);
                return Err(match target {
                    None if userinfo => {
                        refuse(
                            &self.plugin,
                            DENIED,
                            "a URL with user information (user:password@) is refused",
                        );
                        HttpError::HttpRequestUriInvalid
                    }
                    None => HttpError::HttpRequestUriInvalid,
                    Some((scheme, host, port)) => {
                        let origin = format!("{}://{host}:{port}", scheme.as_str());
                        refuse(
                            &self.plugin,
                            &origin,
                            "no grant in capabilities.http matches",
                        );
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

/// What a client span says of its request: the method and where it went, not its path or
/// query (which may hold a key).
fn client_attributes<B>(request: &http::Request<B>) -> Vec<(&'static str, crate::trace::Attr)> {
    use crate::trace::Attr;
    let uri = request.uri();
    let mut out = vec![(
        "http.request.method",
        Attr::Text(request.method().as_str().to_owned().into()),
    )];
    if let Some(host) = uri.host() {
        out.push(("server.address", Attr::Text(host.to_owned().into())));
    }
    if let Some(port) = uri.port_u16().or_else(|| match uri.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    }) {
        out.push(("server.port", Attr::Int(i64::from(port))));
    }
    out
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

/// wasi-http's hooks for one store: its plugin's outbound client, and the body buffers of
/// wasi:http streams (see `runtime::engine::proxy` for why they are sized so).
pub(crate) struct HttpHooks {
    pub outbound: Arc<Outbound>,
    /// Writes a body stream may buffer before it is read.
    pub body_buffer_chunks: usize,
    /// The store's tags: the trace of the call that sends.
    pub tags: Arc<crate::runtime::host::stdio::LogTags>,
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
        // The trace goes on: a client span of the call's, named in `traceparent` (or, when
        // nothing is recorded, the caller's context as it came).
        let mut request = request;
        let parent = self.tags.trace();
        let span = crate::trace::Timed::start(
            parent,
            request.method().as_str().to_owned(),
            crate::trace::Kind::Client,
        );
        if let Some(context) = span.as_ref().map(|s| s.context).or(parent)
            && let Ok(value) = http::HeaderValue::from_str(&context.traceparent())
        {
            request.headers_mut().insert("traceparent", value);
            // The caller's vendors' state goes on with it (W3C trace context).
            if let Some(state) = self.tags.tracestate()
                && let Ok(state) = http::HeaderValue::from_str(&state)
            {
                request.headers_mut().insert("tracestate", state);
            }
        }
        let attributes = span.as_ref().map(|_| client_attributes(&request));
        let send = self.outbound.clone().send(request, options);
        Box::new(async move {
            let response = send.await;
            if let (Some(span), Some(mut attributes)) = (span, attributes) {
                let error = match &response {
                    Ok(r) => {
                        attributes.push((
                            "http.response.status_code",
                            crate::trace::Attr::Int(i64::from(r.status().as_u16())),
                        ));
                        None
                    }
                    Err(e) => Some(format!("{e:?}")),
                };
                span.end(attributes, error);
            }
            let response = response?;
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

    /// The most one write of a 0.3 guest into a body's stream is copied out in: a write as
    /// large as its memory is moved in pieces of this size.
    fn p3_outgoing_body_chunk_size(&mut self) -> usize {
        crate::limits::HTTP_BODY_WRITE_BYTES
    }
}
