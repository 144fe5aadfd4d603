//! Configuration files: type errors refused at load naming file, field and value; every file input bounded while read.
//!
//! Each case runs the built `injector` under `ulimit -v` (1 GiB of address space), so an input that used
//! to be read to its end fails on an allocation instead of taking the machine's memory, and the test
//! sees that failure rather than the limit's message.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::apiserver::{apply_patch, injector_certs, ApiServer, Http, Injector, TempDir};
use serde_json::{json, Value};
use test_support::corpus::{self, Config, ConfigFiles};
use test_support::pods;
use test_support::process::run_ok;

/// The injector's input limit (`input::MAX_INPUT_BYTES`) and how its message spells it.
const LIMIT: u64 = 16 * 1024 * 1024;
const LIMIT_TEXT: &str = "16 MiB (16777216 bytes)";
/// The address space each run may use (KiB, for `ulimit -v`): an unbounded read of `/dev/zero` dies
/// far below it would on the machine, the bounded one never comes near it.
const ADDRESS_SPACE_KIB: u64 = 1024 * 1024;
/// A run that has not exited by then is reading its input to the end (a hang guard, not a speed test).
const HANG_GUARD: Duration = Duration::from_secs(120);

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs `injector <args>` under `ulimit -v`, stdin from `stdin` (else empty), output to files.
fn run(args: &[String], stdin: Option<&Path>) -> Run {
    let dir = TempDir::new("hostile-config-run");
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(e2e::bin("injector"))
        .args(args)
        .stdin(match stdin {
            Some(p) => Stdio::from(std::fs::File::open(p).unwrap()),
            None => Stdio::null(),
        })
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + HANG_GUARD;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("injector {args:?} still running after {HANG_GUARD:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        status,
        stdout: std::fs::read_to_string(&out).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err).unwrap_or_default(),
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn hello(dir: &Path) -> PathBuf {
    let p = dir.join("hello.yaml");
    std::fs::write(&p, corpus::read_inject("hello.yaml").unwrap()).unwrap();
    p
}

fn kube_inject(dir: &Path, cfg: &ConfigFiles, extra: &[String]) -> Run {
    let mut args = strings(&["kube-inject", "-f"]);
    args.push(hello(dir).display().to_string());
    args.extend(cfg.args());
    args.extend(extra.iter().cloned());
    run(&args, None)
}

fn assert_refused(r: &Run, what: &str, expect: &[&str]) {
    assert!(
        !r.status.success(),
        "{what}: accepted (exit 0); stderr: {}",
        r.stderr
    );
    for e in expect {
        assert!(
            r.stderr.contains(e),
            "{what}: stderr does not name {e:?}: {}",
            r.stderr
        );
    }
}

/// Istio decodes the mesh config and the values into protos, so a field of the wrong type fails at load;
/// the injector used to accept them with exit 0 (a mapping as `trustDomain` silently dropped
/// `TRUST_DOMAIN` and `ISTIO_META_MESH_ID`; a string `seccompProfile` rendered a pod the API server
/// refuses). Each is now refused naming the file, the field and the value.
#[test]
fn type_errors_are_refused_at_load_naming_file_field_and_value() {
    let dir = TempDir::new("hostile-config-types");
    let write = |values: Value, mesh: Value| {
        Config::with(&values, &mesh, &Value::Null)
            .and_then(|c| c.write(&dir.path().join("cfg")))
            .unwrap()
    };
    // The control: the base configuration injects, with the mesh's trust domain.
    let ok = kube_inject(dir.path(), &write(Value::Null, Value::Null), &[]);
    assert!(ok.status.success(), "{}", ok.stderr);
    assert!(ok.stdout.contains("TRUST_DOMAIN"), "{}", ok.stdout);

    let meta = |name: &str| json!({"defaultConfig": {"proxyMetadata": {name: "1"}}});
    let cases: Vec<(Value, Value, Vec<&str>)> = vec![
        (
            Value::Null,
            json!({"trustDomain": {"a": 1}}),
            vec![
                "mesh.yaml",
                "key trustDomain:",
                r#"{"a":1}"#,
                "expected a string",
            ],
        ),
        (
            json!({"global": {"proxy": {"seccompProfile": "str"}}}),
            Value::Null,
            vec![
                "values.json",
                "key global.proxy.seccompProfile:",
                r#""str""#,
            ],
        ),
        (
            json!({"global": {"proxy": {"privileged": "yes"}}}),
            Value::Null,
            vec!["values.json", "key global.proxy.privileged:", r#""yes""#],
        ),
        (
            Value::Null,
            json!({"enablePrometheusMerge": "false"}),
            vec!["mesh.yaml", "key enablePrometheusMerge:", r#""false""#],
        ),
        (
            Value::Null,
            meta("A\tB"),
            vec!["mesh.yaml", "key defaultConfig.proxyMetadata:", r#""A\tB""#],
        ),
        (
            Value::Null,
            meta(""),
            vec![
                "mesh.yaml",
                "key defaultConfig.proxyMetadata:",
                r#"value "":"#,
            ],
        ),
        (
            Value::Null,
            meta("A\nB"),
            vec!["mesh.yaml", "key defaultConfig.proxyMetadata:", r#""A\nB""#],
        ),
        (
            Value::Null,
            meta("A=B"),
            vec!["mesh.yaml", "key defaultConfig.proxyMetadata:", r#""A=B""#],
        ),
    ];
    for (values, mesh, expect) in cases {
        let r = kube_inject(dir.path(), &write(values.clone(), mesh.clone()), &[]);
        assert_refused(&r, &format!("values {values} mesh {mesh}"), &expect);
        assert!(r.stdout.is_empty(), "nothing is written: {}", r.stdout);
    }
}

/// The test environment's base configuration, written to `cfg/` in `dir`.
fn base_config(dir: &TempDir) -> ConfigFiles {
    Config::base()
        .and_then(|c| c.write(&dir.path().join("cfg")))
        .unwrap()
}

/// The same env-name rule for the pod's `proxy.istio.io/config` annotation, whose `proxyMetadata`
/// becomes env entries the same way (Istio's API server refuses the injected pod; here the injection
/// fails naming the annotation's field).
#[test]
fn annotation_proxy_metadata_names_are_checked_too() {
    let dir = TempDir::new("hostile-config-annotation");
    let cfg = base_config(&dir);
    let manifest = dir.path().join("pod.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n    proxy.istio.io/config: |\n      proxyMetadata:\n        \"A=B\": x\nspec:\n  containers:\n  - name: app\n    image: app\n",
    )
    .unwrap();
    let mut args = strings(&["kube-inject", "-f"]);
    args.push(manifest.display().to_string());
    args.extend(cfg.args());
    let r = run(&args, None);
    assert_refused(&r, "annotation", &["pod.yaml", "proxyMetadata", r#""A=B""#]);
}

const PC_HEAD: &str = "apiVersion: networking.istio.io/v1beta1\nkind: ProxyConfig\nmetadata: {name: x, namespace: ns}\n";

/// ProxyConfig resources: env names as Kubernetes validates them, the one apiVersion the CRD serves, and
/// one object per namespace/name (two used to be accepted, the first silently winning).
#[test]
fn proxy_config_resources_are_checked_at_load() {
    let dir = TempDir::new("hostile-config-proxyconfigs");
    let cfg = base_config(&dir);
    let pc = dir.path().join("pc.yaml");
    let with = |text: &str| {
        std::fs::write(&pc, text).unwrap();
        kube_inject(
            dir.path(),
            &cfg,
            &["--proxy-configs".into(), pc.display().to_string()],
        )
    };
    // The control, in the namespace kube-inject takes the manifest to be in.
    let ok = with(&format!(
        "{}spec: {{environmentVariables: {{ISTIO_META_X.y-z: v}}}}\n",
        PC_HEAD.replace("namespace: ns", "namespace: default")
    ));
    assert!(ok.status.success(), "{}", ok.stderr);
    assert!(ok.stdout.contains("ISTIO_META_X.y-z"), "{}", ok.stdout);

    for (name, shown) in [
        ("A\\tB", r#""A\tB""#),
        ("", r#""""#),
        ("A\\nB", r#""A\nB""#),
        ("A=B", r#""A=B""#),
    ] {
        let r = with(&format!(
            "{PC_HEAD}spec: {{environmentVariables: {{\"{name}\": v}}}}\n"
        ));
        assert_refused(
            &r,
            &format!("env name {name:?}"),
            &[
                "pc.yaml: ProxyConfig ns/x: field spec.environmentVariables:",
                shown,
                "not a valid environment variable name",
            ],
        );
    }
    let r = with(&PC_HEAD.replace("v1beta1", "v9"));
    assert_refused(
        &r,
        "apiVersion v9",
        &[
            "pc.yaml: ProxyConfig ns/x: field apiVersion:",
            "networking.istio.io/v9",
        ],
    );
    let r = with(&format!(
        "{PC_HEAD}spec: {{concurrency: 1}}\n---\n{PC_HEAD}spec: {{concurrency: 2}}\n"
    ));
    assert_refused(
        &r,
        "duplicate",
        &["pc.yaml: ProxyConfig ns/x (object #1): field metadata.name: object #0"],
    );
}

/// Every file flag (and `-f -`) given `/dev/zero` is refused at the 16 MiB limit, naming the flag, the file
/// and the limit, within the run's 1 GiB of address space; before, each read to the end until killed.
#[test]
fn every_file_flag_refuses_an_endless_input_at_the_limit() {
    let dir = TempDir::new("hostile-config-zero");
    let cfg = base_config(&dir);
    let certs = injector_certs(&dir.path().join("certs"), &[]).unwrap();
    let hello = hello(dir.path()).display().to_string();
    let zero = "/dev/zero".to_string();
    // `--config-dir` whose `values` is the endless device.
    let cdir = dir.path().join("configdir");
    std::fs::create_dir_all(&cdir).unwrap();
    std::os::unix::fs::symlink("/dev/zero", cdir.join("values")).unwrap();

    let base = |sub: &str| {
        let mut a = strings(&[sub, "-f"]);
        a.push(hello.clone());
        a
    };
    let with = |mut a: Vec<String>, more: &[&str]| {
        a.extend(more.iter().map(|s| s.to_string()));
        a
    };
    // Each of these reads /dev/zero, and the refusal names it.
    let mut cases: Vec<(Vec<String>, String)> = [
        strings(&["kube-inject", "-f", "/dev/zero"]),
        with(base("kube-inject"), &["--values", "/dev/zero"]),
        with(base("kube-inject"), &["--mesh-config", "/dev/zero"]),
        with(base("kube-inject"), &["--injector-config", "/dev/zero"]),
        with(base("kube-inject"), &["--proxy-configs", "/dev/zero"]),
        with(base("explain"), &["--values", "/dev/zero"]),
        with(base("explain"), &["--namespaces", "/dev/zero"]),
        with(base("explain"), &["--webhook-config", "/dev/zero"]),
        strings(&["explain", "-f", "/dev/zero"]),
        strings(&["doctor", "--webhook-config", "/dev/zero"]),
        strings(&["webhook-config", "--ca-bundle", "/dev/zero"]),
    ]
    .into_iter()
    .map(|a| (a, "/dev/zero".to_string()))
    .collect();
    // The directory's file is named by the path it was opened by.
    cases.push((
        with(
            base("kube-inject"),
            &["--config-dir", &cdir.display().to_string()],
        ),
        cdir.join("values").display().to_string(),
    ));
    let serve = |cert: &str, key: &str, cfg_args: Vec<String>| {
        let mut a = strings(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--tls-cert",
            cert,
            "--tls-key",
            key,
        ]);
        a.extend(cfg_args);
        a
    };
    let cert = certs.cert.display().to_string();
    let key = certs.key.display().to_string();
    let mut bad_values = cfg.args();
    bad_values[1] = zero.clone();
    cases.push((serve(&cert, &key, bad_values), zero.clone()));
    cases.push((serve(&zero, &key, cfg.args()), zero.clone()));
    cases.push((serve(&cert, &zero, cfg.args()), zero.clone()));

    for (args, file) in &cases {
        let r = run(args, None);
        // Every file flag's error has one form, `FLAG PATH: reason`; a `--config-dir` file is named by
        // the directory's flag.
        let flag = match args.iter().position(|a| a == file) {
            Some(i) => args[i - 1].as_str(),
            None => "--config-dir",
        };
        assert_refused(
            &r,
            &format!("{args:?}"),
            &[&format!("{flag} {file}: "), LIMIT_TEXT],
        );
    }
    // stdin, for both commands that read a manifest from `-`.
    for sub in ["kube-inject", "explain"] {
        let r = run(&strings(&[sub, "-f", "-"]), Some(Path::new("/dev/zero")));
        assert_refused(
            &r,
            &format!("{sub} -f - < /dev/zero"),
            &["-f -: ", LIMIT_TEXT],
        );
    }
}

/// A FIFO whose writer never stops: the injector reads to the limit and stops, so the writer is cut off
/// (EPIPE) after the limit plus what the pipe buffers, not after whatever the process could hold.
#[test]
fn a_fifo_is_read_to_the_limit_and_no_further() {
    let dir = TempDir::new("hostile-config-fifo");
    let cfg = base_config(&dir);
    let fifo = dir.path().join("values.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let written = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (fifo, written, done) = (fifo.clone(), written.clone(), done.clone());
        std::thread::spawn(move || {
            // Non-blocking, so the writer never waits on a reader that is gone or never came.
            let mut f = loop {
                match std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
                    .open(&fifo)
                {
                    Ok(f) => break f,
                    Err(_) if !done.load(Ordering::SeqCst) => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Err(_) => return,
                }
            };
            let chunk = vec![b' '; 64 * 1024];
            loop {
                match f.write(&chunk) {
                    Ok(n) => {
                        written.fetch_add(n as u64, Ordering::SeqCst);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if done.load(Ordering::SeqCst) {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(_) => return, // EPIPE: the reader closed its end.
                }
            }
        })
    };
    let mut args = strings(&["kube-inject", "-f"]);
    args.push(hello(dir.path()).display().to_string());
    args.extend(cfg.args());
    args[4] = fifo.display().to_string();
    assert_eq!(args[3], "--values");
    let r = run(&args, None);
    done.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    assert_refused(&r, "values from a FIFO", &["values.fifo", LIMIT_TEXT]);
    let n = written.load(Ordering::SeqCst);
    // A Linux pipe buffers at most 1 MiB by default (/proc/sys/fs/pipe-max-size); 4 MiB is a wide margin.
    assert!(
        (LIMIT..LIMIT + 4 * 1024 * 1024).contains(&n),
        "the writer got {n} bytes in; the reader should stop just past {LIMIT}"
    );
}

/// The pid of the running `injector serve` whose command line holds `marker` (a path unique to a test).
fn pid_of(marker: &str) -> u32 {
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let text = String::from_utf8_lossy(&cmdline);
        if text.contains("serve") && text.contains(marker) {
            return pid;
        }
    }
    panic!("no injector serve with {marker} in /proc");
}

/// A `/proc/<pid>/status` figure in KiB (`VmSize`, `VmHWM`).
fn proc_status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
}

/// The `TRUST_DOMAIN` value of the injected `istio-proxy` of the hello pod.
async fn trust_domain(api: &ApiServer, uid: &str) -> Option<String> {
    let text = corpus::read_inject("hello.yaml").unwrap();
    let docs = pods::injectable_documents(&text).unwrap();
    let pod = pods::as_typed_pod(pods::to_pod(&docs[0]).unwrap());
    let mut conn = api.connect(Http::H1).await.unwrap();
    let answer = api
        .review(&mut conn, &pods::review("v1", uid, "default", &pod))
        .await
        .unwrap();
    assert_eq!(answer["response"]["allowed"], json!(true), "{answer}");
    let patched = apply_patch(&answer["response"], &pod).unwrap();
    pods::container(&patched, "istio-proxy")
        .and_then(|c| c["env"].as_array())
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "TRUST_DOMAIN")
        .and_then(|e| e["value"].as_str().map(str::to_string))
}

async fn wait_for_log(server: &Injector, text: &str) {
    let deadline = Instant::now() + e2e::PATIENCE;
    while !server.log().contains(text) {
        assert!(
            Instant::now() < deadline,
            "no {text:?} in the log: {}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_for(server: &Injector, sample: &str, at_least: f64) {
    let deadline = Instant::now() + e2e::PATIENCE;
    while server.metric(sample).await.unwrap_or(0.0) < at_least {
        assert!(
            Instant::now() < deadline,
            "{sample} did not reach {at_least}; log: {}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `serve` refuses a reload with a type error (and one whose file became endless) and keeps injecting with
/// the last good configuration, each refusal counted; a good file after them is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_keeps_the_last_good_configuration_on_a_type_error() {
    let dir = TempDir::new("hostile-config-serve");
    let certs = injector_certs(
        &dir.path().join("certs"),
        &["--san", "localhost", "--san", "127.0.0.1"],
    )
    .unwrap();
    let write = |mesh: Value| {
        Config::with(&Value::Null, &mesh, &Value::Null)
            .and_then(|c| c.write(&dir.path().join("cfg")))
            .unwrap()
    };
    let cfg = write(json!({"trustDomain": "first.example"}));
    let mut args = strings(&[
        "--tls-cert",
        &certs.cert.display().to_string(),
        "--tls-key",
        &certs.key.display().to_string(),
        "--reload-interval-ms",
        "100",
    ]);
    args.extend(cfg.args());
    let server = Injector::start(&args, &BTreeMap::new()).unwrap();
    let api = ApiServer::new(&certs.mwc, server.https).unwrap();
    const FAILED: &str = "injector_config_reloads_total{result=\"failure\"}";
    const OK: &str = "injector_config_reloads_total{result=\"success\"}";
    assert_eq!(
        trust_domain(&api, "a").await.as_deref(),
        Some("first.example")
    );

    // The files are rewritten in place, so a poll may see a half-written set: each step waits for its
    // own message in the log, not for a count.
    write(json!({"trustDomain": {"a": 1}}));
    wait_for_log(
        &server,
        r#"mesh.yaml: key trustDomain: invalid value {"a":1}: expected a string"#,
    )
    .await;
    let failed = server.metric(FAILED).await.unwrap();
    assert!(failed >= 1.0, "the refusal is counted");
    assert_eq!(
        trust_domain(&api, "b").await.as_deref(),
        Some("first.example")
    );

    // The values file swapped for an endless one: the watcher and the loader stop at the limit. The
    // server's address space is capped first, so an unbounded read fails here instead of on the machine.
    let pid = pid_of(&cfg.mesh.display().to_string());
    let cap = (proc_status_kib(pid, "VmSize") + 512 * 1024) * 1024;
    let peak_before = proc_status_kib(pid, "VmHWM");
    run_ok(
        Command::new("prlimit").args(["--pid", &pid.to_string(), &format!("--as={cap}:{cap}")]),
        "prlimit",
    );
    std::fs::remove_file(&cfg.values).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &cfg.values).unwrap();
    wait_for_log(&server, LIMIT_TEXT).await;
    wait_for(&server, FAILED, failed + 1.0).await;
    assert_eq!(
        trust_domain(&api, "c").await.as_deref(),
        Some("first.example")
    );
    // The watcher hashes the file in chunks and the loader holds at most the limit: the peak resident
    // size grows by about 16 MiB (measured: 16.4 MiB), where reading to the end fills the 512 MiB cap
    // (measured: 400 MiB with the watcher unbounded).
    let grown = proc_status_kib(pid, "VmHWM") - peak_before;
    assert!(
        grown < 64 * 1024,
        "the peak resident size grew by {grown} KiB reading an endless file"
    );

    // Good files again: taken (after, maybe, a half-written set).
    std::fs::remove_file(&cfg.values).unwrap();
    let successes = server.metric(OK).await.unwrap();
    write(json!({"trustDomain": "second.example"}));
    wait_for(&server, OK, successes + 1.0).await;
    let deadline = Instant::now() + e2e::PATIENCE;
    let mut n = 0;
    while trust_domain(&api, &format!("d{n}")).await.as_deref() != Some("second.example") {
        assert!(
            Instant::now() < deadline,
            "the good files were not taken: {}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        n += 1;
    }
}
