//! The endpoint probe: a rustls handshake that records the served chain, then one POST of a sample
//! AdmissionReview with hyper's HTTP/1.1 client, and the findings of what came back (TLS version, the
//! served certificate, the answer).

use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde_json::{json, Value};

use crate::shared::webhook_entry::Entry;
use sidecar_core::admission_review;
use sidecar_core::fields::Fields;

use super::certificates::{check_chain, Target};
use super::report::{finding, Finding, Level};
use super::url::Url;

/// Most bytes of a webhook answer read (Istio's `MaxRequestBodyBytes` is the request's bound).
pub(super) const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

/// Accepts any certificate and keeps the chain, so doctor can check it itself and still reach the
/// endpoint when the chain is wrong; handshake signatures are still verified.
#[derive(Debug)]
pub(super) struct Recorder {
    chain: Mutex<Vec<CertificateDer<'static>>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let mut chain = vec![end_entity.clone().into_owned()];
        chain.extend(intermediates.iter().map(|c| c.clone().into_owned()));
        *self.chain.lock().unwrap_or_else(|e| e.into_inner()) = chain;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// What a live call to the endpoint showed.
#[derive(Debug, Default)]
pub(super) struct Live {
    /// The chain the server presented (empty when the handshake never got that far).
    pub(super) chain: Vec<CertificateDer<'static>>,
    /// The negotiated TLS version.
    pub(super) version: Option<rustls::ProtocolVersion>,
    /// The handshake failed for the TLS version.
    pub(super) version_refused: Option<String>,
    /// The call failed before an HTTP answer (connect, handshake, timeout).
    pub(super) failure: Option<String>,
    /// The HTTP status and body.
    pub(super) answer: Option<(u16, Vec<u8>)>,
}

/// A sample AdmissionReview: a pod that must not be injected (`sidecar.istio.io/inject: "false"`) as a
/// dry run, so nothing is created or changed.
pub fn sample_review(uid: &str) -> Value {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "injector-doctor-probe",
            "namespace": "default",
            "labels": {"sidecar.istio.io/inject": "false"}
        },
        "spec": {"containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]}
    });
    admission_review::pod_create("v1", uid, "default", "injector-doctor", true, &pod)
}

