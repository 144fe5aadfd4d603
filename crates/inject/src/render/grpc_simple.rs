//! The typed context of Istio's `grpc-simple` template (`files/grpc-simple.yaml`): no Istio container, a
//! busybox init container that writes the gRPC xDS bootstrap. `templates/grpc-simple.json` lays it out.

use askama::Template;
use serde_json::Value;

use super::inputs::{sprint, Inputs};
use crate::pod;
use sidecar_core::fields::Fields;

/// The init container's script, verbatim from Istio's template (a `|-` block: no trailing newline).
pub(super) const BOOTSTRAP_SCRIPT: &str = r#"NODE_ID="sidecar~${INSTANCE_IP}~${POD_NAME}.${POD_NAMESPACE}~cluster.local"
SERVER_URI="dns:///istiod.${ISTIO_NAMESPACE}.svc:15010"
echo '
{
  "xds_servers": [
    {
      "server_uri": "'${SERVER_URI}'",
      "channel_creds": [{"type": "insecure"}],
      "server_features" : ["xds_v3"]
    }
  ],
  "node": {
    "id": "'${NODE_ID}'",
    "metadata": {
      "GENERATOR": "grpc"
    }
  }
}' > /var/lib/grpc/data/bootstrap.json"#;

#[derive(Template)]
#[template(path = "grpc-simple.json", escape = "none")]
pub(crate) struct GrpcSimple<'a> {
    /// Every container of the pod, `istio-proxy` included.
    containers: Vec<&'a str>,
    /// `values.global.istioNamespace` with the newline of the template's literal block.
    istio_namespace: String,
    script: &'static str,
}

impl<'a> GrpcSimple<'a> {
    pub(crate) fn build(inp: &Inputs<'a>) -> GrpcSimple<'a> {
        GrpcSimple {
            containers: pod::containers(inp.data.pod, "containers")
                .iter()
                .filter_map(|c| c.field("name").and_then(Value::as_str))
                .collect(),
            istio_namespace: format!("{}\n", sprint(inp.values_at("global.istioNamespace"))),
            script: BOOTSTRAP_SCRIPT,
        }
    }
}
