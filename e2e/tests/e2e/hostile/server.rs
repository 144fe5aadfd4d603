//! `injector serve` under hostile clients: slow bodies, idle connections, costly pods; its work, memory and connections stay bounded.
//!
//! Each test reproduces one outage the webhook's bounds prevent, against the built binary over real TLS: costly reviews
//! starving the I/O threads (probes and other reviews waited tens of seconds), unfinished 6 MiB bodies
//! growing the process past the Deployment's 128 Mi, and silent TCP connections filling the connection cap
//! so that the API server's connections waited in the backlog. The liveness bounds below are generous
//! (seconds where the failure mode is ten seconds or more): they tell a stalled server from a served one,
//! not a fast one from a slow one.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e::apiserver::{injector_certs, serve_args, ApiServer, Http, Injector, TempDir};
use serde_json::{json, Value};
use test_support::corpus::{self, Config};
use test_support::pods;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LOCAL_SANS: &[&str] = &["--san", "localhost", "--san", "127.0.0.1"];

/// A server on Istio's base test configuration with `extra` flags, and its API-server client.
struct Fixture {
    server: Injector,
    api: ApiServer,
    _dir: TempDir,
}

fn fixture(extra: &[&str]) -> Fixture {
    fixture_env(extra, &BTreeMap::new())
}

/// [`fixture`] with environment variables for the server.
fn fixture_env(extra: &[&str], env: &BTreeMap<String, String>) -> Fixture {
    let dir = TempDir::new("hostile-server");
    let certs = injector_certs(&dir.path().join("certs"), LOCAL_SANS).expect("injector certs");
    let cfg = Config::with(&Value::Null, &Value::Null, &Value::Null)
        .and_then(|c| c.write(&dir.path().join("cfg")))
        .expect("config files");
    let mut args = serve_args(&certs.cert, &certs.key, &cfg);
    args.extend(["--native-sidecars", "true"].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    let server = Injector::start(&args, env).expect("injector serve starts");
    let api = ApiServer::new(&certs.mwc, server.https).expect("api server client");
    Fixture {
        server,
        api,
        _dir: dir,
    }
}

fn hello_pod() -> Value {
    let text = corpus::read_inject("hello.yaml").expect("corpus file");
    let docs = pods::injectable_documents(&text).expect("corpus YAML");
    pods::as_typed_pod(pods::to_pod(&docs[0]).expect("pod"))
}

/// A review of the hello pod over a new HTTP/1.1 connection: injected, and how long it took.
async fn normal_review(f: &Fixture, uid: &str) -> Duration {
    let t = Instant::now();
    let mut conn = f.api.connect(Http::H1).await.expect("connect");
    let answer = f
        .api
        .review(&mut conn, &pods::review("v1", uid, "default", &hello_pod()))
        .await
        .unwrap_or_else(|e| panic!("review {uid}: {e:#}"));
    assert_eq!(answer["response"]["uid"], json!(uid), "{answer}");
    assert_eq!(answer["response"]["allowed"], json!(true), "{answer}");
    assert_eq!(answer["response"]["patchType"], json!("JSONPatch"), "{uid}");
    t.elapsed()
}

/// `GET /healthz` on the plain metrics port: the status and how long it took.
async fn healthz(f: &Fixture) -> (u16, Duration) {
    let t = Instant::now();
    let mut s = tokio::net::TcpStream::connect(f.server.metrics)
        .await
        .unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut buf))
        .await
        .expect("healthz answered within 30 s")
        .unwrap();
    let text = String::from_utf8_lossy(&buf);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, t.elapsed())
}

/// Polls the server's metric `sample` every `every` until `done` holds of it; false when `within` passes
/// first.
async fn poll_metric(
    f: &Fixture,
    sample: &str,
    every: Duration,
    within: Duration,
    done: impl Fn(f64) -> bool,
) -> bool {
    let deadline = Instant::now() + within;
    while !done(f.server.metric(sample).await.unwrap()) {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(every).await;
    }
    true
}

/// The server's resident set in MiB (`VmRSS` of /proc/PID/status).
fn rss_mib(server: &Injector) -> f64 {
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", server.pid().unwrap())).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib / 1024.0
}

/// A pod whose injection costs seconds in a debug build: 1,000 containers of 40 ports each (a 2.1 MiB
/// review), made unique by `tag` so that the patch cache cannot answer it.
fn costly_pod(tag: &str) -> Value {
    let cs: Vec<Value> = (0..1000)
        .map(|i| {
            let ports: Vec<Value> = (0..40)
                .map(|j| json!({"containerPort": 1000 + j, "name": format!("p{j}"), "protocol": "TCP"}))
                .collect();
            json!({"name": format!("c{i}"), "image": "registry.example/app", "ports": ports})
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("costly-{tag}"), "namespace": "default", "labels": {"app": "costly", "tag": tag}},
        "spec": {"containers": cs}})
}

