//! Opening an outbound connection for the pool: the name resolved here, the addresses the
//! plugin's grants do not allow dropped, the connect timeout, TLS (rustls with the webpki
//! roots) for `https`, and hyper's I/O traits over the result.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use wasmtime_wasi_http::Error as HttpError;

use super::gates::{Gates, Pass};
use super::target;
use crate::runtime::host::grants::{HttpGrants, Scheme, literal};

/// Why the connector made no connection.
#[derive(Debug, thiserror::Error)]
pub(super) enum ConnectError {
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
    pub(super) fn to_wasi(&self) -> HttpError {
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
pub(super) struct Connector {
    pub(super) grants: Arc<HttpGrants>,
    pub(super) connect_timeout: Duration,
    /// Connections open, per origin and in all.
    pub(super) open: Arc<Gates>,
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
pub(super) enum Stream {
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
pub(super) struct Conn {
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
