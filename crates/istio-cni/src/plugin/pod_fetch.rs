//! Reading the pod from the API server with the kubeconfig the node agent wrote, in bounded retries
//! (Istio's `newK8sClient` and the `podRetrievalMaxRetries` loop of `doAddRun`).
//!
//! Unlike Istio's loop, the whole read has one deadline ([`Retries::budget`], 30 s by default) that
//! bounds every attempt and every wait between them, so a silent API server cannot hold the sandbox
//! past the kubelet's 2-minute runtime-request timeout (30 attempts of Istio's loop, each a 5 s timeout
//! and a 1 s wait, take about 3 minutes); and only what may pass is retried: a refusal (a 4xx other
//! than 408 and 429), an answer that does not decode or a request that cannot be made fails at once.

use std::path::Path;
use std::time::{Duration, Instant};

use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::spec::{code, CniError};

/// Each attempt's bound on connecting, and on each read and write (and on the whole attempt), within
/// what is left of the budget.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest answer read: etcd stores objects up to 1.5 MiB.
const MAX_ANSWER_BYTES: usize = 4 << 20;

/// How the pod is asked for.
#[derive(Debug, Clone, Copy)]
pub struct Retries {
    /// Attempts, at least one.
    pub attempts: u32,
    /// The wait between two attempts.
    pub interval: Duration,
    /// The whole read's deadline, attempts and waits included.
    pub budget: Duration,
}

/// Why one attempt failed.
enum Failure {
    /// Worth another attempt: no connection, a timeout, a 5xx, 408 or 429.
    Transient(String),
    /// Not worth one: the error to return.
    Fatal(CniError),
}

/// Percent-encodes a path segment: everything but RFC 3986's unreserved characters, so no name can add
/// a path segment, a query or a fragment to the request (the names are validated before; this is the
/// second lock).
pub fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out == "." || out == ".." {
        return out.replace('.', "%2E");
    }
    out
}

/// The request path of a pod.
pub fn pod_path(namespace: &str, name: &str) -> String {
    format!(
        "/api/v1/namespaces/{}/pods/{}",
        path_segment(namespace),
        path_segment(name)
    )
}

/// Reads `namespace/name`. An unreadable or invalid kubeconfig fails at once (the node agent has not
/// written it yet: try again later); a transient API error is retried within the budget; `give_up` is
/// asked after each failed attempt and ends the loop early with `Ok(None)` (Istio's degraded-state
/// check for its own agent pod).
pub fn fetch(
    kubeconfig: &Path,
    namespace: &str,
    name: &str,
    retries: Retries,
    give_up: &dyn Fn() -> bool,
) -> Result<Option<Pod>, CniError> {
    let start = Instant::now();
    let deadline = start + retries.budget;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CniError::new(code::IO_FAILURE, format!("starting the API client: {e}")))?;
    let pod = format!("{namespace}/{name}");
    runtime.block_on(async {
        let client = client(kubeconfig).await?;
        let path = pod_path(namespace, name);
        let mut last = String::new();
        let mut attempts = 0;
        while attempts < retries.attempts.max(1) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            attempts += 1;
            let attempt = tokio::time::timeout(ATTEMPT_TIMEOUT.min(left), get(&client, &path));
            match attempt.await {
                Ok(Ok(found)) => return Ok(Some(found)),
                Ok(Err(Failure::Fatal(e))) => return Err(e),
                Ok(Err(Failure::Transient(e))) => last = e,
                Err(_) => last = format!("no answer within {:?}", ATTEMPT_TIMEOUT.min(left)),
            }
            tracing::debug!(attempt = attempts, "failed to get pod info: {last}");
            if give_up() {
                return Ok(None);
            }
            if attempts == 1 {
                tracing::warn!(
                    %pod,
                    "cannot read the pod from the API server ({last}); retrying up to {} times within {:?}",
                    retries.attempts,
                    retries.budget
                );
            }
            if attempts < retries.attempts {
                let left = deadline.saturating_duration_since(Instant::now());
                tokio::time::sleep(retries.interval.min(left)).await;
            }
        }
        Err(CniError::new(
            code::TRY_AGAIN_LATER,
            format!(
                "failed to get pod {pod} from the API server after {attempts} attempts in {:.1} s (budget {:?}): {last}",
                start.elapsed().as_secs_f64(),
                retries.budget
            ),
        ))
    })
}