pub(super) async fn call(
    url: &Url,
    server_name: &str,
    path: &str,
    body: &[u8],
    provider: Arc<CryptoProvider>,
) -> Live {
    let mut live = Live::default();
    let recorder = Arc::new(Recorder {
        chain: Mutex::new(Vec::new()),
        provider: provider.clone(),
    });
    let config = match rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
    {
        Ok(b) => b,
        Err(e) => {
            live.failure = Some(format!("TLS client configuration: {e}"));
            return live;
        }
    };
    let mut config = config
        .dangerous()
        .with_custom_certificate_verifier(recorder.clone())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let addr = format!("{}:{}", url.host, url.port);
    let tcp = match tokio::net::TcpStream::connect(addr.as_str()).await {
        Ok(t) => t,
        Err(e) => {
            live.failure = Some(format!("cannot connect to {addr}: {e}"));
            return live;
        }
    };
    let Ok(name) = ServerName::try_from(server_name.to_string()) else {
        live.failure = Some(format!("{server_name:?} is not a TLS server name"));
        return live;
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let handshake = connector.connect(name, tcp).await;
    live.chain = recorder
        .chain
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let tls = match handshake {
        Ok(t) => t,
        Err(e) => {
            let text = e.to_string();
            let version = matches!(
                e.get_ref().and_then(|r| r.downcast_ref::<rustls::Error>()),
                Some(rustls::Error::AlertReceived(
                    rustls::AlertDescription::ProtocolVersion
                )) | Some(rustls::Error::PeerIncompatible(_))
            );
            if version {
                live.version_refused = Some(text);
            } else {
                live.failure = Some(format!("TLS handshake with {addr} failed: {text}"));
            }
            return live;
        }
    };
    live.version = tls.get_ref().1.protocol_version();
    match exchange(tls, server_name, path, body).await {
        Ok(a) => live.answer = Some(a),
        Err(e) => live.failure = Some(e.text(&addr)),
    }
    live
}

/// Why the HTTP exchange failed.
pub(super) enum ExchangeError {
    /// The request could not be built (a path or name hyper refuses).
    Request(String),
    /// The answer is not HTTP/1.1.
    Parse(hyper::Error),
    /// Sending or reading failed.
    Io(String),
    /// The answer's body is larger than [`MAX_ANSWER_BYTES`].
    TooLarge,
}

impl ExchangeError {
    pub(super) fn text(&self, addr: &str) -> String {
        match self {
            ExchangeError::Request(e) => format!("building the request: {e}"),
            ExchangeError::Parse(e) => format!("the answer is not HTTP/1.1: {e}"),
            ExchangeError::Io(e) => format!("sending the AdmissionReview to {addr}: {e}"),
            ExchangeError::TooLarge => {
                format!("the answer from {addr} is larger than {MAX_ANSWER_BYTES} bytes")
            }
        }
    }
}

/// `e` with its sources (hyper's own text is terse: "connection closed before message completed").
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// POSTs `body` to `path` over `tls` with hyper's HTTP/1.1 client and reads the answer. The answer is
/// complete when its body is (Content-Length or the last chunk), as for the API server's client, not
/// when the server closes the connection; the caller bounds the whole call by `timeoutSeconds`.
pub(super) async fn exchange<S>(
    tls: S,
    server_name: &str,
    path: &str,
    body: &[u8],
) -> Result<(u16, Vec<u8>), ExchangeError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use http_body_util::BodyExt;
    let request = hyper::Request::post(path)
        .header(hyper::header::HOST, server_name)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::ACCEPT, "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::copy_from_slice(
            body,
        )))
        .map_err(|e| ExchangeError::Request(error_chain(&e)))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| ExchangeError::Io(error_chain(&e)))?;
    // The connection is driven beside the request and dropped with it once the answer is read (or the
    // timeout drops this future), so a server that keeps the connection open holds neither doctor nor a
    // socket.
    let _driver = AbortOnDrop(tokio::spawn(async move {
        let _ = connection.await;
    }));
    async {
        let response = sender.send_request(request).await.map_err(|e| {
            if e.is_parse() {
                ExchangeError::Parse(e)
            } else {
                ExchangeError::Io(error_chain(&e))
            }
        })?;
        let status = response.status().as_u16();
        let body = http_body_util::Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    ExchangeError::TooLarge
                } else {
                    ExchangeError::Io(error_chain(&*e))
                }
            })?
            .to_bytes();
        Ok((status, body.to_vec()))
    }
    .await
}

/// Aborts its task when dropped.
pub(super) struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The verdict on an answer to [`sample_review`].
pub(super) fn check_answer(status: u16, body: &[u8], uid: &str) -> Result<String, String> {
    if status != 200 {
        return Err(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        ));
    }
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let r = admission_review::response_to(&v, admission_review::API_VERSIONS[0], uid)?;
    if r.field("allowed") != Some(&json!(true)) {
        return Err(format!(
            "response.allowed is {} (status {})",
            r.field("allowed").unwrap_or(&Value::Null),
            r.field("status").unwrap_or(&Value::Null)
        ));
    }
    if r.field("patch").is_some_and(|p| !p.is_null()) {
        return Err("the pod labelled sidecar.istio.io/inject=false got a patch".to_string());
    }
    Ok("answered the sample AdmissionReview (a pod labelled sidecar.istio.io/inject=false, dry run) \
        with allowed=true, the same uid and no patch"
        .to_string())
}

/// The endpoint fix: look at the service's endpoints and the injector's log.
pub(super) fn endpoint_fix(h: &Entry, url: &Url, path: &str) -> String {
    let probe = format!(
        "curl -sk --max-time {} https://{}:{}{path}",
        h.timeout_seconds(),
        url.host,
        url.port
    );
    match h.service() {
        Some((name, ns, _)) => format!(
            "kubectl -n {ns} get endpoints {name} && kubectl -n {ns} get pods -o wide && \
             kubectl -n {ns} logs deploy/{name} --tail=50; {probe}"
        ),
        None => probe,
    }
}

