//! The cases of the injection and template differentials, drawn from a seed: a workload stream (Pod,
//! Deployment, StatefulSet, Job, CronJob or a List of them) with annotations and labels drawn from every
//! injection annotation Istio knows (valid and invalid values), init containers, probes, security
//! contexts and resources; values, mesh and ProxyConfig variations drawn from the chart's options over the
//! `base-*` documents of `testdata/istio/inject/`; native sidecars on or off; and, for template cases, a
//! user template drawn from the constructs and functions of the `gotemplate` subset (and some it refuses).

use serde_json::{json, Map, Value};

use crate::rules_differential::generate::Rng;

/// Which differential a case belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Item 2: the chart's templates over generated workloads and configurations.
    Inject,
    /// Item 3: a generated user template applied after the sidecar template.
    Template,
}

/// One generated case: the input stream and the overrides of the three documents.
#[derive(Debug, Clone)]
pub struct Case {
    pub kind: Kind,
    pub seed: u64,
    pub index: u64,
    /// The `-f` stream (JSON documents separated by `---`).
    pub input: String,
    pub values: Value,
    pub mesh: Value,
    /// Overrides of the injector config (the chart's templates are added by the runner); user templates.
    pub templates: Map<String, Value>,
    pub native: bool,
}

/// Every annotation Istio's injector reads (istio.io/api `annotation`, the `inject.go`, `webhook.go` and
/// template uses), each with values valid and not.
const ANNOTATIONS: &[(&str, &[&str])] = &[
    (
        "sidecar.istio.io/inject",
        &["true", "false", "yes", "y", "off", ""],
    ),
    (
        "sidecar.istio.io/proxyImage",
        &["docker.io/istio/proxyv2:1.2.3", "proxy", ""],
    ),
    (
        "sidecar.istio.io/proxyImageType",
        &["distroless", "debug", "default", "x"],
    ),
    (
        "sidecar.istio.io/proxyCPU",
        &["100m", "2", "0", "abc", "1.5"],
    ),
    (
        "sidecar.istio.io/proxyMemory",
        &["128Mi", "1Gi", "12x", "0"],
    ),
    ("sidecar.istio.io/proxyCPULimit", &["200m", "4", "-1", "x"]),
    ("sidecar.istio.io/proxyMemoryLimit", &["256Mi", "2G", "bad"]),
    (
        "sidecar.istio.io/logLevel",
        &["debug", "info", "trace", "off", "warning", "nonsense"],
    ),
    (
        "sidecar.istio.io/componentLogLevel",
        &["misc:error", "upstream:debug,misc:info", ""],
    ),
    (
        "sidecar.istio.io/agentLogLevel",
        &["debug", "all:info", "x"],
    ),
    (
        "sidecar.istio.io/enableCoreDump",
        &["true", "false", "maybe"],
    ),
    (
        "sidecar.istio.io/interceptionMode",
        &["REDIRECT", "TPROXY", "NONE", "tproxy", "bogus"],
    ),
    (
        "sidecar.istio.io/statsInclusionPrefixes",
        &["cluster.outbound", "a,b", ""],
    ),
    (
        "sidecar.istio.io/statsInclusionSuffixes",
        &["upstream_cx_active", ""],
    ),
    ("sidecar.istio.io/statsInclusionRegexps", &["http.*", ""]),
    (
        "sidecar.istio.io/userVolume",
        &[
            "[{\"name\":\"v\",\"emptyDir\":{}}]",
            "{\"v\":{\"emptyDir\":{}}}",
            "not json",
        ],
    ),
    (
        "sidecar.istio.io/userVolumeMount",
        &[
            "[{\"name\":\"v\",\"mountPath\":\"/v\"}]",
            "{\"v\":{\"mountPath\":\"/v\"}}",
            "[1",
        ],
    ),
    (
        "sidecar.istio.io/bootstrapOverride",
        &["custom-bootstrap", ""],
    ),
    (
        "sidecar.istio.io/discoveryAddress",
        &["istiod.other:15012", ""],
    ),
    (
        "sidecar.istio.io/rewriteAppHTTPProbers",
        &["true", "false", "x"],
    ),
    (
        "sidecar.istio.io/statsHistogramBuckets",
        &["{\"cluster_manager\":[1,5,10]}", "bad"],
    ),
    ("sidecar.istio.io/nativeSidecar", &["true", "false", "x"]),
    ("sidecar.istio.io/extraStatTags", &["a,b", ""]),
    (
        "status.sidecar.istio.io/port",
        &["15020", "0", "15021", "70000", "abc", "-1"],
    ),
    (
        "readiness.status.sidecar.istio.io/applicationPorts",
        &["8080", "80,443", "x", ""],
    ),
    (
        "readiness.status.sidecar.istio.io/initialDelaySeconds",
        &["1", "0", "x", "-3"],
    ),
    (
        "readiness.status.sidecar.istio.io/periodSeconds",
        &["2", "x", "0"],
    ),
    (
        "readiness.status.sidecar.istio.io/failureThreshold",
        &["3", "x", "0"],
    ),
    (
        "traffic.sidecar.istio.io/includeOutboundIPRanges",
        &[
            "*",
            "10.0.0.0/8",
            "10.0.0.0/8,fd00::/8",
            "",
            "300.0.0.0/8",
            "x",
        ],
    ),
    (
        "traffic.sidecar.istio.io/excludeOutboundIPRanges",
        &["192.168.0.0/16", "", "1.2.3.4", "bad/99"],
    ),
    (
        "traffic.sidecar.istio.io/includeInboundPorts",
        &["*", "80,8080", "", "99999", "x"],
    ),
    (
        "traffic.sidecar.istio.io/excludeInboundPorts",
        &["15020", "8080,9090", "", "0", "-1"],
    ),
    (
        "traffic.sidecar.istio.io/includeOutboundPorts",
        &["80", "", "x"],
    ),
    (
        "traffic.sidecar.istio.io/excludeOutboundPorts",
        &["3306", "1,2,3", "", "65536"],
    ),
    (
        "traffic.sidecar.istio.io/excludeInterfaces",
        &["eth1", "eth1,eth2", ""],
    ),
    ("traffic.sidecar.istio.io/kubevirtInterfaces", &["net1", ""]),
    ("istio.io/reroute-virtual-interfaces", &["net1,net2", ""]),
    (
        "proxy.istio.io/config",
        &[
            "concurrency: 2",
            "holdApplicationUntilProxyStarts: true",
            "{\"terminationDrainDuration\": \"7s\"}",
            "proxyMetadata:\n  FOO: bar\n  ISTIO_META_DNS_CAPTURE: \"true\"",
            "interceptionMode: TPROXY",
            "image:\n  imageType: debug",
            "statusPort: 15030",
            "discoveryAddress: other:15012",
            "tracing:\n  zipkin:\n    address: z:9411",
            "drainDuration: 3s\nproxyStatsMatcher:\n  inclusionPrefixes: [a]",
            "unknownField: 1",
            "concurrency: x",
            "[1, 2]",
            "",
        ],
    ),
    (
        "inject.istio.io/templates",
        &[
            "sidecar",
            "gateway",
            "grpc-agent",
            "grpc-simple",
            "sidecar,grpc-agent",
            "missing",
            "",
        ],
    ),
    ("prometheus.istio.io/merge-metrics", &["true", "false", "x"]),
    ("prometheus.io/scrape", &["true", "false"]),
    ("prometheus.io/port", &["9090", "x"]),
    ("prometheus.io/path", &["/metrics", "/stats"]),
    (
        "kubectl.kubernetes.io/default-container",
        &["app", "istio-proxy", "nope"],
    ),
    ("kubectl.kubernetes.io/default-logs-container", &["app"]),
    (
        "sidecar.istio.io/status",
        &[
            "{\"initContainers\":[\"istio-init\"],\"containers\":[\"istio-proxy\"]}",
            "x",
        ],
    ),
    ("ambient.istio.io/redirection", &["enabled", "disabled"]),
    ("networking.istio.io/exportTo", &[".", "*"]),
    ("proxy.istio.io/overrides", &["{\"containers\":[]}", "x"]),
    ("sidecar.istio.io/proxyIPFamily", &["IPv4", "IPv6"]),
];

