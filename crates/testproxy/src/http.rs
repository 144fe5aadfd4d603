//! The small HTTP/1 server and client every role shares (hyper): one request per connection, bounded
//! header wait, connection lifetime, concurrent connections and response bodies.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::{TokioIo, TokioTimer};
use nix::sys::socket::{setsockopt, sockopt};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::Semaphore;

use crate::Error;

/// A request's headers must arrive within this.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A served connection (one request: `Connection: close`) is dropped after this.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);
/// Concurrent connections per server (the admin, status and echo servers each have their own).
pub const MAX_SERVER_CONNECTIONS: usize = 256;

/// Response bodies of the servers.
pub type Body = Full<Bytes>;

/// A `text/plain` response.
pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// A JSON response.
pub fn json(value: &serde_json::Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(value.to_string())));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// Binds a TCP listener on `addr`; an IPv6 one takes IPv6 only, so that `0.0.0.0` and `[::]` can both
/// be bound to the same port. With `transparent`, it also tries `IP_TRANSPARENT` (TPROXY delivers
/// connections for foreign addresses only to such a socket; it needs NET_ADMIN, which Istio gives the
/// proxy in TPROXY mode only, so without it the listener is an ordinary one).
pub fn listen(addr: SocketAddr, transparent: bool) -> Result<TcpListener, Error> {
    let err = |source| Error::Bind { addr, source };
    let socket = match addr.ip() {
        IpAddr::V4(_) => TcpSocket::new_v4(),
        IpAddr::V6(_) => {
            let s = TcpSocket::new_v6().map_err(err)?;
            setsockopt(&s, sockopt::Ipv6V6Only, &true).map_err(|e| err(e.into()))?;
            Ok(s)
        }
    }
    .map_err(err)?;
    socket.set_reuseaddr(true).map_err(err)?;
    if transparent {
        let _ = setsockopt(&socket, sockopt::IpTransparent, &true);
    }
    socket.bind(addr).map_err(err)?;
    socket.listen(1024).map_err(err)
}

/// Serves `handler` on `listener` forever (the caller aborts the task to stop it).
pub async fn serve<H, F>(listener: TcpListener, handler: H)
where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let limit = Arc::new(Semaphore::new(MAX_SERVER_CONNECTIONS));
    loop {
        let Ok(permit) = limit.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and the like: back off instead of spinning.
                eprintln!("testproxy: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |req| {
                let h = handler.clone();
                async move { Ok::<_, Infallible>(h(req, peer).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
        });
    }
}

/// A parsed `http://` URL: where to connect and what to ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The host as written, without IPv6 brackets.
    pub host: String,
    pub port: u16,
    /// `host[:port]` as written, for the `Host` header.
    pub authority: String,
    pub path_and_query: String,
}

impl Target {
    /// Parses `http://HOST[:PORT][/PATH]`.
    pub fn parse(url: &str) -> Result<Target, Error> {
        let bad = |reason: &str| Error::Url {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| bad(&e.to_string()))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => return Err(bad(&format!("scheme {other:?} is not served, only http"))),
            None => return Err(bad("no scheme: write http://HOST[:PORT][/PATH]")),
        }
        let authority = uri.authority().ok_or_else(|| bad("no host"))?;
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        if host.is_empty() {
            return Err(bad("no host"));
        }
        Ok(Target {
            host: host.to_string(),
            port: authority.port_u16().unwrap_or(80),
            authority: authority.as_str().to_string(),
            path_and_query: uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
        })
    }
}

/// What [`fetch`] does with a response body longer than the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Fail with [`Error::BodyTooLarge`].
    Refuse(usize),
    /// Keep the first bytes (pilot-agent's probe answers are cut like this).
    Truncate(usize),
}

impl Limit {
    fn bytes(self) -> usize {
        match self {
            Limit::Refuse(n) | Limit::Truncate(n) => n,
        }
    }
}

/// At most this many resolved addresses are tried.
const MAX_ADDRESSES: usize = 8;