/// The live findings of one group of entries.
pub(super) fn check_live(
    live: &Live,
    url: &Url,
    path: &str,
    uid: &str,
    secret_chain: Option<&[CertificateDer<'static>]>,
    t: &Target<'_>,
) -> Vec<Finding> {
    let hooks = t.hooks;
    const WHY_TLS: &str =
        "the API server speaks TLS 1.2 and 1.3 only; a server offering less cannot be \
called at all";
    const WHY_ENDPOINT: &str = "the API server calls the webhook for every pod it selects and gives up after \
timeoutSeconds; with failurePolicy Fail those pods are rejected, with Ignore they start without sidecar";
    let mut out = Vec::new();
    let h = hooks[0];
    let source = format!("served at https://{}:{}", url.host, url.port);
    if let Some(e) = &live.version_refused {
        out.push(finding(
            Level::Error,
            "tls-version",
            hooks,
            format!("the server refused TLS 1.2 and 1.3: {e}"),
            WHY_TLS,
            Some(format!(
                "openssl s_client -connect {}:{} -tls1_2 </dev/null  # then configure TLS 1.2 or 1.3 \
                 on the server (injector serve offers exactly these)",
                url.host, url.port
            )),
        ));
    }
    if !live.chain.is_empty() {
        out.extend(check_chain(&source, &live.chain, t));
        if let Some(secret) = secret_chain {
            out.push(if secret.first() == live.chain.first() {
                finding(
                    Level::Ok,
                    "served-certificate",
                    hooks,
                    "the server presents the --tls-cert certificate".to_string(),
                    "",
                    None,
                )
            } else {
                finding(
                    Level::Warning,
                    "served-certificate",
                    hooks,
                    "the server presents a different certificate than --tls-cert".to_string(),
                    "the Secret was updated but the server still serves the old pair (the mount is \
                     updated with a delay), or the server mounts another Secret",
                    Some(match h.service() {
                        Some((name, ns, _)) => format!(
                            "kubectl -n {ns} get deploy {name} -o jsonpath='{{.spec.template.spec.volumes}}'  \
                             # compare the Secret it mounts with --tls-cert"
                        ),
                        None => "diff <(openssl x509 -in TLS_CERT) <(openssl s_client -connect HOST:PORT </dev/null | openssl x509)"
                            .to_string(),
                    }),
                )
            });
        }
    }
    if let Some(v) = live.version {
        out.push(finding(
            Level::Ok,
            "tls-version",
            hooks,
            format!("negotiated {}", version_name(v)),
            WHY_TLS,
            None,
        ));
    }
    if let Some(f) = &live.failure {
        out.push(finding(
            Level::Error,
            "endpoint",
            hooks,
            format!("the endpoint does not answer: {f}"),
            WHY_ENDPOINT,
            Some(endpoint_fix(h, url, path)),
        ));
    }
    if let Some((status, body)) = &live.answer {
        out.push(match check_answer(*status, body, uid) {
            Ok(found) => finding(Level::Ok, "review", hooks, found, WHY_ENDPOINT, None),
            Err(e) => finding(
                Level::Error,
                "review",
                hooks,
                format!("the answer to the sample AdmissionReview (uid {uid}) is wrong: {e}"),
                "the API server rejects an answer that is not an AdmissionReview response for its \
                 request; a pod that must not be injected must be allowed unchanged",
                Some(format!(
                    "{}  # look for uid {uid} in the log",
                    endpoint_fix(h, url, path)
                )),
            ),
        });
    }
    out
}

pub(super) fn version_name(v: rustls::ProtocolVersion) -> String {
    match v {
        rustls::ProtocolVersion::TLSv1_3 => "TLS 1.3".to_string(),
        rustls::ProtocolVersion::TLSv1_2 => "TLS 1.2".to_string(),
        other => format!("{other:?}"),
    }
}
