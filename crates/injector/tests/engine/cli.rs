//! The `injector kube-inject` binary: flags (istioctl spellings too), stdin/stdout, `-o`, exit codes.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::parity::{case_args, cases, compare_streams, inject_dir, TempDir};

fn kube_inject_cmd(case_name: &str, dir: &TempDir) -> Command {
    let case = cases()
        .into_iter()
        .find(|c| c.name == case_name)
        .expect("case");
    let args = case_args(&case, dir.path()).expect("args");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_injector"));
    cmd.arg("kube-inject")
        .arg("--valuesFile")
        .arg(args.values.expect("values"))
        .arg("--meshConfigFile")
        .arg(args.mesh_config.expect("mesh"))
        .arg("--injectConfigFile")
        .arg(args.injector_config.expect("config"))
        .arg("--native-sidecars")
        .arg(&case.native_sidecars)
        .env_remove("ENABLE_NATIVE_SIDECARS")
        .env_remove("COMPLIANCE_POLICY")
        .env_remove("REVISION");
    cmd
}

/// Runs the injector expecting it to fail; its stderr as text and its stdout.
fn failure(cmd: &mut Command) -> (String, Vec<u8>) {
    let out = cmd.output().expect("run injector");
    assert!(!out.status.success(), "{cmd:?} should fail");
    (
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.stdout,
    )
}

/// Runs the injector expecting it to succeed (else shows its stderr); its stdout as text.
fn success(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run injector");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn binary_injects_from_file_and_stdin() {
    let dir = TempDir::new("cli");
    let input = inject_dir().join("hello.yaml");
    let golden = test_support::corpus::read_inject("hello.yaml.injected").expect("golden");

    let stdout = success(kube_inject_cmd("hello", &dir).arg("-f").arg(&input));
    compare_streams(&stdout, &golden).expect("file → stdout matches the golden");

    let out_file = dir.path().join("out.yaml");
    let mut child = kube_inject_cmd("hello", &dir)
        .args(["--filename", "-", "--output"])
        .arg(&out_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn injector");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&std::fs::read(&input).expect("input"))
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success());
    assert!(out.stdout.is_empty(), "with -o nothing goes to stdout");
    let written = std::fs::read_to_string(&out_file).expect("output file");
    compare_streams(&written, &golden).expect("stdin → -o file matches the golden");
}

#[test]
fn binary_fails_on_bad_annotation_naming_the_document() {
    let dir = TempDir::new("cli-err");
    let input = inject_dir().join("traffic-annotations-bad-excludeipranges.yaml");
    let (stderr, stdout) = failure(
        kube_inject_cmd("traffic-annotations-bad-excludeipranges", &dir)
            .arg("-f")
            .arg(&input),
    );
    assert!(
        stderr.to_lowercase().contains("excludeipranges"),
        "{stderr}"
    );
    assert!(stderr.contains("document 0"), "{stderr}");
    assert!(stdout.is_empty(), "nothing is half-written");
}

#[test]
fn binary_rejects_invalid_config_naming_file_and_key() {
    let dir = TempDir::new("cli-cfg");
    let values = dir.path().join("values.yaml");
    std::fs::write(&values, "global:\n  proxy:\n    statusPort: notaport\n").expect("write");
    let (stderr, _) = failure(
        Command::new(env!("CARGO_BIN_EXE_injector"))
            .args(["kube-inject", "-f"])
            .arg(inject_dir().join("hello.yaml"))
            .arg("--values")
            .arg(&values),
    );
    assert!(
        stderr.contains("values.yaml")
            && stderr.contains("global.proxy.statusPort")
            && stderr.contains("notaport"),
        "{stderr}"
    );
}

/// istiod's environment variables reach the binary: `ENABLE_NATIVE_SIDECARS=false` and
/// `COMPLIANCE_POLICY=fips-140-3`, with the configuration given as an Istio ConfigMap directory.
#[test]
fn binary_reads_istiod_environment_and_config_dir() {
    let dir = TempDir::new("cli-env");
    let case = cases()
        .into_iter()
        .find(|c| c.name == "hello")
        .expect("case");
    let args = case_args(&case, dir.path()).expect("args");
    let cm = dir.path().join("inject");
    std::fs::create_dir_all(&cm).expect("mkdir");
    std::fs::copy(args.values.expect("values"), cm.join("values")).expect("copy");
    std::fs::copy(args.mesh_config.expect("mesh"), cm.join("mesh")).expect("copy");
    std::fs::copy(args.injector_config.expect("config"), cm.join("config")).expect("copy");
    for (env, value, golden) in [
        (
            "ENABLE_NATIVE_SIDECARS",
            "false",
            "hello-old-version.yaml.injected",
        ),
        (
            "COMPLIANCE_POLICY",
            "fips-140-3",
            "hello-fips-140-3.yaml.injected",
        ),
    ] {
        let stdout = success(
            Command::new(env!("CARGO_BIN_EXE_injector"))
                .args(["kube-inject", "-f"])
                .arg(inject_dir().join("hello.yaml"))
                .arg("--config-dir")
                .arg(&cm)
                .env_remove("ENABLE_NATIVE_SIDECARS")
                .env_remove("COMPLIANCE_POLICY")
                .env_remove("REVISION")
                .env(env, value),
        );
        let want = test_support::corpus::read_inject(golden).expect("golden");
        compare_streams(&stdout, &want).unwrap_or_else(|e| panic!("{env}={value}: {e}"));
    }
}

