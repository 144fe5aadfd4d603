use super::*;

const SPIRE: &str = "spec:\n  containers:\n  - name: istio-proxy\n    volumeMounts:\n    - name: workload-socket\n      mountPath: /var/run/secrets/workload-spiffe-uds\n      readOnly: true\n  volumes:\n  - name: workload-socket\n    csi:\n      driver: \"csi.spiffe.io\"\n      readOnly: true\n";