/// Sends a costly review on its own connection: the answer and how long it took.
fn send_costly(
    api: &ApiServer,
    uid: &str,
) -> tokio::task::JoinHandle<(String, anyhow::Result<Value>, Duration)> {
    let api = api.clone();
    let uid = uid.to_string();
    let review = pods::review("v1", &uid, "default", &costly_pod(&uid));
    tokio::spawn(async move {
        let mut conn = api.connect(Http::H1).await.unwrap();
        let t = Instant::now();
        let answer = api.review(&mut conn, &review).await;
        (uid, answer, t.elapsed())
    })
}

/// Four costly reviews in flight with a deadline well under their cost: all are answered `allowed:
/// false` naming the deadline and counted as `deadline` failures while the work that started goes on off
/// the I/O threads (holding its slot), and normal reviews and `/healthz` keep answering meanwhile. (The
/// old server injected inline on its two worker threads: with both busy, every other review and probe
/// waited for them, seconds.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costly_reviews_get_the_deadline_answer_and_others_keep_answering() {
    // What one costly review costs on this machine and build; the deadline under test is a third of
    // it, so the costly ones pass it whatever the machine's speed.
    let cost = {
        let f = fixture(&["--review-deadline-ms", "120000"]);
        let (uid, answer, took) = send_costly(&f.api, "measure").await.unwrap();
        let answer = answer.unwrap_or_else(|e| panic!("{uid}: {e:#}"));
        assert_eq!(
            answer["response"]["allowed"],
            json!(true),
            "{uid} not injected: {}",
            answer["response"]["status"]
        );
        took
    };
    let deadline_ms = (cost.as_millis() / 3).clamp(150, 5000) as u64;
    eprintln!("a costly review takes {cost:?}; deadline {deadline_ms} ms");
    let deadline_flag = deadline_ms.to_string();
    let f = std::sync::Arc::new(fixture(&[
        "--worker-threads",
        "2",
        "--review-deadline-ms",
        &deadline_flag,
    ]));
    normal_review(&f, "warm-up").await;
    let costly: Vec<_> = (0..4)
        .map(|i| send_costly(&f.api, &format!("costly-{i}")))
        .collect();
    // Once an injection runs, the reviews that follow compete with it.
    let (every, within) = (Duration::from_millis(10), Duration::from_secs(30));
    let started = poll_metric(&f, "injector_injections_in_flight", every, within, |v| {
        v >= 1.0
    });
    assert!(started.await, "no costly injection started");
    // Normal reviews and probes run beside the costly ones; their answers are checked below.
    let normal = {
        let f = std::sync::Arc::clone(&f);
        tokio::spawn(async move {
            for i in 0..5 {
                let took = normal_review(&f, &format!("normal-{i}")).await;
                assert!(
                    took < Duration::from_secs(2),
                    "a normal review took {took:?} with costly ones in flight"
                );
                let (status, took) = healthz(&f).await;
                assert_eq!(status, 200);
                assert!(
                    took < Duration::from_secs(1),
                    "/healthz took {took:?} with costly reviews in flight"
                );
            }
        })
    };
    // Answers in the order they arrive: the first is read at once (below).
    let mut costly: tokio::task::JoinSet<_> = costly
        .into_iter()
        .map(|task| async move { task.await.unwrap() })
        .collect();
    let want = format!("deadline of {deadline_ms} ms");
    let mut first_answer_in_flight = None;
    while let Some(task) = costly.join_next().await {
        // The work past its deadline still holds its slot: it is bounded by the limit, not forgotten.
        // Read at once after the first deadline answer: only one costly injection fits the slots, the
        // others are answered while waiting for one, and the last of those may arrive after the work
        // that ran has ended (seen on CI's faster machine).
        if first_answer_in_flight.is_none() {
            let m = &f.server;
            first_answer_in_flight = Some(m.metric("injector_injections_in_flight").await.unwrap());
        }
        let (uid, answer, took) = task.unwrap();
        let answer = answer.unwrap_or_else(|e| panic!("{uid}: {e:#}"));
        let resp = &answer["response"];
        assert_eq!(resp["uid"], json!(uid), "{uid}");
        assert_eq!(resp["allowed"], json!(false), "{uid} was not refused");
        let message = resp["status"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&want) && message.contains("not injected"),
            "{uid}: {message}"
        );
        assert!(
            took < cost,
            "{uid} answered after {took:?}, the deadline is {deadline_ms} ms"
        );
    }
    assert!(
        first_answer_in_flight >= Some(1.0),
        "the abandoned injection no longer counts: {first_answer_in_flight:?} in flight"
    );
    let m = &f.server;
    assert_eq!(
        m.metric("sidecar_injection_failure_total{type=\"deadline\"}")
            .await
            .unwrap(),
        4.0
    );
    normal
        .await
        .expect("normal reviews and probes kept answering");
    normal_review(&f, "after").await;
}

/// Raises this process' soft open-files limit to the hard one (the tests open over a thousand sockets).
fn raise_nofile(need: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    }
    assert!(
        hard >= need,
        "this test needs {need} open files, the hard limit is {hard}"
    );
}

