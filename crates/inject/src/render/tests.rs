//! Golden-file tests of the `sidecar` template: each case of `testdata/istio/inject/cases.json` is rendered
//! from the test environment (base values, base mesh `defaultConfig` as ProxyConfig, the case's overrides and
//! its input pod) and what the template owns — the init container, the `istio-proxy` container, the volumes,
//! pull secrets, labels and annotations — is compared with the golden, leaving out what post-processing and
//! user overrides add (probe rewriting env, Prometheus env, user-merged containers).

use std::path::PathBuf;

use serde_json::{json, Value};
use test_support::corpus::{merge, read_inject};
use test_support::istio_init::injected_args_with;
use test_support::pods::{documents, injectable, named, names};

use super::*;

fn read(name: &str) -> String {
    read_inject(name).unwrap_or_else(|e| panic!("{e}"))
}

fn yaml_docs(text: &str) -> Vec<Value> {
    documents(text).expect("yaml")
}

/// Injectable documents (a `List` is replaced by its items).
fn workloads(docs: Vec<Value>) -> Vec<Value> {
    injectable(&docs)
}

fn pod_of(doc: &Value) -> Value {
    match doc["kind"].as_str() {
        Some("Pod") => doc.clone(),
        Some("CronJob") => doc["spec"]["jobTemplate"]["spec"]["template"].clone(),
        _ => doc["spec"]["template"].clone(),
    }
}

struct Case {
    values: Value,
    mesh: Value,
    native: bool,
    compliance: String,
}

impl Case {
    fn from_json(c: &Value) -> Case {
        let mut values: Value = serde_json::from_str(&read("base-values.json")).expect("values");
        if !c["values"].is_null() {
            merge(&mut values, &c["values"]);
        }
        let mut mesh = yaml_docs(&read("base-mesh.yaml")).remove(0);
        if !c["mesh"].is_null() {
            merge(&mut mesh, &c["mesh"]);
        }
        Case {
            values,
            mesh,
            native: c["native_sidecars"] == "true",
            compliance: c["env"]["COMPLIANCE_POLICY"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        }
    }

    fn default_env() -> Case {
        Case::from_json(&json!({"native_sidecars": "true"}))
    }

    /// Renders the sidecar template for one workload document.
    fn render(&self, doc: &Value) -> Result<Value, RenderError> {
        self.render_template("sidecar", doc)
    }

    /// Renders the sidecar template for the hello pod with `annotations`.
    fn render_hello(&self, annotations: Value) -> Value {
        self.render(&hello_with(annotations)).unwrap()
    }

    /// The message of the error rendering the sidecar template for `doc` gives.
    fn refusal(&self, doc: &Value) -> String {
        self.render(doc).unwrap_err().to_string()
    }

    /// Renders template `name` for one workload document.
    fn render_template(&self, name: &str, doc: &Value) -> Result<Value, RenderError> {
        let pod = pod_of(doc);
        let mut proxy_config = self.mesh["defaultConfig"].clone();
        if let Some(text) = pod["metadata"]["annotations"]["proxy.istio.io/config"].as_str() {
            // Per-field replacement, as Istio applies the annotation over the mesh default.
            let over: Value = serde_saphyr::from_str(text).expect("proxy config annotation");
            for (k, v) in over.as_object().expect("object") {
                proxy_config[k] = v.clone();
            }
        }
        let data = TemplateData {
            kind: doc["kind"].as_str().unwrap_or(""),
            api_version: doc["apiVersion"].as_str().unwrap_or(""),
            deploy_name: doc["metadata"]["name"].as_str().unwrap_or(""),
            deploy_namespace: doc["metadata"]["namespace"].as_str().unwrap_or(""),
            pod: &pod,
            proxy_config: &proxy_config,
            mesh: &self.mesh,
            values: &self.values,
            revision: "",
            native_sidecars: self.native,
            proxy_uid: 1337,
            proxy_gid: 1337,
            compliance_policy: &self.compliance,
            proxy_config_env: None,
        };
        render(name, &data)
    }
}

/// Kubernetes quantity → canonical number text, so `2000m` equals `2` and `1024Mi` equals `1Gi`.
fn quantity(v: &Value) -> Value {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return v.clone(),
    };
    let suffixes: [(&str, f64); 12] = [
        ("Ki", 1024.0),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("n", 1e-9),
        ("u", 1e-6),
        ("", 1.0),
    ];
    for (suf, mul) in suffixes {
        if let Some(num) = s.strip_suffix(suf) {
            if let Ok(n) = num.parse::<f64>() {
                return json!(format!("{}", n * mul));
            }
        }
    }
    v.clone()
}

/// The README's normalisation: drop null/empty members, quantities by value, JSON strings by parsed value.
fn normalize(v: &Value, under_resources: bool) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m {
                let nv = if under_resources && (k == "limits" || k == "requests") {
                    match v {
                        Value::Object(q) => {
                            Value::Object(q.iter().map(|(k, v)| (k.clone(), quantity(v))).collect())
                        }
                        _ => v.clone(),
                    }
                } else {
                    normalize(v, k == "resources")
                };
                let empty = nv.is_null()
                    || nv.as_object().is_some_and(|o| o.is_empty())
                    || nv.as_array().is_some_and(|a| a.is_empty());
                if !empty && k != "creationTimestamp" {
                    out.insert(k.clone(), nv);
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|v| normalize(v, false)).collect()),
        Value::String(s) => {
            let t = s.trim();
            if t.starts_with('{') || t.starts_with('[') {
                if let Ok(parsed) = serde_json::from_str::<Value>(t) {
                    return json!({ "$json": parsed });
                }
            }
            v.clone()
        }
        _ => v.clone(),
    }
}

/// The rendered pod's `istio-proxy` as a native sidecar (in `initContainers`).
fn native_proxy(r: &Value) -> &Value {
    named(&r["spec"]["initContainers"], "istio-proxy").expect("istio-proxy in initContainers")
}

/// The rendered pod's `istio-init`.
fn init_container(r: &Value) -> &Value {
    named(&r["spec"]["initContainers"], "istio-init").expect("istio-init in initContainers")
}

