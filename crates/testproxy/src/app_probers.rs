//! The application probes the injector rewrote to pilot-agent's status port: `ISTIO_KUBE_APP_PROBERS`
//! maps each `/app-health/<container>/<livez|readyz|startupz>` path to the original probe, and the proxy
//! answers a request there by running that probe against the application (pilot-agent's
//! `handleAppProbe` in `pilot/cmd/pilot-agent/status/server.go`).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde::Deserialize;

use crate::Error;

/// At most this many probers are read from the variable (three per container).
pub const MAX_PROBERS: usize = 256;
/// pilot-agent's `maxRespBodyLength`: the app's probe answer is cut to this.
pub const MAX_BODY: usize = 10 * 1024;
/// Kubernetes' default probe timeout, when the prober names none.
const DEFAULT_TIMEOUT_SECONDS: u64 = 1;
/// The longest probe timeout honoured.
const MAX_TIMEOUT_SECONDS: u64 = 60;

/// A port as Kubernetes writes it in a probe (the injector resolves named ports to numbers).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
enum Port {
    Number(u16),
    Text(String),
}

impl Port {
    fn number(&self) -> Option<u16> {
        match self {
            Port::Number(n) => Some(*n),
            Port::Text(s) => s.parse().ok(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
struct Header {
    name: String,
    value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HttpGet {
    #[serde(default)]
    path: String,
    port: Port,
    #[serde(default)]
    scheme: String,
    #[serde(default)]
    http_headers: Vec<Header>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
struct TcpSocket {
    port: Port,
}

/// One rewritten probe.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Prober {
    #[serde(default)]
    http_get: Option<HttpGet>,
    #[serde(default)]
    tcp_socket: Option<TcpSocket>,
    #[serde(default)]
    grpc: Option<serde_json::Value>,
    #[serde(default)]
    timeout_seconds: Option<u64>,
}

/// The probers by path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Probers {
    by_path: HashMap<String, Prober>,
}

impl Probers {
    /// Parses the variable's value (empty: no probers).
    pub fn parse(json: &str) -> Result<Probers, Error> {
        if json.trim().is_empty() {
            return Ok(Probers::default());
        }
        let by_path: HashMap<String, Prober> =
            serde_json::from_str(json).map_err(|e| Error::Probers(e.to_string()))?;
        if by_path.len() > MAX_PROBERS {
            return Err(Error::Probers(format!(
                "{} probers, at most {MAX_PROBERS}",
                by_path.len()
            )));
        }
        for (path, p) in &by_path {
            if !path.starts_with("/app-health/") {
                return Err(Error::Probers(format!(
                    "path {path:?} is not under /app-health/"
                )));
            }
            let port = p
                .http_get
                .as_ref()
                .map(|h| &h.port)
                .or(p.tcp_socket.as_ref().map(|t| &t.port));
            if let Some(port) = port {
                if port.number().is_none_or(|n| n == 0) {
                    return Err(Error::Probers(format!(
                        "{path}: port {port:?} is not a port number"
                    )));
                }
            }
        }
        Ok(Probers { by_path })
    }

    /// The prober of `path`, if any.
    pub fn get(&self, path: &str) -> Option<&Prober> {
        self.by_path.get(path)
    }

    pub fn len(&self) -> usize {
        self.by_path.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_path.is_empty()
    }
}

impl Prober {
    fn timeout(&self) -> Duration {
        let s = self
            .timeout_seconds
            .filter(|s| *s > 0)
            .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
            .min(MAX_TIMEOUT_SECONDS);
        Duration::from_secs(s)
    }

    /// Runs the probe against the application at `destination` (the pod's address), from the inbound
    /// passthrough source so the interception rules let it through. Returns the status to answer and
    /// the body.
    pub async fn run(&self, destination: IpAddr) -> (StatusCode, Bytes) {
        let source = Some(crate::relay::passthrough_source(destination));
        if let Some(h) = &self.http_get {
            if h.scheme.eq_ignore_ascii_case("https") {
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    Bytes::from_static(b"testproxy: HTTPS app probes are not served\n"),
                );
            }
            let port = h.port.number().unwrap_or(0);
            let path = if h.path.starts_with('/') {
                h.path.clone()
            } else {
                format!("/{}", h.path)
            };
            let url = format!("http://{}{path}", SocketAddr::new(destination, port));
            let headers: Vec<(String, String)> = h
                .http_headers
                .iter()
                .map(|x| (x.name.clone(), x.value.clone()))
                .collect();
            return match crate::http::fetch(
                Method::GET,
                &url,
                Bytes::new(),
                &headers,
                source,
                self.timeout(),
                crate::http::Limit::Truncate(MAX_BODY),
            )
            .await
            {
                // pilot-agent answers a redirect with 200 (the Location is not followed).
                Ok((status, _)) if status.is_redirection() => (StatusCode::OK, Bytes::new()),
                Ok((status, body)) => (status, body),
                Err(e) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    Bytes::from(format!("{e}\n")),
                ),
            };
        }
        if let Some(t) = &self.tcp_socket {
            let addr = SocketAddr::new(destination, t.port.number().unwrap_or(0));
            return match crate::relay::connect(addr, source, self.timeout()).await {
                Ok(_) => (StatusCode::OK, Bytes::new()),
                Err(e) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    Bytes::from(format!("{e}\n")),
                ),
            };
        }
        let what = if self.grpc.is_some() {
            "gRPC"
        } else {
            "this kind of"
        };
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            Bytes::from(format!("testproxy: {what} app probes are not served\n")),
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_injector_s_value_parses() {
        // As `injector kube-inject -f examples/hello.yaml` writes it.
        let p = Probers::parse(
            r#"{"/app-health/hello/readyz":{"httpGet":{"path":"/","port":80,"scheme":"HTTP"},"timeoutSeconds":1}}"#,
        )
        .unwrap();
        assert_eq!(p.len(), 1);
        let r = p.get("/app-health/hello/readyz").unwrap();
        assert_eq!(r.timeout(), Duration::from_secs(1));
        assert!(Probers::parse("").unwrap().is_empty());
    }

    #[test]
    fn bad_values_are_named() {
        let e = Probers::parse("[1]").unwrap_err().to_string();
        assert!(e.starts_with("ISTIO_KUBE_APP_PROBERS: "), "{e}");
        let e = Probers::parse(r#"{"/x":{"tcpSocket":{"port":80}}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"/x\" is not under /app-health/"), "{e}");
        let e = Probers::parse(r#"{"/app-health/a/livez":{"tcpSocket":{"port":"http"}}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a port number"), "{e}");
    }

    #[test]
    fn the_number_of_probers_is_bounded() {
        let many: serde_json::Map<String, serde_json::Value> = (0..=MAX_PROBERS)
            .map(|i| {
                (
                    format!("/app-health/c{i}/livez"),
                    serde_json::json!({"tcpSocket": {"port": 80}}),
                )
            })
            .collect();
        let e = Probers::parse(&serde_json::Value::Object(many).to_string()).unwrap_err();
        assert!(e.to_string().contains("at most 256"), "{e}");
    }

    #[test]
    fn the_probe_timeout_is_bounded() {
        let p: Prober =
            serde_json::from_str(r#"{"tcpSocket":{"port":1},"timeoutSeconds":100000}"#).unwrap();
        assert_eq!(p.timeout(), Duration::from_secs(MAX_TIMEOUT_SECONDS));
    }
}
