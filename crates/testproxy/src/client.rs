//! The client roles: `get` (the test client), and pilot-agent's `wait` and `request` (the injected
//! lifecycle hooks).

use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;

use crate::cli::{GetArgs, RequestArgs, WaitArgs};
use crate::http::{fetch, Limit};
use crate::Error;

/// The most of a response body `get` and `request` print.
pub const MAX_BODY: usize = 1024 * 1024;
/// pilot-agent's `request` client timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The start of a body, for an error message.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
    text.trim().to_string()
}

/// `get URL`: the body of a 2xx answer.
pub async fn get(args: &GetArgs) -> Result<Bytes, Error> {
    let timeout = Duration::from_secs(args.timeout_seconds);
    success(Method::GET, &args.url, Bytes::new(), timeout).await
}

/// One request of `method` to `url` with `body`: the body of a 2xx answer (at most [`MAX_BODY`]), or
/// the status with the start of its body.
async fn success(
    method: Method,
    url: &str,
    body: Bytes,
    timeout: Duration,
) -> Result<Bytes, Error> {
    let (status, answer) = fetch(
        method,
        url,
        body,
        &[],
        None,
        timeout,
        Limit::Refuse(MAX_BODY),
    )
    .await?;
    if !status.is_success() {
        return Err(Error::Status {
            url: url.to_string(),
            status: status.as_u16(),
            body: excerpt(&answer),
        });
    }
    Ok(answer)
}

/// `wait`: polls until the URL answers 200, as pilot-agent's `wait` does.
pub async fn wait(args: &WaitArgs) -> Result<(), Error> {
    let total = Duration::from_secs(args.timeout_seconds);
    let deadline = Instant::now() + total;
    let per_request = Duration::from_millis(args.request_timeout_millis);
    let period = Duration::from_millis(args.period_millis);
    loop {
        let last = match fetch(
            Method::GET,
            &args.url,
            Bytes::new(),
            &[],
            None,
            per_request,
            Limit::Truncate(1024),
        )
        .await
        {
            Ok((s, _)) if s == hyper::StatusCode::OK => return Ok(()),
            Ok((s, body)) => format!("HTTP {}: {}", s.as_u16(), excerpt(&body)),
            Err(e @ Error::Url { .. }) => return Err(e),
            Err(e) => e.to_string(),
        };
        if Instant::now() + period >= deadline {
            return Err(Error::Timeout {
                what: format!("waiting for {} to answer 200 (last: {last})", args.url),
                after: total,
            });
        }
        tokio::time::sleep(period).await;
    }
}

/// `request [--debug-port N] METHOD PATH [BODY]`: one request to `localhost:N/PATH`; the body of a 2xx
/// answer.
pub async fn request(args: &RequestArgs) -> Result<Bytes, Error> {
    let method = Method::from_bytes(args.method.to_ascii_uppercase().as_bytes()).map_err(|_| {
        Error::Arg {
            flag: "METHOD",
            value: args.method.clone(),
            reason: "not an HTTP method",
        }
    })?;
    let url = format!(
        "http://localhost:{}/{}",
        args.debug_port,
        args.path.trim_start_matches('/')
    );
    let body = Bytes::from(args.body.clone().unwrap_or_default());
    success(method, &url, body, REQUEST_TIMEOUT).await
}