/// Labels Istio's injector and templates read.
const LABELS: &[(&str, &[&str])] = &[
    ("sidecar.istio.io/inject", &["true", "false", "x"]),
    ("istio.io/rev", &["default", "canary", ""]),
    ("app", &["hello", "a-b", ""]),
    ("app.kubernetes.io/name", &["web"]),
    ("version", &["v1", "v2"]),
    ("app.kubernetes.io/version", &["1.0"]),
    ("service.istio.io/canonical-name", &["svc", ""]),
    ("service.istio.io/canonical-revision", &["r1"]),
    ("topology.istio.io/network", &["net1", "net2"]),
    ("istio.io/dataplane-mode", &["ambient", "none"]),
    ("security.istio.io/tlsMode", &["istio", "disabled"]),
    ("sidecar.istio.io/proxyImageType", &["debug"]),
];

fn probe(rng: &mut Rng) -> Value {
    let port = if rng.chance(50) {
        json!(8080)
    } else {
        json!("http")
    };
    let mut p = match rng.below(5) {
        0 => json!({"httpGet": {"path": "/ready", "port": port}}),
        1 => {
            json!({"httpGet": {"path": "/h", "port": port, "scheme": "HTTPS", "httpHeaders": [{"name": "X", "value": "y"}]}})
        }
        2 => json!({"tcpSocket": {"port": port}}),
        3 => json!({"grpc": {"port": 9000}}),
        _ => json!({"exec": {"command": ["cat", "/tmp/ok"]}}),
    };
    if rng.chance(40) {
        p["initialDelaySeconds"] = json!(rng.below(20));
        p["periodSeconds"] = json!(1 + rng.below(10));
        p["timeoutSeconds"] = json!(1 + rng.below(5));
    }
    p
}