/// The status line and headers the server sent on `s` within `wait`, if any.
async fn answer_within<S: tokio::io::AsyncRead + Unpin>(
    s: &mut S,
    wait: Duration,
) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(wait, s.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        _ => None,
    }
}

/// 40 TLS connections each holding an unfinished body just under the 6 MiB limit: the global budget of
/// body bytes admits a few and answers the rest 503 with `Retry-After`, the server stays under the
/// Deployment's 128 Mi and answers normal reviews meanwhile, and gives the memory back once they close.
/// (The old server buffered all 40: 300 MiB and more.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_large_bodies_stay_within_the_memory_budget() {
    raise_nofile(200);
    // The allocator settings of deploy/base/deployment.yaml, which give the memory back after a burst.
    let env: BTreeMap<String, String> = [
        ("MIMALLOC_ARENA_EAGER_COMMIT", "0"),
        ("MIMALLOC_PURGE_DELAY", "0"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into();
    let f = fixture_env(&["--body-timeout-secs", "60"], &env);
    normal_review(&f, "warm-up").await;
    let idle = rss_mib(&f.server);
    let declared = 6 * 1024 * 1024 - 1024;
    let chunk = vec![b' '; 256 * 1024];
    let mut held = Vec::new();
    let mut refused = 0;
    for i in 0..40 {
        let mut s = f.api.tls_stream(&[b"http/1.1"]).await.unwrap();
        let head = format!(
            "POST /inject HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
        );
        s.write_all(head.as_bytes()).await.unwrap();
        s.flush().await.unwrap();
        if let Some(a) = answer_within(&mut s, Duration::from_millis(300)).await {
            assert!(a.starts_with("HTTP/1.1 503"), "connection {i}: {a}");
            assert!(
                a.to_ascii_lowercase().contains("retry-after: 1"),
                "connection {i}: {a}"
            );
            refused += 1;
            continue;
        }
        // All but the last 4 KiB of the body, then silence.
        let mut sent = 0;
        while sent + chunk.len() <= declared - 4096 {
            s.write_all(&chunk).await.unwrap();
            sent += chunk.len();
        }
        s.write_all(&chunk[..declared - 4096 - sent]).await.unwrap();
        s.flush().await.unwrap();
        held.push(s);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let peak = rss_mib(&f.server);
    eprintln!(
        "RSS idle {idle:.1} MiB, with {} bodies held and {refused} refused {peak:.1} MiB",
        held.len()
    );
    assert!(refused > 0, "every 6 MiB body was admitted");
    assert!(
        peak < 128.0,
        "RSS {peak:.1} MiB with {} bodies held",
        held.len()
    );
    for i in 0..3 {
        let took = normal_review(&f, &format!("while-held-{i}")).await;
        assert!(
            took < Duration::from_secs(2),
            "a normal review took {took:?}"
        );
    }
    assert_eq!(
        f.server
            .metric("sidecar_injection_failure_total{type=\"overloaded\"}")
            .await
            .unwrap(),
        refused as f64
    );
    drop(held);
    let (every, within) = (Duration::from_millis(50), Duration::from_secs(10));
    let freed = poll_metric(&f, "injector_body_bytes_in_flight", every, within, |v| {
        v <= 0.0
    });
    assert!(
        freed.await,
        "body bytes still reserved after the clients left"
    );
    normal_review(&f, "after").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_mib(&f.server);
    eprintln!("RSS after the clients left: {after:.1} MiB");
    assert!(
        after - idle < (peak - idle) / 2.0,
        "the memory of the burst was kept: RSS idle {idle:.1}, peak {peak:.1}, after {after:.1} MiB"
    );
}

/// 1,100 TCP connections that never send a ClientHello, over the cap of 1,024: the oldest idle ones are
/// closed to make room, and normal reviews are served at once. (The old server let new connections wait
/// in the backlog until silent ones timed out, 10 s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_over_the_cap_make_way_for_reviews() {
    raise_nofile(1400);
    // A long handshake timeout: what closes the silent connections here is the cap.
    let f = fixture(&["--handshake-timeout-secs", "60"]);
    normal_review(&f, "warm-up").await;
    let mut silent = Vec::new();
    for _ in 0..1100 {
        silent.push(
            tokio::net::TcpStream::connect(f.server.https)
                .await
                .unwrap(),
        );
    }
    for i in 0..5 {
        let took = normal_review(&f, &format!("normal-{i}")).await;
        assert!(
            took < Duration::from_secs(2),
            "a normal review took {took:?} behind 1,100 silent connections"
        );
    }
    // The first connections opened are the ones closed.
    let mut buf = [0u8; 1];
    let first = &mut silent[0];
    match tokio::time::timeout(Duration::from_secs(5), first.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => {}
        other => panic!("the oldest silent connection is still open: {other:?}"),
    }
    let closed = f
        .server
        .metric("injector_connections_closed_idle_total")
        .await
        .unwrap();
    assert!(
        closed >= 76.0,
        "only {closed} idle connections closed at the cap"
    );
    drop(silent);
}