/// One HTTP/1 request to `url` from `source` (when given), all of it (resolving, connecting, answer,
/// body) within `timeout`, reading at most `body_limit` bytes of the body. Returns the status and the
/// body whatever the status.
pub async fn fetch(
    method: Method,
    url: &str,
    body: Bytes,
    headers: &[(String, String)],
    source: Option<IpAddr>,
    timeout: Duration,
    body_limit: Limit,
) -> Result<(StatusCode, Bytes), Error> {
    let target = Target::parse(url)?;
    let work = async {
        // `localhost` without a resolver: a FROM-scratch image has no /etc/hosts of its own (pilot-agent's
        // `wait` and `request` target it).
        let resolved: Vec<SocketAddr> = if target.host.eq_ignore_ascii_case("localhost") {
            vec![
                SocketAddr::from((Ipv4Addr::LOCALHOST, target.port)),
                SocketAddr::from((Ipv6Addr::LOCALHOST, target.port)),
            ]
        } else {
            tokio::net::lookup_host((target.host.as_str(), target.port))
                .await
                .map_err(|source| Error::Resolve {
                    host: target.host.clone(),
                    source,
                })?
                .take(MAX_ADDRESSES)
                .collect()
        };
        let mut last = None;
        let mut stream = None;
        for addr in resolved {
            let from = source.filter(|s| s.is_ipv4() == addr.is_ipv4());
            match crate::relay::connect(addr, from, timeout).await {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream = match (stream, last) {
            (Some(s), _) => s,
            (None, Some(e)) => return Err(e),
            (None, None) => {
                return Err(Error::Resolve {
                    host: target.host.clone(),
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, "no addresses"),
                })
            }
        };
        let http_err = |source| Error::Http {
            url: url.to_string(),
            source,
        };
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(http_err)?;
        let conn = tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method)
            .uri(target.path_and_query.as_str())
            .header(HOST, target.authority.as_str())
            .header(CONNECTION, "close");
        for (name, value) in headers {
            req = req.header(name.as_str(), value.as_str());
        }
        let req = req.body(Full::new(body)).map_err(|e| Error::Url {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
        let resp = sender.send_request(req).await.map_err(http_err)?;
        let status = resp.status();
        let mut body = resp.into_body();
        let mut bytes = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(http_err)?;
            if let Ok(data) = frame.into_data() {
                if bytes.len() + data.len() > body_limit.bytes() {
                    match body_limit {
                        Limit::Refuse(limit) => {
                            return Err(Error::BodyTooLarge {
                                url: url.to_string(),
                                limit,
                            })
                        }
                        Limit::Truncate(limit) => {
                            let room = limit - bytes.len();
                            bytes.extend_from_slice(&data[..room]);
                            break;
                        }
                    }
                }
                bytes.extend_from_slice(&data);
            }
        }
        conn.abort();
        let bytes = Bytes::from(bytes);
        Ok((status, bytes))
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(Error::Timeout {
            what: url.to_string(),
            after: timeout,
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_names_addresses_and_default_port_and_path() {
        let t = Target::parse("http://echo.demo.svc:8080/x?y=1").unwrap();
        assert_eq!(
            (
                t.host.as_str(),
                t.port,
                t.authority.as_str(),
                t.path_and_query.as_str()
            ),
            ("echo.demo.svc", 8080, "echo.demo.svc:8080", "/x?y=1")
        );
        let t = Target::parse("http://[fd00::2]:80").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path_and_query.as_str()),
            ("fd00::2", 80, "/")
        );
        assert_eq!(Target::parse("http://10.0.0.1").unwrap().port, 80);
    }

    #[test]
    fn other_schemes_and_missing_parts_are_named() {
        let e = Target::parse("https://x/").unwrap_err().to_string();
        assert!(e.contains("\"https\" is not served"), "{e}");
        let e = Target::parse("x:80").unwrap_err().to_string();
        assert!(e.contains("URL \"x:80\""), "{e}");
        let e = Target::parse("/only/a/path").unwrap_err().to_string();
        assert!(e.contains("no scheme"), "{e}");
    }

    /// A GET of `url` with no body, no header and no source address.
    async fn get(url: &str, timeout: Duration, limit: Limit) -> Result<(StatusCode, Bytes), Error> {
        fetch(Method::GET, url, Bytes::new(), &[], None, timeout, limit).await
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused() {
        let l = listen("127.0.0.1:0".parse().unwrap(), false).unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(serve(l, |_req, _peer| async {
            text(StatusCode::OK, vec![b'x'; 4096])
        }));
        let url = format!("http://{addr}/");
        let t = Duration::from_secs(30);
        let (status, body) = get(&url, t, Limit::Refuse(4096)).await.unwrap();
        assert_eq!((status, body.len()), (StatusCode::OK, 4096));
        let e = get(&url, t, Limit::Refuse(4095)).await.unwrap_err();
        assert!(matches!(e, Error::BodyTooLarge { limit: 4095, .. }), "{e}");
        let (_, cut) = get(&url, t, Limit::Truncate(100)).await.unwrap();
        assert_eq!(cut.len(), 100);
    }

    #[tokio::test]
    async fn a_silent_server_times_out() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let url = format!("http://{addr}/");
        let e = get(&url, Duration::from_millis(300), Limit::Refuse(10))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
        drop(l);
    }
}