fn quantity(rng: &mut Rng, cpu: bool) -> Value {
    let q = if cpu {
        rng.pick(&["100m", "1", "0.5", "250m", "2"])
    } else {
        rng.pick(&["64Mi", "1Gi", "128M", "512Mi"])
    };
    json!(q)
}

fn container(rng: &mut Rng, name: &str) -> Value {
    let mut c = json!({"name": name, "image": rng.pick(&["nginx", "docker.io/app:1.0", "busybox@sha256:0123"])});
    if rng.chance(60) {
        let mut ports = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let port = *[80, 8080, 9090, 15020, 443, 3000]
                .get(rng.below(6))
                .unwrap_or(&80);
            let mut p = json!({"containerPort": port});
            if rng.chance(50) {
                p["name"] = json!(rng.pick(&["http", "grpc", "metrics", "tcp-x"]));
            }
            if rng.chance(20) {
                p["protocol"] = json!(rng.pick(&["TCP", "UDP"]));
            }
            ports.push(p);
        }
        c["ports"] = Value::Array(ports);
    }
    for probe_name in ["readinessProbe", "livenessProbe", "startupProbe"] {
        if rng.chance(30) {
            c[probe_name] = probe(rng);
        }
    }
    if rng.chance(40) {
        let mut r = json!({});
        if rng.chance(70) {
            r["requests"] = json!({"cpu": quantity(rng, true), "memory": quantity(rng, false)});
        }
        if rng.chance(50) {
            r["limits"] = json!({"cpu": quantity(rng, true), "memory": quantity(rng, false)});
        }
        c["resources"] = r;
    }
    if rng.chance(30) {
        let mut s = json!({});
        if rng.chance(50) {
            s["runAsUser"] = json!(*[0, 1000, 1337].get(rng.below(3)).unwrap_or(&0));
        }
        if rng.chance(40) {
            s["runAsNonRoot"] = json!(rng.chance(50));
        }
        if rng.chance(30) {
            s["readOnlyRootFilesystem"] = json!(true);
        }
        if rng.chance(20) {
            s["capabilities"] = json!({"add": ["NET_ADMIN"], "drop": ["ALL"]});
        }
        c["securityContext"] = s;
    }
    if rng.chance(20) {
        c["env"] = json!([{"name": "A", "value": "1"}]);
    }
    c
}