/// Env that post-processing appends; not the template's.
const POST_ENV: &[&str] = &["ISTIO_KUBE_APP_PROBERS", "ISTIO_PROMETHEUS_ANNOTATIONS"];
/// Env that post-processing moves to the end (`overwriteClusterInfo` in Istio's `webhook.go`
/// `postProcessPod`).
const MOVED_ENV: &[&str] = &["ISTIO_META_CLUSTER_ID", "ISTIO_META_NETWORK"];

/// A container's `args` as strings.
fn args_of(container: &Value) -> Vec<&str> {
    container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string argument"))
        .collect()
}

fn strip_post_env(c: &Value) -> Value {
    let mut c = c.clone();
    if let Some(env) = c.get_mut("env").and_then(Value::as_array_mut) {
        env.retain(|e| !POST_ENV.contains(&e["name"].as_str().unwrap_or("")));
        // Compare the moved vars by presence and value only (order set by post-processing).
        let (mut moved, rest): (Vec<Value>, Vec<Value>) = env
            .drain(..)
            .partition(|e| MOVED_ENV.contains(&e["name"].as_str().unwrap_or("")));
        moved.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        env.extend(rest);
        env.extend(moved);
    }
    c
}

/// Compares what the template owns; returns the differences found.
fn compare(rendered: &Value, golden_pod: &Value) -> Vec<String> {
    let mut diffs = Vec::new();
    let mut eq = |what: &str, a: &Value, b: &Value| {
        let (a, b) = (normalize(a, false), normalize(b, false));
        if a != b {
            diffs.push(format!(
                "{what}:\n  rendered: {}\n  golden:   {}",
                serde_json::to_string(&a).unwrap_or_default(),
                serde_json::to_string(&b).unwrap_or_default()
            ));
        }
    };
    let gspec = &golden_pod["spec"];
    let rspec = &rendered["spec"];

    // Init container.
    for name in ["istio-init", "istio-validation"] {
        let r = named(&rspec["initContainers"], name);
        let g = named(&gspec["initContainers"], name);
        eq(
            &format!("initContainers[{name}]"),
            r.unwrap_or(&Value::Null),
            g.unwrap_or(&Value::Null),
        );
    }
    // The proxy, wherever it is.
    let gproxy_init = named(&gspec["initContainers"], "istio-proxy");
    let rproxy_init = named(&rspec["initContainers"], "istio-proxy");
    eq(
        "istio-proxy is a native sidecar",
        &json!(rproxy_init.is_some()),
        &json!(gproxy_init.is_some()),
    );
    let gproxy = gproxy_init.or(named(&gspec["containers"], "istio-proxy"));
    let rproxy = rproxy_init.or(named(&rspec["containers"], "istio-proxy"));
    eq(
        "istio-proxy",
        &rproxy.map(strip_post_env).unwrap_or(Value::Null),
        &gproxy.map(strip_post_env).unwrap_or(Value::Null),
    );
    // Volumes: the golden's injected volumes (named by its status annotation), in order.
    let status: Value = golden_pod["metadata"]["annotations"]["sidecar.istio.io/status"]
        .as_str()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or(Value::Null);
    let injected: Vec<&str> = status["volumes"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let gvolumes: Vec<Value> = gspec["volumes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|v| injected.contains(&v["name"].as_str().unwrap_or("")))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    eq("volumes", &rspec["volumes"], &Value::Array(gvolumes));
    eq(
        "imagePullSecrets",
        &rspec["imagePullSecrets"],
        &gspec["imagePullSecrets"],
    );
    // Labels and annotations the template sets must be in the golden with the same values.
    for part in ["labels", "annotations"] {
        if let Some(m) = rendered["metadata"][part].as_object() {
            for (k, v) in m {
                eq(
                    &format!("metadata.{part}[{k}]"),
                    v,
                    &golden_pod["metadata"][part][k],
                );
            }
        }
    }
    diffs
}

/// Cases whose golden parts the template does not own alone (user overrides merged over the template,
/// re-injection of an already injected pod).
const NOT_TEMPLATE_ONLY: &[(&str, &str)] = &[
    (
        "proxy-override",
        "user istio-proxy/istio-init fields merged over the template",
    ),
    (
        "explicit-security-context",
        "user securityContext merged over the template",
    ),
    ("proxy-override-args", "user args merged over the template"),
    (
        "proxy-override-args-native",
        "user args merged over the template",
    ),
    ("merge-probers", "re-injection: old container fields win"),
    (
        "multiple-templates",
        "user istio-proxy image merged over the template",
    ),
];

fn run_case(c: &Value) -> Result<usize, String> {
    let name = c["name"].as_str().unwrap_or("?");
    let case = Case::from_json(c);
    let inputs = workloads(yaml_docs(&read(c["input"].as_str().expect("input"))));
    let goldens = workloads(yaml_docs(&read(c["golden"].as_str().expect("golden"))));
    let mut compared = 0;
    let mut errors = Vec::new();
    for (i, (input, golden)) in inputs.iter().zip(&goldens).enumerate() {
        let golden_pod = pod_of(golden);
        if golden_pod["metadata"]["annotations"]["sidecar.istio.io/status"].is_null() {
            continue; // not injected (skipped pod)
        }
        match case.render(input) {
            Ok(rendered) => {
                for d in compare(&rendered, &golden_pod) {
                    errors.push(format!("{name} doc {i}: {d}"));
                }
                compared += 1;
            }
            Err(e) => errors.push(format!("{name} doc {i}: render error {e}")),
        }
    }
    if errors.is_empty() {
        Ok(compared)
    } else {
        Err(errors.join("\n"))
    }
}

#[test]
fn golden_cases_template_parts() {
    let cases: Vec<Value> = serde_json::from_str(&read("cases.json")).expect("cases");
    let mut failures = Vec::new();
    let mut passed = 0;
    for c in &cases {
        let name = c["name"].as_str().unwrap_or("?");
        if c["golden"].is_null() || NOT_TEMPLATE_ONLY.iter().any(|(n, _)| *n == name) {
            continue;
        }
        match run_case(c) {
            Ok(n) if n > 0 => passed += 1,
            Ok(_) => {}
            Err(e) => failures.push(e),
        }
    }
    assert!(
        failures.is_empty(),
        "{} cases failed ({passed} passed):\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(passed >= 55, "only {passed} cases compared");
}

fn case_named(name: &str) -> Value {
    let cases: Vec<Value> = serde_json::from_str(&read("cases.json")).expect("cases");
    cases
        .into_iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("case {name}"))
}

fn render_case(name: &str) -> (Value, Value) {
    let c = case_named(name);
    let case = Case::from_json(&c);
    let input = workloads(yaml_docs(&read(c["input"].as_str().expect("input"))));
    let golden = workloads(yaml_docs(&read(c["golden"].as_str().expect("golden"))));
    (case.render(&input[0]).expect("render"), pod_of(&golden[0]))
}

#[test]
fn hello_matches_golden_exactly_where_the_template_owns_it() {
    let (r, g) = render_case("hello");
    assert_eq!(compare(&r, &g), Vec::<String>::new());
    // The init container leads the init list, followed by the native proxy.
    let names = names(&r["spec"]["initContainers"]);
    assert_eq!(names, ["istio-init", "istio-proxy"]);
    assert!(r["spec"]["containers"].is_null());
    assert_eq!(r["spec"]["initContainers"][1]["restartPolicy"], "Always");
}

#[test]
fn modes_of_spec_3_9() {
    // Non-native: proxy in containers, no restartPolicy, no preStop.
    let (r, _) = render_case("hello-old-version");
    let proxy = named(&r["spec"]["containers"], "istio-proxy").expect("proxy");
    assert!(proxy.get("restartPolicy").is_none());
    assert!(proxy.get("lifecycle").is_none());
    assert_eq!(r["spec"]["initContainers"].as_array().unwrap().len(), 1);

    // CNI: istio-validation as the proxy user, validation-only flags.
    let (r, _) = render_case("hello.cni");
    let v = named(&r["spec"]["initContainers"], "istio-validation").expect("validation");
    let args = args_of(v);
    assert!(args.ends_with(&["--run-validation", "--skip-rule-apply"]));
    assert_eq!(v["securityContext"]["runAsUser"], 1337);
    assert_eq!(v["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        r["metadata"]["annotations"]["traffic.sidecar.istio.io/excludeInboundPorts"],
        "15020"
    );

    // TPROXY: proxy runs as root with NET_ADMIN, `-m TPROXY -u 1337`.
    let (r, _) = render_case("hello-tproxy");
    let init = init_container(&r);
    assert_eq!(init["args"][8], "TPROXY");
    let proxy = native_proxy(&r);
    assert_eq!(proxy["securityContext"]["runAsUser"], 0);
    assert_eq!(
        proxy["securityContext"]["capabilities"]["add"],
        json!(["NET_ADMIN"])
    );

    // Interception NONE, native: only the proxy in the init list.
    let (r, _) = render_case("init-no-intercept-no-native-sidecar");
    let names = names(&r["spec"]["initContainers"]);
    assert_eq!(names, ["istio-proxy"]);
}

fn hello_doc() -> Value {
    workloads(yaml_docs(&read("hello.yaml"))).remove(0)
}

fn with_annotations(doc: &Value, annotations: Value) -> Value {
    let mut d = doc.clone();
    d["spec"]["template"]["metadata"]["annotations"] = annotations;
    d
}

/// `hello.yaml`'s Deployment with `annotations` on its pod template.
fn hello_with(annotations: Value) -> Value {
    with_annotations(&hello_doc(), annotations)
}

#[test]
fn interception_none_non_native_has_no_init_container() {
    let mut case = Case::default_env();
    case.native = false;
    let r = case.render_hello(json!({"sidecar.istio.io/interceptionMode": "NONE"}));
    assert!(r["spec"]["initContainers"].is_null(), "{}", r["spec"]);
    let proxy = named(&r["spec"]["containers"], "istio-proxy").unwrap();
    let env = proxy["env"].as_array().unwrap();
    assert!(env
        .iter()
        .any(|e| e["name"] == "ISTIO_META_INTERCEPTION_MODE" && e["value"] == "NONE"));
}

#[test]
fn hold_application_non_native_gets_post_start_wait() {
    let mut case = Case::default_env();
    case.native = false;
    case.values["global"]["proxy"]["holdApplicationUntilProxyStarts"] = json!(true);
    let r = case.render(&hello_doc()).unwrap();
    let proxy = named(&r["spec"]["containers"], "istio-proxy").unwrap();
    assert_eq!(
        proxy["lifecycle"],
        json!({"postStart": {"exec": {"command": ["pilot-agent", "wait"]}}})
    );
    // Native ignores hold: the drain hook stays.
    case.native = true;
    let r = case.render(&hello_doc()).unwrap();
    let proxy = native_proxy(&r);
    assert_eq!(
        proxy["lifecycle"]["preStop"]["exec"]["command"][2],
        "--debug-port=15020"
    );
}

#[test]
fn native_sidecar_annotation_follows_the_template_rule() {
    let mut case = Case::default_env();
    case.native = false;
    for (value, native) in [
        ("true", true),
        ("false", false),
        ("False", true),
        ("", false),
    ] {
        let r = case.render_hello(json!({"sidecar.istio.io/nativeSidecar": value}));
        assert_eq!(
            named(&r["spec"]["initContainers"], "istio-proxy").is_some(),
            native,
            "{value:?}"
        );
    }
}

#[test]
fn traffic_annotations_build_iptables_args() {
    let case = Case::default_env();
    let r = case.render_hello(json!({
        "traffic.sidecar.istio.io/includeOutboundPorts": "80,443",
        "traffic.sidecar.istio.io/excludeOutboundPorts": "9000",
        "traffic.sidecar.istio.io/kubevirtInterfaces": "net9",
        "istio.io/reroute-virtual-interfaces": "net1,net2",
        "traffic.sidecar.istio.io/excludeInterfaces": "eth1",
        "status.sidecar.istio.io/port": "0",
        "sidecar.istio.io/agentLogLevel": "default:debug",
    }));
    let init = init_container(&r);
    // Istio's default list with status port 0 dropped from the inbound excludes, then the annotations' flags.
    assert_eq!(
        init["args"],
        json!(injected_args_with(
            &[("-d", "15090,15021")],
            &[
                "-q",
                "80,443",
                "-o",
                "9000",
                "-k",
                "net1,net2",
                "-c",
                "eth1",
                "--log_output_level=default:debug"
            ]
        ))
    );
    // Status port 0: no proxy probes, drain on port 0.
    let proxy = native_proxy(&r);
    assert!(proxy.get("readinessProbe").is_none() && proxy.get("startupProbe").is_none());
    assert_eq!(
        proxy["lifecycle"]["preStop"]["exec"]["command"][2],
        "--debug-port=0"
    );
}

#[test]
fn unvalidated_or_hostile_argument_values_are_rejected() {
    let case = Case::default_env();
    // includeOutboundPorts is not validated by Istio; here it must still be a port list.
    let doc =
        hello_with(json!({"traffic.sidecar.istio.io/includeOutboundPorts": "80 --run-validation"}));
    let err = case.refusal(&doc);
    assert!(
        err.contains("traffic.sidecar.istio.io/includeOutboundPorts"),
        "{err}"
    );
    let mut case = Case::default_env();
    case.values["global"]["proxy"]["excludeIPRanges"] = json!("10.0.0.0/8,-j");
    let err = case.refusal(&hello_doc());
    assert!(err.contains("global.proxy.excludeIPRanges"), "{err}");
}

#[test]
fn hostile_annotation_text_stays_inside_its_value() {
    let case = Case::default_env();
    let nasty = "x\"\n  injected: true\n- name: evil\u{7f}\u{85}\u{2028}'{{";
    let r = case.render_hello(json!({
        "sidecar.istio.io/logLevel": nasty,
        "sidecar.istio.io/bootstrapOverride": nasty,
        "sidecar.istio.io/proxyImage": format!("a/{nasty}"),
    }));
    let proxy = native_proxy(&r);
    assert_eq!(proxy["args"][4], format!("--proxyLogLevel={nasty}"));
    assert_eq!(proxy["image"], format!("a/{nasty}"));
    let vol = named(&r["spec"]["volumes"], "custom-bootstrap-volume").unwrap();
    assert_eq!(vol["configMap"]["name"], nasty);
    let init = init_container(&r);
    assert_eq!(init["image"], format!("a/{nasty}"));
    assert_eq!(r["spec"]["initContainers"].as_array().unwrap().len(), 2);
}

#[test]
fn resources_from_annotations_replace_values() {
    let case = Case::default_env();
    let r = case.render_hello(json!({"sidecar.istio.io/proxyCPU": "4000m"}));
    let init = init_container(&r);
    assert_eq!(init["resources"], json!({"requests": {"cpu": "4000m"}}));
}

#[test]
fn image_type_and_user_volumes() {
    let case = Case::default_env();
    let r = case.render_hello(json!({
        "sidecar.istio.io/proxyImageType": "distroless",
        "sidecar.istio.io/userVolume": "{\"b\":{\"emptyDir\":{}},\"a\":{\"secret\":{\"secretName\":\"s\"}}}",
        "sidecar.istio.io/userVolumeMount": "{\"a\":{\"mountPath\":\"/a\"}}",
    }));
    let proxy = native_proxy(&r);
    assert_eq!(
        proxy["image"],
        "registry.istio.io/testing/proxyv2:latest-distroless"
    );
    let names = names(&r["spec"]["volumes"]);
    assert_eq!(&names[names.len() - 2..], ["a", "b"]);
    assert_eq!(
        last(&proxy["volumeMounts"]),
        &json!({"name": "a", "mountPath": "/a"})
    );
    let err = case.refusal(&hello_with(json!({"sidecar.istio.io/userVolume": "{oops"})));
    assert!(err.contains("sidecar.istio.io/userVolume"), "{err}");
}

/// Found by the injection differential: Istio's template ranges over `fromJSON` of the
/// annotation, so a JSON list works too (entries named by index), and an entry's own `name` wins over the
/// key (written after it; the last of duplicate YAML keys is kept), as the pinned istioctl outputs.
#[test]
fn user_volumes_as_a_list_and_with_their_own_name() {
    let case = Case::default_env();
    let r = case.render_hello(json!({
        "sidecar.istio.io/userVolume": "[{\"name\":\"v\",\"emptyDir\":{}},{\"emptyDir\":{}}]",
        "sidecar.istio.io/userVolumeMount": "{\"k\":{\"name\":\"own\",\"mountPath\":\"/a\"}}",
    }));
    let volumes = r["spec"]["volumes"].as_array().unwrap();
    assert_eq!(
        &volumes[volumes.len() - 2..],
        [
            json!({"name": "v", "emptyDir": {}}),
            json!({"name": "1", "emptyDir": {}})
        ]
    );
    let proxy = native_proxy(&r);
    assert_eq!(
        last(&proxy["volumeMounts"]),
        &json!({"name": "own", "mountPath": "/a"})
    );
    let err = case.refusal(&hello_with(json!({"sidecar.istio.io/userVolume": "5"})));
    assert!(err.contains("not a JSON object or list"), "{err}");
}

#[test]
fn multus_network_is_appended_once() {
    use super::context::append_multus_network as a;
    assert_eq!(a("", "istio-cni", "default"), "default/istio-cni");
    assert_eq!(a("x, y", "istio-cni", "default"), "x, y, default/istio-cni");
    assert_eq!(
        a("x,default/istio-cni", "istio-cni", "default"),
        "x,default/istio-cni"
    );
    assert_eq!(
        a(r#"[{"name": "alt_cni"}]"#, "istio-cni", "default"),
        r#"[{"name": "alt_cni"}, {"name": "istio-cni", "namespace": "default"}]"#
    );
    let present = r#"[{"name":"istio-cni","namespace":"default"}]"#;
    assert_eq!(a(present, "istio-cni", "default"), present);
    assert_eq!(a("[oops]", "istio-cni", "default"), "[oops]");
}

#[test]
fn sprint_matches_go() {
    assert_eq!(sprint(Some(&json!(15020))), "15020");
    assert_eq!(sprint(Some(&json!(1.12))), "1.12");
    assert_eq!(sprint(Some(&json!(1000000))), "1e+06");
    assert_eq!(sprint(None), "<nil>");
    assert_eq!(sprint(Some(&json!(true))), "true");
}

fn env_value<'a>(c: &'a Value, name: &str) -> Option<&'a Value> {
    c["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| e.get("value").unwrap_or(&Value::Null))
}

/// The last entry of a list (mounts, env).
fn last(list: &Value) -> &Value {
    list.as_array()
        .and_then(|a| a.last())
        .expect("a non-empty list")
}

/// Asserts the literal value of each named env entry of container `c`.
fn assert_env(c: &Value, want: &[(&str, &str)]) {
    for (name, value) in want {
        assert_eq!(env_value(c, name), Some(&json!(value)), "{name}");
    }
}

#[test]
fn security_contexts_for_cap_net_bind_and_iptables_trace() {
    let case = Case::default_env();
    let r = case.render_hello(json!({"sidecar.istio.io/capNetBindService": "true"}));
    let sc = &native_proxy(&r)["securityContext"];
    assert_eq!(
        sc["capabilities"],
        json!({"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]})
    );
    assert_eq!(
        (&sc["runAsUser"], &sc["runAsGroup"], &sc["runAsNonRoot"]),
        (&json!(0), &json!(1337), &json!(false))
    );

    let mut case = Case::default_env();
    case.mesh["defaultConfig"]["proxyMetadata"] = json!({"IPTABLES_TRACE_LOGGING": "true"});
    let r = case.render(&hello_doc()).unwrap();
    let sc = &native_proxy(&r)["securityContext"];
    assert_eq!(sc["privileged"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], true);
    assert_eq!(sc["capabilities"]["add"], json!(["NET_ADMIN"]));
    assert_eq!(sc["runAsUser"], 0);
    let init = init_container(&r);
    assert_eq!(
        init["env"],
        json!([{"name": "IPTABLES_TRACE_LOGGING", "value": "true"}])
    );
}

#[test]
fn values_switches_for_volumes_and_certificates() {
    let mut case = Case::default_env();
    case.values["global"]["caName"] = json!("GkeWorkloadCertificate");
    case.values["global"]["mountMtlsCerts"] = json!(true);
    case.values["global"]["trustBundleName"] = json!("my-bundle");
    case.values["pilot"]["env"]["ENABLE_CLUSTER_TRUST_BUNDLE_API"] = json!(true);
    case.values["pilot"]["crlConfigMapName"] = json!("my-crl");
    let mut doc = hello_doc();
    doc["spec"]["template"]["spec"]["serviceAccountName"] = json!("sa1");
    let r = case.render(&doc).unwrap();
    let vols = &r["spec"]["volumes"];
    assert_eq!(
        names(vols),
        [
            "workload-socket",
            "credential-socket",
            "gke-workload-certificate",
            "istio-envoy",
            "istio-data",
            "istio-podinfo",
            "istio-token",
            "istiod-ca-cert",
            "istio-ca-crl",
            "istio-certs"
        ]
    );
    assert_eq!(
        vols[7]["projected"]["sources"][0]["clusterTrustBundle"],
        json!({"name": "istio.io:istiod-ca:my-bundle", "path": "root-cert.pem"})
    );
    assert_eq!(vols[8]["configMap"]["name"], "my-crl");
    assert_eq!(
        vols[9]["secret"],
        json!({"optional": true, "secretName": "istio.sa1"})
    );
    let proxy = native_proxy(&r);
    let mounts = &proxy["volumeMounts"];
    assert_eq!(
        mounts[2],
        json!({"name": "gke-workload-certificate", "mountPath": "/var/run/secrets/workload-spiffe-credentials", "readOnly": true})
    );
    assert!(mounts
        .as_array()
        .unwrap()
        .contains(&json!({"name": "istio-certs", "mountPath": "/etc/certs/", "readOnly": true})));

    // No istiod CA: neither the CA volumes nor their mounts.
    let mut case = Case::default_env();
    case.values["global"]["pilotCertProvider"] = json!("kubernetes");
    let r = case.render(&hello_doc()).unwrap();
    assert!(!names(&r["spec"]["volumes"]).contains(&"istiod-ca-cert"));
    let proxy = native_proxy(&r);
    assert!(!names(&proxy["volumeMounts"]).contains(&"istio-ca-crl"));
    assert_eq!(
        env_value(proxy, "PILOT_CERT_PROVIDER"),
        Some(&json!("kubernetes"))
    );
}

#[test]
fn bootstrap_override_lightstep_and_datadog() {
    let mut case = Case::default_env();
    case.values["global"]["proxy"]["tracer"] = json!("lightstep");
    case.mesh["defaultConfig"]["tracing"] =
        json!({"tlsSettings": {"caCertificates": "/etc/lightstep/cacert.pem"}});
    let doc = hello_with(json!({"sidecar.istio.io/bootstrapOverride": "my-bootstrap"}));
    let r = case.render(&doc).unwrap();
    let vols = names(&r["spec"]["volumes"]);
    assert_eq!(vols[3], "custom-bootstrap-volume");
    assert_eq!(vols.last(), Some(&"lightstep-certs"));
    let proxy = native_proxy(&r);
    assert_eq!(
        env_value(proxy, "ISTIO_BOOTSTRAP_OVERRIDE"),
        Some(&json!("/etc/istio/custom-bootstrap/custom_bootstrap.json"))
    );
    let mounts = proxy["volumeMounts"].as_array().unwrap();
    assert_eq!(
        mounts.last().unwrap(),
        &json!({"name": "lightstep-certs", "mountPath": "/etc/lightstep", "readOnly": true})
    );
    assert!(mounts.contains(
        &json!({"name": "custom-bootstrap-volume", "mountPath": "/etc/istio/custom-bootstrap"})
    ));

    let mut case = Case::default_env();
    case.values["global"]["proxy"]["tracer"] = json!("datadog");
    let doc = hello_with(
        json!({"apm.datadoghq.com/env": "{\"DD_SERVICE\":\"svc\",\"DD_ENV\":\"prod\"}"}),
    );
    let r = case.render(&doc).unwrap();
    let proxy = native_proxy(&r);
    let env = names(&proxy["env"]);
    let i = env.iter().position(|n| *n == "DD_ENV").unwrap();
    assert_eq!(env[i + 1], "DD_SERVICE");
    assert_eq!(env_value(proxy, "DD_SERVICE"), Some(&json!("svc")));
}

#[test]
fn env_from_mesh_values_and_process() {
    let mut case = Case::default_env();
    case.mesh["inboundTrafficPolicy"]["mode"] = json!("LOCALHOST");
    case.mesh["extensionProviders"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "otel", "opentelemetry": {"service": "c", "port": 4317, "serviceAttributeEnrichment": "OTEL_SEMANTIC_CONVENTIONS"}}));
    case.values["revision"] = json!("canary");
    case.values["global"]["meshID"] = json!("mesh1");
    case.values["global"]["multiCluster"]["clusterName"] = json!("c1");
    case.compliance = "fips-140-3".into();
    let mut doc = hello_doc();
    doc["metadata"]["namespace"] = json!("ns1");
    doc["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/version"] = json!("v2");
    let r = case.render(&doc).unwrap();
    let proxy = native_proxy(&r);
    let env = names(&proxy["env"]);
    assert_eq!(env[0], "REWRITE_PROBE_LEGACY_LOCALHOST_DESTINATION");
    assert_env(
        proxy,
        &[
            ("CA_ADDR", "istiod-canary.istio-system.svc:15012"),
            ("ISTIO_META_CLUSTER_ID", "c1"),
            ("ISTIO_META_MESH_ID", "mesh1"),
            ("GODEBUG", "fips140=only"),
            (
                "ISTIO_META_OWNER",
                "kubernetes://apis/apps/v1/namespaces/ns1/deployments/hello",
            ),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.namespace=ns1,service.version=v2,service.instance.id=ns1.$(POD_NAME).hello",
            ),
        ],
    );
    assert_eq!(
        r["metadata"]["labels"]["service.istio.io/canonical-revision"],
        "v2"
    );
}

#[test]
fn values_lifecycle_and_optional_args() {
    let mut case = Case::default_env();
    case.values["global"]["proxy"]["lifecycle"] =
        json!({"preStop": {"exec": {"command": ["sleep", "5"]}}});
    case.values["global"]["logAsJson"] = json!(true);
    case.values["global"]["sts"]["servicePort"] = json!(15463);
    case.values["global"]["proxy"]["outlierLogPath"] = json!("/dev/stdout");
    case.values["global"]["proxy_init"]["forceApplyIptables"] = json!(true);
    case.values["global"]["nativeNftables"] = json!(true);
    case.values["global"]["imagePullPolicy"] = json!("IfNotPresent");
    case.values["global"]["proxy"]["includeOutboundPorts"] = json!("5000");
    let r = case.render(&hello_doc()).unwrap();
    let proxy = native_proxy(&r);
    assert_eq!(
        proxy["lifecycle"]["preStop"]["exec"]["command"],
        json!(["sleep", "5"])
    );
    let args = args_of(proxy);
    assert!(args.ends_with(&[
        "--stsPort=15463",
        "--log_as_json",
        "--outlierLogPath=/dev/stdout"
    ]));
    assert_eq!(proxy["imagePullPolicy"], "IfNotPresent");
    let init = init_container(&r);
    let args = args_of(init);
    assert!(args.ends_with(&[
        "-q",
        "5000",
        "--log_output_level=default:info",
        "--log_as_json",
        "--force-apply",
        "--native-nftables"
    ]));
    assert_eq!(init["imagePullPolicy"], "IfNotPresent");
}

#[test]
fn labels_revision_and_hbone() {
    let mut case = Case::default_env();
    case.mesh["defaultConfig"]["proxyMetadata"] = json!({"ISTIO_META_ENABLE_HBONE": "true"});
    let mut doc = hello_doc();
    doc["spec"]["template"]["metadata"]["labels"]["security.istio.io/tlsMode"] = json!("disabled");
    doc["spec"]["template"]["metadata"]["labels"]["service.istio.io/canonical-name"] =
        json!("_svc-");
    let pod = pod_of(&doc);
    let pc = case.mesh["defaultConfig"].clone();
    let data = TemplateData {
        kind: "Deployment",
        api_version: "apps/v1",
        deploy_name: "hello",
        deploy_namespace: "",
        pod: &pod,
        proxy_config: &pc,
        mesh: &case.mesh,
        values: &case.values,
        revision: "canary",
        native_sidecars: true,
        proxy_uid: 1337,
        proxy_gid: 1337,
        compliance_policy: "",
        proxy_config_env: None,
    };
    let r = render("sidecar", &data).unwrap();
    assert_eq!(
        r["metadata"]["labels"],
        json!({
            "security.istio.io/tlsMode": "disabled",
            "networking.istio.io/tunnel": "http",
            "service.istio.io/canonical-name": "svc",
            "service.istio.io/canonical-revision": "latest"
        })
    );
    assert_eq!(r["metadata"]["annotations"]["istio.io/rev"], "canary");
    // `gateway` is built in now; a gateway-controller template such as `waypoint` is not a pod template.
    assert!(matches!(
        render("waypoint", &data),
        Err(RenderError::NotFound { .. })
    ));
}

#[test]
fn invalid_interception_mode_names_its_source() {
    let case = Case::default_env();
    let doc = hello_with(json!({"sidecar.istio.io/interceptionMode": "redirect"}));
    let err = case.refusal(&doc);
    assert!(
        err.contains("sidecar.istio.io/interceptionMode") && err.contains("redirect"),
        "{err}"
    );
    let mut case = Case::default_env();
    case.mesh["defaultConfig"]["interceptionMode"] = json!("BOGUS");
    let err = case.refusal(&hello_doc());
    assert!(
        err.contains("ProxyConfig interceptionMode") && err.contains("BOGUS"),
        "{err}"
    );
}

#[test]
fn init_image_name_from_values_and_zero_status_port() {
    let mut case = Case::default_env();
    case.values["global"]["proxy_init"]["image"] = json!("proxyInitTest");
    case.values["global"]["variant"] = json!("distroless");
    let r = case.render_hello(json!({"status.sidecar.istio.io/port": "0"}));
    let init = init_container(&r);
    assert_eq!(
        init["image"],
        "registry.istio.io/testing/proxyInitTest:latest-distroless"
    );
    assert_eq!(init["args"][16], "15090,15021");
    let proxy = native_proxy(&r);
    assert_eq!(
        proxy["image"],
        "registry.istio.io/testing/proxyv2:latest-distroless"
    );
    assert!(proxy.get("startupProbe").is_none() && proxy.get("readinessProbe").is_none());

    // The ProxyConfig image type applies to the proxy only; the annotation to both.
    let mut case = Case::default_env();
    case.mesh["defaultConfig"]["image"] = json!({"imageType": "debug"});
    let r = case.render(&hello_doc()).unwrap();
    let names_images: Vec<(&str, &str)> = r["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["image"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names_images,
        [
            ("istio-init", "registry.istio.io/testing/proxyv2:latest"),
            (
                "istio-proxy",
                "registry.istio.io/testing/proxyv2:latest-debug"
            )
        ]
    );
}

#[test]
fn values_resources_omit_nil() {
    let mut case = Case::default_env();
    case.values["global"]["proxy"]["resources"] = json!({
        "limits": {"cpu": null, "memory": "500Mi"},
        "requests": {"cpu": null, "memory": null},
    });
    let r = case.render(&hello_doc()).unwrap();
    let init = init_container(&r);
    assert_eq!(init["resources"], json!({"limits": {"memory": "500Mi"}}));
    case.values["global"]["proxy"]["resources"] = json!({"requests": {"cpu": "0"}});
    let r = case.render(&hello_doc()).unwrap();
    let proxy = native_proxy(&r);
    assert_eq!(proxy["resources"], json!({"requests": {"cpu": "0"}}));
    case.values["global"]["proxy"]["resources"] = json!({"requests": {}});
    let r = case.render(&hello_doc()).unwrap();
    let proxy = native_proxy(&r);
    assert!(proxy.get("resources").is_none());
}

#[test]
fn pod_ports_in_go_field_order() {
    let case = Case::default_env();
    let mut doc = hello_doc();
    doc["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([
        {"protocol": "UDP", "containerPort": 53, "name": "dns", "hostPort": 0, "hostIP": ""},
        {"containerPort": 90, "hostPort": 9090, "hostIP": "1.2.3.4"}
    ]);
    let r = case.render(&doc).unwrap();
    let proxy = native_proxy(&r);
    assert_eq!(
        env_value(proxy, "ISTIO_META_POD_PORTS"),
        Some(&json!("[\n    {\"name\":\"dns\",\"containerPort\":53,\"protocol\":\"UDP\"}\n    ,{\"hostPort\":9090,\"containerPort\":90,\"hostIP\":\"1.2.3.4\"}\n]"))
    );
}

/// The templates' safety rule: every interpolation is `{{ expr|json }}`.
#[test]
fn every_interpolation_goes_through_json() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("templates");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut rest = text.as_str();
        while let Some(start) = rest.find("{{") {
            let end = rest[start..].find("}}").expect("unclosed interpolation") + start;
            let expr = rest[start + 2..end].trim();
            assert!(
                expr.ends_with("|json") && !expr.contains("|safe"),
                "{}: `{{{{ {expr} }}}}` is not interpolated through |json",
                path.display()
            );
            checked += 1;
            rest = &rest[end + 2..];
        }
    }
    assert!(checked > 40, "only {checked} interpolations found");
}

