//! Load generator for `bench/webhook-load.sh`: AdmissionReviews over keep-alive HTTPS connections,
//! verified against the webhook's CA like the API server does.
//!
//! Closed loop (`--rate 0`): every connection sends back to back; reports requests per second.
//! Open loop (`--rate R`): request i is due at start + i/R whatever happened before. Two latencies are
//! reported: `p*_ms` from the moment the request is written (the server's service time; tokio's timer
//! wakes up to ~1 ms after the due time, which is the generator's lateness, not the server's), and
//! `due_p*_ms` from the due time (includes that lateness and any queueing behind a slow answer, i.e. no
//! coordinated omission).
//!
//! Usage: webhook-load --addr 127.0.0.1:PORT --ca ca.crt --pod FILE.yaml [--name svc.ns.svc]
//!        [--connections 8] [--duration 10] [--rate 0] [--warmup 1] [--distinct]
//! `--distinct`: every request's pod carries a label `load-variant` with its own number, so no request
//! repeats an earlier one and no patch cache can answer it (the full injection every time).
//! Prints one JSON object.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use test_support::pods;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

struct Opts {
    addr: String,
    ca: String,
    pod: String,
    name: String,
    connections: usize,
    duration: f64,
    rate: f64,
    warmup: f64,
    distinct: bool,
}