fn pod_template(rng: &mut Rng, kind_is_pod: bool, templates: Option<&str>) -> Value {
    let mut annotations = Map::new();
    for _ in 0..rng.below(5) {
        let (k, vs) = ANNOTATIONS[rng.below(ANNOTATIONS.len())];
        annotations.insert(k.to_string(), json!(vs[rng.below(vs.len())]));
    }
    if let Some(names) = templates {
        // Select the user template on every workload: the annotation is what Istio's kube-inject honours.
        annotations.insert("inject.istio.io/templates".into(), json!(names));
    }
    let mut labels = Map::new();
    for _ in 0..rng.below(4) {
        let (k, vs) = LABELS[rng.below(LABELS.len())];
        labels.insert(k.to_string(), json!(vs[rng.below(vs.len())]));
    }
    let mut containers = vec![container(rng, "app")];
    if rng.chance(25) {
        containers.push(container(rng, "helper"));
    }
    let mut spec = json!({"containers": containers});
    if rng.chance(25) {
        let mut init = vec![container(rng, "setup")];
        if rng.chance(20) {
            // A native sidecar of the user's own.
            let mut s = container(rng, "log-shipper");
            s["restartPolicy"] = json!("Always");
            init.push(s);
        }
        spec["initContainers"] = Value::Array(init);
    }
    if rng.chance(20) {
        spec["securityContext"] = json!({"runAsUser": 1000, "fsGroup": 2000});
    }
    if rng.chance(10) {
        spec["hostNetwork"] = json!(true);
    }
    if rng.chance(10) {
        spec["serviceAccountName"] = json!("sa");
    }
    if rng.chance(10) {
        spec["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    }
    if kind_is_pod && rng.chance(20) {
        spec["restartPolicy"] = json!("Never");
    }
    let mut meta = json!({});
    if !annotations.is_empty() {
        meta["annotations"] = Value::Object(annotations);
    }
    if !labels.is_empty() {
        meta["labels"] = Value::Object(labels);
    }
    json!({"metadata": meta, "spec": spec})
}

fn workload(rng: &mut Rng, kinds: &[&str], templates: Option<&str>) -> Value {
    let kind = rng.pick(kinds);
    let name = rng.pick(&["hello", "web", "db-0"]);
    let mut t = pod_template(rng, kind == "Pod", templates);
    let selector = json!({"matchLabels": {"app": name}});
    if kind != "Pod" && kind != "CronJob" && kind != "Job" {
        let labels = t["metadata"]
            .as_object_mut()
            .map(|m| m.entry("labels").or_insert_with(|| json!({})));
        if let Some(Value::Object(l)) = labels {
            l.insert("app".into(), json!(name));
        }
    }
    let mut meta = json!({"name": name});
    if rng.chance(30) {
        meta["namespace"] = json!(rng.pick(&["default", "prod", "istio-system", "kube-system"]));
    }
    match kind {
        "Pod" => {
            let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": t["spec"].take()});
            for k in ["annotations", "labels"] {
                if let Some(v) = t["metadata"].get(k) {
                    p["metadata"][k] = v.clone();
                }
            }
            p
        }
        "Deployment" => json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"replicas": 1, "selector": selector, "template": t}}),
        "StatefulSet" => json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
            "spec": {"serviceName": name, "selector": selector, "template": t}}),
        "Job" => {
            t["spec"]["restartPolicy"] = json!("Never");
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"template": t}})
        }
        _ => {
            t["spec"]["restartPolicy"] = json!("OnFailure");
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta,
                "spec": {"schedule": "*/1 * * * *", "jobTemplate": {"spec": {"template": t}}}})
        }
    }
}

const KINDS: &[&str] = &["Pod", "Deployment", "StatefulSet", "Job", "CronJob"];

fn stream(rng: &mut Rng, templates: Option<&str>) -> String {
    let mut docs = Vec::new();
    for _ in 0..1 + usize::from(rng.chance(15)) {
        if rng.chance(12) {
            let items: Vec<Value> = (0..1 + rng.below(2))
                .map(|_| workload(rng, KINDS, templates))
                .collect();
            docs.push(json!({"apiVersion": "v1", "kind": "List", "items": items}));
        } else if rng.chance(5) {
            docs.push(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}));
        } else {
            docs.push(workload(rng, KINDS, templates));
        }
    }
    docs.iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n---\n")
        + "\n"
}