// ---- the other built-in templates -------------------------------------------------------------------

fn template_doc(file: &str) -> Value {
    workloads(yaml_docs(&read(file))).remove(0)
}

#[test]
fn gateway_reads_what_istios_gateway_template_reads() {
    let case = Case::default_env();
    let doc = with_annotations(
        &template_doc("gateway.yaml"),
        json!({
            "inject.istio.io/templates": "gateway",
            // Not read by the gateway template: interception mode, readiness timings, native sidecars.
            "sidecar.istio.io/interceptionMode": "TPROXY",
            "readiness.status.sidecar.istio.io/periodSeconds": "99",
            "sidecar.istio.io/nativeSidecar": "true",
            "sidecar.istio.io/proxyImage": "my.registry/proxy:\"quoted\"",
        }),
    );
    let mut doc = doc;
    doc["spec"]["template"]["metadata"]["labels"]["app"] = json!("a".repeat(70));
    doc["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "httpbin", "image": "kennethreitz/httpbin",
                     "ports": [{"containerPort": 8080, "protocol": "TCP"}]}));
    let r = case.render_template("gateway", &doc).unwrap();
    assert!(r["spec"].get("initContainers").is_none());
    let proxy = named(&r["spec"]["containers"], "istio-proxy").unwrap();
    assert!(proxy.get("restartPolicy").is_none());
    // Every value is one JSON string, whatever it contains.
    assert_eq!(proxy["image"], "my.registry/proxy:\"quoted\"");
    assert_eq!(proxy["args"][1], "router");
    assert!(!args_of(proxy)
        .iter()
        .any(|a| a.starts_with("--outlierLogPath")));
    assert_eq!(
        proxy["securityContext"],
        json!({"runAsUser": 1337, "runAsGroup": 1337})
    );
    assert_eq!(proxy["readinessProbe"]["periodSeconds"], 15);
    assert_eq!(proxy["readinessProbe"]["httpGet"]["port"], 15021);
    assert!(proxy.get("resources").is_none());
    assert_env(
        proxy,
        &[
            ("ISTIO_META_INTERCEPTION_MODE", "REDIRECT"),
            ("ISTIO_META_APP_CONTAINERS", "httpbin"),
            (
                "ISTIO_META_POD_PORTS",
                "[\n    {\"containerPort\":8080,\"protocol\":\"TCP\"}\n]",
            ),
        ],
    );
    let env = names(&proxy["env"]);
    let at = |n: &str| env.iter().position(|x| *x == n).unwrap();
    assert!(at("GOMEMLIMIT") < at("ISTIO_META_APP_CONTAINERS"));
    for absent in [
        "REWRITE_PROBE_LEGACY_LOCALHOST_DESTINATION",
        "OTEL_RESOURCE_ATTRIBUTES",
    ] {
        assert!(!env.contains(&absent), "{absent}");
    }
    // Canonical name not truncated, unlike the sidecar's.
    assert_eq!(
        r["metadata"]["labels"]["service.istio.io/canonical-name"],
        "a".repeat(70)
    );
    assert!(r["metadata"]["labels"]
        .get("security.istio.io/tlsMode")
        .is_none());
    assert_eq!(
        r["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"],
        "httpbin"
    );
    assert_eq!(
        r["spec"]["securityContext"],
        json!({"sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]})
    );
    let volumes = names(&r["spec"]["volumes"]);
    assert_eq!(
        volumes,
        [
            "workload-socket",
            "credential-socket",
            "workload-certs",
            "istio-envoy",
            "istio-data",
            "istio-podinfo",
            "istio-token",
            "istiod-ca-cert"
        ]
    );

    // values.gateways.securityContext and values.global.proxy.lifecycle are used verbatim.
    let mut case = Case::default_env();
    case.values["gateways"]["securityContext"] = json!({"runAsNonRoot": true, "fsGroup": 1337});
    case.values["global"]["proxy"]["lifecycle"] =
        json!({"preStop": {"exec": {"command": ["sleep", "5"]}}});
    let r = case
        .render_template("gateway", &template_doc("gateway.yaml"))
        .unwrap();
    assert_eq!(
        r["spec"]["securityContext"],
        json!({"runAsNonRoot": true, "fsGroup": 1337})
    );
    let proxy = named(&r["spec"]["containers"], "istio-proxy").unwrap();
    assert_eq!(
        proxy["lifecycle"],
        json!({"preStop": {"exec": {"command": ["sleep", "5"]}}})
    );
}

#[test]
fn grpc_agent_patches_every_app_container_and_gates_on_the_status_port() {
    let case = Case::default_env();
    let doc = template_doc("grpc-agent.yaml");
    let r = case.render_template("grpc-agent", &doc).unwrap();
    let proxy = named(&r["spec"]["containers"], "istio-proxy").unwrap();
    assert_eq!(proxy["readinessProbe"]["httpGet"]["port"], 15020);
    assert!(proxy["resources"].is_object());
    let names = names(&proxy["env"]);
    assert_eq!(names[..2], ["ISTIO_META_GENERATOR", "OUTPUT_CERTS"]);
    assert_eq!(
        names[names.len() - 2..],
        ["ISTIO_META_DNS_CAPTURE", "DISABLE_ENVOY"]
    );
    assert!(!names.contains(&"ISTIO_META_INTERCEPTION_MODE"));
    let app = named(&r["spec"]["containers"], "traffic").unwrap();
    assert_eq!(
        env_value(app, "GRPC_XDS_BOOTSTRAP"),
        Some(&json!("/etc/istio/proxy/grpc-bootstrap.json"))
    );
    assert_eq!(
        r["metadata"]["annotations"]["sidecar.istio.io/rewriteAppHTTPProbers"],
        "false"
    );

    // Status port 15021 from the annotation: the probe stays on 15020.
    let mut annotations = doc["spec"]["template"]["metadata"]["annotations"].clone();
    annotations["status.sidecar.istio.io/port"] = json!("15021");
    annotations["sidecar.istio.io/userVolumeMount"] =
        json!(r#"{"extra": {"mountPath": "/extra"}}"#);
    let r = case
        .render_template("grpc-agent", &with_annotations(&doc, annotations.clone()))
        .unwrap();
    let proxy = named(&r["spec"]["containers"], "istio-proxy").unwrap();
    assert_eq!(proxy["readinessProbe"]["httpGet"]["port"], 15020);
    let mounts = proxy["volumeMounts"].as_array().unwrap();
    assert_eq!(
        mounts.last().unwrap(),
        &json!({"name": "extra", "mountPath": "/extra"})
    );

    // Status port "0": no probe, no resources, no mounts, and the user mount becomes an env entry.
    annotations["status.sidecar.istio.io/port"] = json!("0");
    let r = case
        .render_template("grpc-agent", &with_annotations(&doc, annotations))
        .unwrap();
    let proxy = named(&r["spec"]["containers"], "istio-proxy").unwrap();
    for absent in ["readinessProbe", "resources", "volumeMounts"] {
        assert!(proxy.get(absent).is_none(), "{absent}: {proxy}");
    }
    assert_eq!(last(&proxy["env"]), &json!({"name": "extra"}));
}

#[test]
fn grpc_simple_is_istios_text_for_every_container() {
    let case = Case::default_env();
    let mut doc = template_doc("grpc-agent.yaml");
    doc["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "istio-proxy", "image": "auto"}));
    let r = case.render_template("grpc-simple", &doc).unwrap();
    let app = |name: &str| {
        json!({"name": name,
               "env": [{"name": "GRPC_XDS_BOOTSTRAP", "value": "/var/lib/grpc/data/bootstrap.json"},
                       {"name": "GRPC_GO_LOG_VERBOSITY_LEVEL", "value": "99"},
                       {"name": "GRPC_GO_LOG_SEVERITY_LEVEL", "value": "info"}],
               "volumeMounts": [{"mountPath": "/var/lib/grpc/data/", "name": "grpc-io-proxyless-bootstrap"}]})
    };
    let script = super::grpc_simple::BOOTSTRAP_SCRIPT;
    assert_eq!(
        r,
        json!({
            "metadata": {"annotations": {"sidecar.istio.io/rewriteAppHTTPProbers": "false"}},
            "spec": {
                "initContainers": [{
                    "name": "grpc-bootstrap-init",
                    "image": "busybox:1.28",
                    "volumeMounts": [{"mountPath": "/var/lib/grpc/data/", "name": "grpc-io-proxyless-bootstrap"}],
                    "env": [
                        {"name": "INSTANCE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                        {"name": "ISTIO_NAMESPACE", "value": "istio-system\n"}
                    ],
                    "command": ["sh", "-c", script]
                }],
                "containers": [app("traffic"), app("istio-proxy")],
                "volumes": [{"name": "grpc-io-proxyless-bootstrap", "emptyDir": {}}]
            }
        })
    );
}