/// The pod shape of the `istio/gateway` Helm chart (`examples/gateway.yaml`): `inject.istio.io/templates:
/// gateway`, opted in by label, one `istio-proxy` with `image: auto`, becomes a router-mode gateway.
#[test]
fn binary_injects_the_gateway_charts_pod() {
    let dir = TempDir::new("cli-gateway");
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/gateway.yaml");
    let stdout = success(kube_inject_cmd("hello", &dir).arg("-f").arg(&example));
    let docs = test_support::pods::documents(&stdout).expect("yaml");
    assert_eq!(docs.len(), 1);
    let pod = &docs[0]["spec"]["template"];
    assert!(pod["spec"].get("initContainers").is_none(), "{pod}");
    let containers = pod["spec"]["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1);
    let proxy = &containers[0];
    assert_eq!(proxy["name"], "istio-proxy");
    assert_eq!(proxy["image"], "registry.istio.io/testing/proxyv2:latest");
    assert_eq!(proxy["args"][0], "proxy");
    assert_eq!(proxy["args"][1], "router");
    // The chart's resources win over the template (which sets none); quantities print canonically.
    assert_eq!(proxy["resources"]["limits"]["cpu"], "2");
    assert_eq!(proxy["resources"]["limits"]["memory"], "1Gi");
    assert_eq!(proxy["readinessProbe"]["httpGet"]["port"], 15021);
    let env = |name: &str| {
        proxy["env"]
            .as_array()
            .expect("env")
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
    };
    assert_eq!(
        env("ISTIO_META_OWNER"),
        Some(json!(
            "kubernetes://apis/apps/v1/namespaces/istio-ingress/deployments/istio-ingressgateway"
        ))
    );
    assert_eq!(
        env("ISTIO_META_WORKLOAD_NAME"),
        Some(json!("istio-ingressgateway"))
    );
    assert_eq!(
        pod["spec"]["securityContext"]["sysctls"][0]["name"],
        "net.ipv4.ip_unprivileged_port_start"
    );
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/port"], "15020");
    assert_eq!(annotations["istio.io/rev"], "default");
    let status: Value = serde_json::from_str(
        annotations["sidecar.istio.io/status"]
            .as_str()
            .expect("status"),
    )
    .expect("status JSON");
    assert_eq!(status["initContainers"], Value::Null);
    assert_eq!(status["containers"], json!(["istio-proxy"]));
    assert_eq!(status["volumes"].as_array().map(Vec::len), Some(8));
    let overrides = annotations["proxy.istio.io/overrides"]
        .as_str()
        .expect("overrides");
    assert!(!overrides.contains("auto"), "{overrides}");
    assert_eq!(
        pod["metadata"]["labels"]["service.istio.io/canonical-name"],
        "istio-ingressgateway"
    );
}

/// `kube-inject` without `--revision` injects for the default revision, as `istioctl kube-inject` does
/// since Istio 1.28 (istio#56874: its `RevisionOrDefault` falls back to `default`, which it then renders
/// as the empty revision). istioctl asks a cluster for the default revision tag first; this offline
/// command has no cluster and takes `default` at once.
#[test]
fn kube_inject_without_revision_injects_the_default_revision() {
    let dir = TempDir::new("cli-revision");
    let input = inject_dir().join("hello.yaml");
    let without = success(
        kube_inject_cmd("hello", &dir)
            .arg("-f")
            .arg(&input)
            .env_remove("REVISION"),
    );
    let with_default = success(
        kube_inject_cmd("hello", &dir)
            .arg("-f")
            .arg(&input)
            .args(["--revision", "default"])
            .env_remove("REVISION"),
    );
    assert_eq!(without, with_default);
    assert!(
        without.contains(r#"\"revision\":\"default\""#),
        "the status annotation names the default revision: {without}"
    );
    let other = success(
        kube_inject_cmd("hello", &dir)
            .arg("-f")
            .arg(&input)
            .args(["--revision", "canary"])
            .env_remove("REVISION"),
    );
    assert!(other.contains(r#"\"revision\":\"canary\""#), "{other}");
}