/// Values overrides drawn from the chart's `values.yaml` options the injection templates read.
fn values(rng: &mut Rng) -> Value {
    let mut v = json!({});
    let options: &[(&str, &[Value])] = &[
        ("/global/proxy/privileged", &[json!(true), json!(false)]),
        ("/global/proxy/enableCoreDump", &[json!(true)]),
        (
            "/global/proxy/holdApplicationUntilProxyStarts",
            &[json!(true)],
        ),
        ("/global/proxy/logLevel", &[json!("debug"), json!("error")]),
        ("/global/proxy/componentLogLevel", &[json!("misc:debug")]),
        (
            "/global/proxy/includeIPRanges",
            &[json!("10.0.0.0/8"), json!("")],
        ),
        ("/global/proxy/excludeIPRanges", &[json!("192.168.0.0/16")]),
        (
            "/global/proxy/includeInboundPorts",
            &[json!("80,8080"), json!("")],
        ),
        ("/global/proxy/excludeInboundPorts", &[json!("9090")]),
        ("/global/proxy/excludeOutboundPorts", &[json!("3306")]),
        ("/global/proxy/statusPort", &[json!(15021), json!(0)]),
        (
            "/global/proxy/image",
            &[json!("proxyTest"), json!("docker.io/x/proxy:9")],
        ),
        (
            "/global/proxy/resources",
            &[
                json!({"requests": {"cpu": "10m"}}),
                json!({"limits": {"memory": "1Gi"}}),
            ],
        ),
        ("/global/proxy/readinessInitialDelaySeconds", &[json!(5)]),
        ("/global/proxy/readinessFailureThreshold", &[json!(9)]),
        (
            "/global/proxy/lifecycle",
            &[json!({"preStop": {"exec": {"command": ["sleep", "5"]}}})],
        ),
        (
            "/global/proxy_init/resources",
            &[json!({"requests": {"cpu": "1m"}})],
        ),
        (
            "/global/imagePullPolicy",
            &[json!("Always"), json!("Never")],
        ),
        (
            "/global/imagePullSecrets",
            &[json!(["s1"]), json!(["a", "b"])],
        ),
        ("/global/network", &[json!("network1")]),
        ("/global/logAsJson", &[json!(true)]),
        ("/global/hub", &[json!("example.com/istio")]),
        ("/global/tag", &[json!("1.2.3"), json!("")]),
        ("/global/variant", &[json!("distroless"), json!("debug")]),
        ("/global/sts/servicePort", &[json!(15463)]),
        ("/global/caAddress", &[json!("ca:15012")]),
        ("/pilot/cni/enabled", &[json!(true)]),
        ("/pilot/cni/provider", &[json!("multus")]),
        (
            "/sidecarInjectorWebhook/rewriteAppHTTPProbe",
            &[json!(false)],
        ),
        ("/global/platform", &[json!("openshift"), json!("gke")]),
        (
            "/meshConfig/defaultConfig/holdApplicationUntilProxyStarts",
            &[json!(true)],
        ),
    ];
    for _ in 0..rng.below(4) {
        let (path, vals) = &options[rng.below(options.len())];
        set(&mut v, path, vals[rng.below(vals.len())].clone());
    }
    v
}

/// Mesh overrides (MeshConfig and its `defaultConfig` ProxyConfig).
fn mesh(rng: &mut Rng) -> Value {
    let mut m = json!({});
    let options: &[(&str, &[Value])] = &[
        (
            "/defaultConfig/holdApplicationUntilProxyStarts",
            &[json!(true), json!(false)],
        ),
        (
            "/defaultConfig/interceptionMode",
            &[json!("TPROXY"), json!("REDIRECT")],
        ),
        ("/defaultConfig/concurrency", &[json!(4), json!(0)]),
        (
            "/defaultConfig/proxyMetadata",
            &[json!({"ISTIO_META_DNS_CAPTURE": "true"}), json!({"A": "b"})],
        ),
        ("/defaultConfig/terminationDrainDuration", &[json!("10s")]),
        ("/defaultConfig/statusPort", &[json!(15021)]),
        (
            "/defaultConfig/image",
            &[json!({"imageType": "distroless"})],
        ),
        (
            "/defaultConfig/tracing",
            &[json!({"zipkin": {"address": "z:9411"}})],
        ),
        (
            "/defaultConfig/proxyStatsMatcher",
            &[json!({"inclusionPrefixes": ["x"]})],
        ),
        ("/enablePrometheusMerge", &[json!(false), json!(true)]),
        ("/trustDomain", &[json!("example.org")]),
        (
            "/defaultConfig/discoveryAddress",
            &[json!("istiod.other:15012")],
        ),
    ];
    for _ in 0..rng.below(3) {
        let (path, vals) = &options[rng.below(options.len())];
        set(&mut m, path, vals[rng.below(vals.len())].clone());
    }
    m
}

