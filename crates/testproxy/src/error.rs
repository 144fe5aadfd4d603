//! The one error type of the crate: each variant names what failed and with which value.

use std::net::SocketAddr;
use std::time::Duration;

/// Why a role of `testproxy` failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A listener could not be bound (address in use, no such address, no permission).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// A URL that is not `http://HOST[:PORT][/PATH]`.
    #[error("URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    /// The host name of a URL did not resolve.
    #[error("resolving {host:?}: {source}")]
    Resolve {
        host: String,
        #[source]
        source: std::io::Error,
    },
    /// No address of the destination accepted a connection.
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// An operation did not finish in its bound.
    #[error("{what}: no answer within {after:?}")]
    Timeout { what: String, after: Duration },
    /// The HTTP exchange failed (connection closed, malformed response).
    #[error("{url}: {source}")]
    Http {
        url: String,
        #[source]
        source: hyper::Error,
    },
    /// The server answered with a status that is not 2xx.
    #[error("{url}: HTTP {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    /// The response body is larger than the client reads.
    #[error("{url}: the response body is larger than {limit} bytes")]
    BodyTooLarge { url: String, limit: usize },
    /// `ISTIO_KUBE_APP_PROBERS` is not the JSON object Istio's injector writes.
    #[error("ISTIO_KUBE_APP_PROBERS: {0}")]
    Probers(String),
    /// A command-line value out of its range.
    #[error("{flag} {value}: {reason}")]
    Arg {
        flag: &'static str,
        value: String,
        reason: &'static str,
    },
    /// A connection made to the proxy's own capture port rather than redirected to it: relaying it to
    /// its "original" destination would connect to the proxy again, without end.
    #[error("a connection to {destination} was made to the proxy's own port, not redirected to it; not relayed")]
    NotRedirected { destination: SocketAddr },
    /// Any other I/O error (signal handlers, the runtime), with what was being done.
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}