fn opts() -> anyhow::Result<Opts> {
    let mut o = Opts {
        addr: String::new(),
        ca: String::new(),
        pod: String::new(),
        name: "sidecar-injector.sidecar-injector.svc".into(),
        connections: 8,
        duration: 10.0,
        rate: 0.0,
        warmup: 1.0,
        distinct: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut v = || args.next().ok_or_else(|| anyhow!("{a} needs a value"));
        match a.as_str() {
            "--addr" => o.addr = v()?,
            "--ca" => o.ca = v()?,
            "--pod" => o.pod = v()?,
            "--name" => o.name = v()?,
            "--connections" => o.connections = v()?.parse()?,
            "--duration" => o.duration = v()?.parse()?,
            "--rate" => o.rate = v()?.parse()?,
            "--warmup" => o.warmup = v()?.parse()?,
            "--distinct" => o.distinct = true,
            _ => bail!("unknown argument {a}"),
        }
    }
    if o.addr.is_empty() || o.ca.is_empty() || o.pod.is_empty() {
        bail!("--addr, --ca and --pod are required");
    }
    Ok(o)
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(o: &Opts, tls: &TlsConnector) -> anyhow::Result<Sender> {
    let tcp = TcpStream::connect(&o.addr).await?;
    tcp.set_nodelay(true)?;
    let tls = tls
        .connect(ServerName::try_from(o.name.clone())?, tcp)
        .await?;
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(conn);
    Ok(send)
}

async fn one(send: &mut Sender, body: &Bytes) -> anyhow::Result<()> {
    send.ready().await?;
    let req = Request::post("/inject")
        .header("host", "webhook")
        .header("content-type", "application/json")
        .body(Full::new(body.clone()))?;
    let resp = send.send_request(req).await?;
    let status = resp.status();
    let b = resp.into_body().collect().await?.to_bytes();
    if status != 200 || !b.windows(14).any(|w| w == b"\"allowed\":true") {
        bail!("bad answer {status}: {}", String::from_utf8_lossy(&b));
    }
    Ok(())
}

/// The label `--distinct` sets, and the placeholder value each request's number overwrites.
const VARIANT_LABEL: &str = "load-variant";
const VARIANT_MARK: &str = "v00000000000000000000";

/// `body` with the placeholder replaced by `n`, zero-padded to the same width.
fn variant(body: &Bytes, n: u64) -> Bytes {
    let mut b = body.to_vec();
    if let Some(at) = b
        .windows(VARIANT_MARK.len())
        .position(|w| w == VARIANT_MARK.as_bytes())
    {
        let digits = format!("v{n:020}");
        b[at..at + digits.len()].copy_from_slice(digits.as_bytes());
    }
    Bytes::from(b)
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let o = Arc::new(opts()?);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pem = std::fs::read(&o.ca).with_context(|| format!("reading {}", o.ca))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots.add(c?)?;
    }
    let mut cfg = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tls = TlsConnector::from(Arc::new(cfg));

    let text = std::fs::read_to_string(&o.pod).with_context(|| format!("reading {}", o.pod))?;
    let doc = pods::injectable_documents(&text)?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("no pod in {}", o.pod))?;
    let mut pod = pods::as_typed_pod(pods::to_pod(&doc)?);
    if o.distinct {
        pod["metadata"]["labels"][VARIANT_LABEL] = serde_json::json!(VARIANT_MARK);
    }
    let review = pods::review("v1", "load", "default", &pod);
    let body = Bytes::from(serde_json::to_vec(&review)?);
    let counter = Arc::new(AtomicU64::new(0));
    let next_body = {
        let (body, counter, distinct) = (body.clone(), counter.clone(), o.distinct);
        move || {
            if distinct {
                variant(&body, counter.fetch_add(1, Ordering::Relaxed))
            } else {
                body.clone()
            }
        }
    };

    // Warm-up on one connection (first handshake, lazy initialisation in the server).
    let mut c = connect(&o, &tls).await?;
    let warm_end = Instant::now() + Duration::from_secs_f64(o.warmup);
    while Instant::now() < warm_end {
        one(&mut c, &next_body()).await?;
    }

    let start = Instant::now() + Duration::from_millis(50);
    let end = start + Duration::from_secs_f64(o.duration);
    let errors = Arc::new(AtomicU64::new(0));
    // Open loop: a pacing thread hands out the due times. tokio's timer has millisecond granularity,
    // so sleeping until each due time in the runtime made requests leave up to ~1.3 ms late, and that
    // lateness of the generator's own counted as latency from the due time; `std::thread::sleep`
    // (nanosleep) wakes within tens of microseconds. A request still leaves late when every connection
    // is busy (the server is slow), which the latency from the due time is meant to show.
    let (due_tx, due_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    if o.rate > 0.0 {
        let rate = o.rate;
        std::thread::spawn(move || {
            for i in 0u64.. {
                let due = start + Duration::from_secs_f64(i as f64 / rate);
                if due >= end {
                    break;
                }
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                if due_tx.send(due).is_err() {
                    break;
                }
            }
        });
    } else {
        drop(due_tx);
    }
    let due_rx = Arc::new(tokio::sync::Mutex::new(due_rx));
    let mut tasks = Vec::new();
    for _ in 0..o.connections {
        let mut send = connect(&o, &tls).await?;
        let (o, next_body, due_rx, errors) =
            (o.clone(), next_body.clone(), due_rx.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut due_lat = Vec::new();
            tokio::time::sleep_until(start.into()).await;
            loop {
                let due = if o.rate > 0.0 {
                    // The next due time from the pacer; `None` once it has handed out the last one.
                    let next = due_rx.lock().await.recv().await;
                    match next {
                        Some(due) => due,
                        None => break,
                    }
                } else {
                    let now = Instant::now();
                    if now >= end {
                        break;
                    }
                    now
                };
                let body = next_body();
                let sent = Instant::now();
                match one(&mut send, &body).await {
                    Ok(()) => {
                        lat.push(sent.elapsed().as_micros() as u64);
                        due_lat.push(due.elapsed().as_micros() as u64);
                    }
                    Err(e) => {
                        if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                            eprintln!("first error: {e:#}");
                        }
                    }
                }
            }
            (lat, due_lat)
        }));
    }
    let mut all = Vec::new();
    let mut all_due = Vec::new();
    for t in tasks {
        let (l, d) = t.await?;
        all.extend(l);
        all_due.extend(d);
    }
    all_due.sort_unstable();
    let elapsed = start.elapsed().as_secs_f64().min(o.duration).max(1e-9);
    all.sort_unstable();
    println!(
        "{{\"requests\":{},\"errors\":{},\"rps\":{:.0},\"p50_ms\":{:.3},\"p90_ms\":{:.3},\"p99_ms\":{:.3},\"max_ms\":{:.3},\"due_p50_ms\":{:.3},\"due_p99_ms\":{:.3},\"connections\":{},\"rate\":{}}}",
        all.len(),
        errors.load(Ordering::Relaxed),
        all.len() as f64 / elapsed,
        percentile(&all, 0.50),
        percentile(&all, 0.90),
        percentile(&all, 0.99),
        percentile(&all, 1.0),
        percentile(&all_due, 0.50),
        percentile(&all_due, 0.99),
        o.connections,
        o.rate
    );
    Ok(())
}