fn set(root: &mut Value, path: &str, v: Value) {
    let mut at = root;
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    for (i, p) in parts.iter().enumerate() {
        if !at.is_object() {
            *at = json!({});
        }
        let Some(obj) = at.as_object_mut() else {
            return;
        };
        if i + 1 == parts.len() {
            obj.insert((*p).to_string(), v);
            return;
        }
        at = obj.entry((*p).to_string()).or_insert_with(|| json!({}));
    }
}

/// Expressions of the template subset, with edge values; each renders a value.
const EXPRS: &[&str] = &[
    ".ObjectMeta.Name",
    ".ObjectMeta.Namespace",
    ".DeploymentMeta.Name",
    ".TypeMeta.Kind",
    "index .ObjectMeta.Labels \"app\"",
    ".ObjectMeta.Labels.app",
    ".ObjectMeta.Annotations.missing",
    "len .Spec.Containers",
    "(index .Spec.Containers 0).Name",
    "(index .Spec.Containers 0).Image",
    ".Values.global.hub",
    ".Values.global.proxy.statusPort",
    ".Values.global.nope",
    ".ProxyConfig.Concurrency",
    ".ProxyConfig.GetConcurrency",
    ".ProxyConfig.InterceptionMode.String",
    ".ProxyConfig.StatusPort",
    ".ProxyConfig.DiscoveryAddress",
    ".ProxyConfig.ProxyMetadata",
    ".MeshConfig.TrustDomain",
    ".MeshConfig.GetEnablePrometheusMerge",
    ".Revision",
    ".NativeSidecars",
    ".ProxyImage",
    ".ProxyUID",
    ".Spec.HostNetwork",
    ".Spec.SecurityContext",
    ".Spec.ServiceAccountName",
    "printf \"%d\" 42",
    "printf \"%5.2f|%-8s|%x|%q\" 3.14159 \"ab\" 255 \"q\\\"\"",
    "printf \"%v %T\" .Values.global.proxy.statusPort .Values.global.proxy.statusPort",
    "printf \"%d\"",
    "printf \"%s\" 1 2",
    "printf \"%08.3e\" 12345.678",
    "printf \"%999999999d\" 1",
    "printf \"%.99999999f\" 1.0",
    "printf \"%U %c %b %o %O\" 0x1F600 65 5 8 8",
    "99999999999999999999999",
    "9223372036854775807",
    "-9223372036854775808",
    "0x7fffffffffffffff",
    "1e308",
    "1_000_000",
    "'a'",
    "`raw\\n`",
    "\"esc\\t\\u00e9\"",
    "add1 1",
    "int \"12\"",
    "int64 \"9223372036854775808\"",
    "float64 \"1.5\"",
    "toString 3",
    "default \"d\" .ObjectMeta.Annotations.missing",
    "default \"d\" \"\"",
    "empty .Spec.Volumes",
    "coalesce \"\" .ObjectMeta.Name \"x\"",
    "ternary \"y\" \"n\" .Spec.HostNetwork",
    "quote .ObjectMeta.Name",
    "squote 5",
    "join \",\" (list \"a\" \"b\" 3)",
    "list 1 \"a\" nil",
    "append (list 1) 2",
    "dict \"a\" 1 \"b\" (list 2)",
    "get (dict \"a\" 1) \"a\"",
    "hasKey .Values.global \"hub\"",
    "toJson .ObjectMeta.Labels",
    "toJSON .ObjectMeta.Annotations",
    "toYaml .Spec.Containers",
    "toYaml .Values.global.proxy.resources",
    "structToJSON .ProxyConfig",
    "fromJSON \"{\\\"a\\\":1}\"",
    "fromJSON \"bad\"",
    "lower \"AbC\"",
    "upper .ObjectMeta.Name",
    "toLower \"X\"",
    "trim \"  s  \"",
    "trimAll \"-\" \"--a--\"",
    "trimPrefix \"he\" \"hello\"",
    "trimSuffix \"lo\" \"hello\"",
    "hasPrefix \"he\" \"hello\"",
    "hasSuffix \"x\" \"hello\"",
    "replace \"l\" \"L\" \"hello\"",
    "split \",\" \"a,b,c\"",
    "repeat 3 \"ab\"",
    "repeat 100000000 \"ab\"",
    "trunc 3 \"hello\"",
    "trunc -2 \"hello\"",
    "contains \"ell\" \"hello\"",
    "indent 2 \"a\\nb\"",
    "nindent 4 \"a\"",
    "annotation .ObjectMeta \"sidecar.istio.io/proxyCPU\" \"100m\"",
    "valueOrDefault .ObjectMeta.Annotations.x \"dflt\"",
    "isset .ObjectMeta.Annotations \"app\"",
    "omit (dict \"a\" 1 \"b\" 2) \"a\"",
    "strdict \"k\" \"v\"",
    "env \"NOPE\" \"fallback\"",
    "eq 1 1",
    "eq 1 1.0",
    "ne \"a\" \"b\"",
    "lt 1 2",
    "ge 9223372036854775807 -1",
    "and 1 0 2",
    "or \"\" \"z\"",
    "or \"\" nil \"z\"",
    "and 1 nil 2",
    "not .Spec.HostNetwork",
    "index .Spec.Containers 5",
    "index (list 1 2) -1",
    "index .Values \"global\" \"proxy\" \"image\"",
    "len .ObjectMeta.Annotations",
    "len 3",
    "print 1 2 \"a\" \"b\" 3",
    "println \"x\"",
    "slice \"abc\" 1",
    // Sorted: sprig's `keys` walks a Go map, so unsorted its output changes from run to run and
    // Istio's two drivers disagree with each other (seed 102 case 19350).
    "keys .Values | sortAlpha",
    "include \"x\" .",
    "fail \"stop\"",
    "nil",
    ".Nope.Field",
    ".Spec.Containers.Name",
];

