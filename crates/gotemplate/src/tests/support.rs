//! What the test modules share: the data root most tests render on, and helpers that run a text and
//! check its output or its error. Expected outputs are Go's (`text/template` + sprig + Istio's funcmap)
//! for the same text and data.

use serde_json::{json, Value};

use super::super::error::{ExecError, ParseError};
use super::super::limits::Limits;
use super::super::template::Template;

pub(super) fn data() -> Value {
    json!({
        "TypeMeta": {"kind": "Pod", "apiVersion": "v1"},
        "DeploymentMeta": {"name": "hello", "namespace": "default"},
        "ObjectMeta": {
            "generateName": "hello-",
            "namespace": "default",
            "labels": {"app": "hello", "version": "v1"},
            "annotations": {"sidecar.istio.io/proxyCPU": "200m", "empty": ""}
        },
        "Spec": {
            "containers": [
                {"name": "hello", "image": "hello:1", "ports": [{"name": "http", "containerPort": 80}]},
                {"name": "istio-proxy", "image": "proxy", "resources": {"requests": {"cpu": "100m"}}}
            ],
            "serviceAccountName": "default"
        },
        "ProxyConfig": {
            "discoveryAddress": "istiod.istio-system.svc:15012",
            "concurrency": 2,
            "proxyMetadata": {"DNS_CAPTURE": "true"},
            "statusPort": 15020
        },
        "MeshConfig": {"trustDomain": "cluster.local", "rootNamespace": "istio-system"},
        "Values": {
            "global": {
                "hub": "docker.io/istio",
                "proxy": {"statusPort": 15020, "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
                "caName": ""
            },
            "nums": {"a": 0, "b": 100, "c": 123456, "d": 999999, "e": 1000000, "f": 1234567,
                     "g": 0.5, "h": 0.0001, "i": 0.00001, "j": 1e21, "k": -0.0},
            "list": ["a", "b", "c"],
            "nested": {"x": 1, "y": [1, 2]},
            "nullv": null,
            "yes": true,
            "str": "false",
            "empty": [],
            "html": "<a&b>"
        },
        "Revision": "default",
        "NativeSidecars": true,
        "ProxyImage": "docker.io/istio/proxyv2:1.0",
        "ProxyUID": 1337,
        "ProxyGID": 0
    })
}

pub(super) fn run(text: &str) -> String {
    run_on(text, &data())
}

/// Asserts that each template prints its text on the shared data.
pub(super) fn renders(cases: &[(&str, &str)]) {
    for (text, want) in cases {
        assert_eq!(run(text), *want, "{text:?}");
    }
}

pub(super) fn run_on(text: &str, data: &Value) -> String {
    let t = Template::parse("t", text).unwrap_or_else(|e| panic!("parse {text:?}: {e}"));
    t.execute(data, &Limits::default())
        .unwrap_or_else(|e| panic!("execute {text:?}: {e}"))
}

pub(super) fn exec_err(text: &str) -> ExecError {
    let t = Template::parse("t", text).unwrap_or_else(|e| panic!("parse {text:?}: {e}"));
    match t.execute(&data(), &Limits::default()) {
        Ok(out) => panic!("{text:?} should fail, printed {out:?}"),
        Err(e) => e,
    }
}

/// Asserts that each template fails as unsupported: a value or operation whose Go result the evaluator
/// does not reproduce exactly.
pub(super) fn assert_unsupported(texts: &[&str]) {
    for text in texts {
        assert!(
            matches!(exec_err(text), ExecError::Unsupported { .. }),
            "{text:?}"
        );
    }
}

pub(super) fn exec_msg(text: &str) -> String {
    match exec_err(text) {
        ExecError::Eval { message, .. } => message,
        other => panic!("{text:?}: expected an evaluation error, got {other}"),
    }
}

pub(super) fn parse_err(text: &str) -> ParseError {
    match Template::parse("t", text) {
        Ok(_) => panic!("{text:?} should be refused"),
        Err(e) => e,
    }
}

pub(super) const CUSTOM: &str = r#"metadata:
  annotations:
    # Disable the built-in transformations. In the future we may want a template-level API
    prometheus.istio.io/merge-metrics: "false"
    sidecar.istio.io/rewriteAppHTTPProbers: "false"
    foo: bar
spec:
  containers:
  {{- range $index, $container := .Spec.Containers }}
  - name: {{ $container.Name }}
    env:
    - name: SOME_ENV
      value: "true"
    - name: SOME_FILE
      value: /var/lib/data/foo.json
    volumeMounts:
    - mountPath: /var/lib/data/foo.json
      subPath: foo.json
      name: some-injected-file
  {{- end}}
  volumes:
  - name: some-injected-file
    downwardAPI:
      items:
      - path: foo.json
        fieldRef:
          fieldPath: "metadata.annotations['foo']"
"#;