/// One attempt: `GET path`, the answer read within [`MAX_ANSWER_BYTES`] and classified.
async fn get(client: &kube::Client, path: &str) -> Result<Pod, Failure> {
    let fatal = |c: u32, msg: String| Failure::Fatal(CniError::new(c, msg));
    let request = hyper::Request::get(path)
        .body(kube::client::Body::empty())
        .map_err(|e| fatal(code::API_REFUSED, format!("building GET {path}: {e}")))?;
    let response = client.send(request).await.map_err(|e| match e {
        kube::Error::HyperError(_) | kube::Error::Service(_) => Failure::Transient(e.to_string()),
        other => fatal(code::API_REFUSED, format!("GET {path}: {other}")),
    })?;
    let status = response.status();
    let body = http_body_util::Limited::new(response.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
        .map_err(|e| Failure::Transient(format!("reading the answer to GET {path}: {e}")))?
        .to_bytes();
    if status.is_success() {
        return serde_json::from_slice(&body).map_err(|e| {
            fatal(
                code::DECODING_FAILURE,
                format!("GET {path}: the answer is not a pod: {e}"),
            )
        });
    }
    let message = serde_json::from_slice::<kube::core::Status>(&body)
        .map(|s| s.message)
        .unwrap_or_else(|_| String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned());
    let what = format!("GET {path}: {status}: {message}");
    match status.as_u16() {
        408 | 429 | 500.. => Err(Failure::Transient(what)),
        _ => Err(fatal(code::API_REFUSED, what)),
    }
}

async fn client(kubeconfig: &Path) -> Result<kube::Client, CniError> {
    let unavailable = |what: String| {
        CniError::new(
            code::TRY_AGAIN_LATER,
            format!("kubeconfig {}: {what}", kubeconfig.display()),
        )
        .with_details(
            "the istio-cni node agent writes it when it starts; is it running on this node?",
        )
    };
    let kc = Kubeconfig::read_from(kubeconfig).map_err(|e| unavailable(e.to_string()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    config.connect_timeout = Some(ATTEMPT_TIMEOUT);
    config.read_timeout = Some(ATTEMPT_TIMEOUT);
    config.write_timeout = Some(ATTEMPT_TIMEOUT);
    // Retries are the loop's, within its budget: kube-rs' own (429 and 5xx, with backoff) would spend
    // it unseen.
    config.default_retry = false;
    kube::Client::try_from(config).map_err(|e| unavailable(e.to_string()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn names_cannot_leave_their_path_segment() {
        assert_eq!(
            pod_path("default", "web-1"),
            "/api/v1/namespaces/default/pods/web-1"
        );
        assert_eq!(
            pod_path("default", "p?watch=true"),
            "/api/v1/namespaces/default/pods/p%3Fwatch%3Dtrue"
        );
        assert_eq!(
            pod_path("../../api/v1/namespaces/kube-system/secrets", "s"),
            "/api/v1/namespaces/..%2F..%2Fapi%2Fv1%2Fnamespaces%2Fkube-system%2Fsecrets/pods/s"
        );
        assert_eq!(pod_path("..", "."), "/api/v1/namespaces/%2E%2E/pods/%2E");
        assert_eq!(path_segment("a b#c%"), "a%20b%23c%25");
    }

    /// A kubeconfig for a plain-HTTP server at `addr` in a fresh folder.
    fn kubeconfig(addr: std::net::SocketAddr, tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("pod-fetch-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://{addr}\n\
                 users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n\
                 current-context: x\n"
            ),
        )
        .unwrap();
        path
    }

    /// Before the fix, a server that accepts and never answers cost 5 s + 1 s per attempt, about
    /// 179 s for the default 30, past the kubelet's 2-minute timeout. The budget bounds it.
    #[test]
    fn a_silent_api_server_costs_the_budget_not_the_attempts() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // Accepts and holds every connection, never answering.
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for s in listener.incoming() {
                held.push(s);
            }
        });
        let path = kubeconfig(addr, "silent");
        let retries = Retries {
            attempts: 30,
            interval: Duration::from_secs(1),
            budget: Duration::from_secs(3),
        };
        let start = Instant::now();
        let e = fetch(&path, "default", "web", retries, &|| false).unwrap_err();
        let took = start.elapsed();
        eprintln!("gave up after {took:?}: {e}");
        assert_eq!(e.code, code::TRY_AGAIN_LATER, "{e}");
        assert!(e.msg.contains("no answer within"), "{e}");
        // The budget, not 30 × 6 s: a bound far above the 3 s budget and far below one attempt each.
        assert!(took < Duration::from_secs(60), "{took:?}");
        assert!(took >= Duration::from_secs(3), "{took:?}");
    }

    /// Answers every request with `status` and a Status body, counting the requests.
    fn answering(status: u16) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let counted = seen.clone();
        std::thread::spawn(move || {
            for mut s in listener.incoming().flatten() {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                counted.fetch_add(1, Ordering::SeqCst);
                let body = format!(
                    r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"said {status}","code":{status}}}"#
                );
                let _ = write!(
                    s,
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (addr, seen)
    }

    /// A refusal fails at once with one request; a 5xx or 429 is retried up to the attempts.
    #[test]
    fn refusals_fail_at_once_and_transient_answers_are_retried() {
        let retries = Retries {
            attempts: 3,
            interval: Duration::from_millis(10),
            budget: Duration::from_secs(60),
        };
        for (status, fatal) in [
            (403, true),
            (404, true),
            (401, true),
            (500, false),
            (429, false),
        ] {
            let (addr, seen) = answering(status);
            let path = kubeconfig(addr, &format!("s{status}"));
            let e = fetch(&path, "default", "web", retries, &|| false).unwrap_err();
            assert!(e.msg.contains(&format!("said {status}")), "{status}: {e}");
            if fatal {
                assert_eq!(e.code, code::API_REFUSED, "{status}: {e}");
                assert_eq!(seen.load(Ordering::SeqCst), 1, "{status} retried: {e}");
            } else {
                assert_eq!(e.code, code::TRY_AGAIN_LATER, "{status}: {e}");
                assert_eq!(seen.load(Ordering::SeqCst), 3, "{status}: {e}");
                assert!(e.msg.contains("after 3 attempts"), "{e}");
            }
        }
    }
}