/// A user template: a partial pod whose annotation values are the generated expressions, inside the
/// control structures of the subset.
fn user_template(rng: &mut Rng) -> String {
    let mut t = String::from("metadata:\n  annotations:\n");
    for i in 0..1 + rng.below(3) {
        let e = rng.pick(EXPRS);
        let body = match rng.below(8) {
            0 => format!("{{{{ {e} | toJson }}}}"),
            1 => format!("{{{{ with {e} }}}}{{{{ . | toString | quote }}}}{{{{ else }}}}\"none\"{{{{ end }}}}"),
            2 => format!("{{{{ if {e} }}}}\"yes\"{{{{ else if .NativeSidecars }}}}\"native\"{{{{ else }}}}\"no\"{{{{ end }}}}"),
            3 => format!("\"{{{{ range $i, $v := {e} }}}}{{{{ $i }}}}={{{{ $v }}}};{{{{ else }}}}empty{{{{ end }}}}\""),
            4 => format!("{{{{- $x := {e} -}}}} {{{{ printf \"%v\" $x | quote }}}}"),
            5 => format!("{{{{ range $v := 0 }}}}{{{{ end }}}}{{{{ {e} | printf \"%v\" | quote }}}}"),
            6 => format!("{{{{/* c */}}}}{{{{ ({e}) | toString | quote }}}}"),
            _ => format!("{{{{ {e} | quote }}}}"),
        };
        let _ = std::fmt::Write::write_fmt(&mut t, format_args!("    gen{i}: {body}\n"));
    }
    if rng.chance(30) {
        t.push_str("spec:\n  containers:\n  - name: istio-proxy\n    env:\n    - name: GEN\n      value: {{ .ObjectMeta.Name | quote }}\n");
    }
    t
}

/// The case `index` of `seed`.
pub fn case(kind: Kind, seed: u64, index: u64) -> Case {
    let salt = if kind == Kind::Template {
        0x7465_6d70
    } else {
        0
    };
    let mut rng = Rng::new(seed ^ salt ^ index.wrapping_mul(0x2545_F491_4F6C_DD1D));
    let mut templates = Map::new();
    let mut names = None;
    if kind == Kind::Template {
        templates.insert("custom".into(), json!(user_template(&mut rng)));
        names = Some(if rng.chance(70) {
            "sidecar,custom"
        } else {
            "custom"
        });
    }
    let input = stream(&mut rng, names);
    let values = values(&mut rng);
    let mesh = mesh(&mut rng);
    let native = rng.chance(50);
    Case {
        kind,
        seed,
        index,
        input,
        values,
        mesh,
        templates,
        native,
    }
}
