//! Which text renders a pod template: Istio's built-in names (`sidecar`, `gateway`, `grpc-agent`,
//! `grpc-simple`) render the text the configuration carries, through the evaluator, and the compiled
//! askama template only where that text is exactly the one it was compiled from, or where no text is
//! configured (our chart alone, `kube-inject` without files).
//!
//! Istio's `inject.go` `RunTemplate` executes whatever text is configured under a name, so a drop-in must
//! too: the release a user runs decides the pod's shape, not the release this binary was built against.

/// How a template of a configuration renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RenderPath {
    /// The compiled askama template: no text configured, or the configured text is the one it was
    /// compiled from.
    Compiled,
    /// The configured text, run by the bounded Go-template evaluator.
    Evaluated,
}

impl RenderPath {
    /// The label value in metrics and `explain`.
    pub fn as_str(self) -> &'static str {
        match self {
            RenderPath::Compiled => "compiled",
            RenderPath::Evaluated => "evaluated",
        }
    }
}

/// The pod templates of Istio's chart (its `files/` texts that `RunTemplate` runs on pods).
pub const POD_TEMPLATES: [&str; 4] = ["sidecar", "gateway", "grpc-agent", "grpc-simple"];

/// The templates of Istio's chart that its gateway controller renders into Deployments, never into
/// pods: a configuration may carry them (Istio's ConfigMap does), and the injector leaves them alone.
pub const GATEWAY_CONTROLLER_TEMPLATES: [&str; 4] = [
    "waypoint",
    "kube-gateway",
    "agentgateway",
    "agentgateway-waypoint",
];

/// A text each compiled template renders exactly as the evaluator renders it: `(template name, Istio
/// release, the text as the chart writes it into the ConfigMap, before its trim)`.
/// `compiled_matches_evaluated` in the tests proves the claim on every golden case; a text not listed
/// here is evaluated.
pub const COMPILED_FROM: &[(&str, &str, &str)] = &[
    (
        "sidecar",
        RELEASE,
        include_str!("../../../testdata/istio/releases/1.31.0-rc.0/injection-template.yaml"),
    ),
    (
        "gateway",
        RELEASE,
        include_str!(
            "../../../testdata/istio/releases/1.31.0-rc.0/gateway-injection-template.yaml"
        ),
    ),
    (
        "grpc-agent",
        RELEASE,
        include_str!("../../../testdata/istio/releases/1.31.0-rc.0/grpc-agent.yaml"),
    ),
    (
        "grpc-simple",
        RELEASE,
        include_str!("../../../testdata/istio/releases/1.31.0-rc.0/grpc-simple.yaml"),
    ),
];

/// The Istio release whose texts the compiled templates are.
pub const RELEASE: &str = "1.31.0-rc.0";

/// The release whose text under `name` is `text` when the compiled template renders it exactly, compared
/// as the chart writes it (Istio's `istiod-injector-configmap.yaml` trims the file).
pub fn compiled_release(name: &str, text: &str) -> Option<&'static str> {
    let text = text.trim();
    COMPILED_FROM
        .iter()
        .find(|(n, _, t)| *n == name && t.trim() == text)
        .map(|(_, release, _)| *release)
}
