//! The agent's Prometheus metrics, named as Istio's (`cni/pkg/install/monitoring.go`,
//! `cni/pkg/repair/monitoring.go`).

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Label pairs, as Istio's `monitoring.CreateLabel` values.
type Labels = Vec<(&'static str, &'static str)>;

/// Istio's install results (`resultSuccess`, `resultCopyBinariesFailure`, ...).
pub mod install_result {
    /// The binary, kubeconfig and configuration are in place.
    pub const SUCCESS: &str = "SUCCESS";
    /// Copying the binary failed.
    pub const COPY_BINARIES_FAILURE: &str = "COPY_BINARIES_FAILURE";
    /// Writing the kubeconfig failed.
    pub const CREATE_KUBECONFIG_FAILURE: &str = "CREATE_KUBECONFIG_FAILURE";
    /// Writing the network configuration failed.
    pub const CREATE_CNI_CONFIG_FAILURE: &str = "CREATE_CNI_CONFIG_FAILURE";
}

/// Every metric the agent serves.
pub struct Metrics {
    registry: Registry,
    installs: Family<Labels, Counter>,
    ready: Gauge,
    repaired: Family<Labels, Counter>,
    untaints: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let installs = Family::<Labels, Counter>::default();
        registry.register(
            "istio_cni_installs",
            "Total number of CNI plugins installed by the Istio CNI installer",
            installs.clone(),
        );
        let ready = Gauge::default();
        registry.register(
            "istio_cni_install_ready",
            "Whether the CNI plugin installation is ready or not",
            ready.clone(),
        );
        let repaired = Family::<Labels, Counter>::default();
        registry.register(
            "istio_cni_repair_pods_repaired",
            "Total number of pods repaired by repair controller",
            repaired.clone(),
        );
        let untaints = Counter::default();
        registry.register(
            "istio_cni_node_untainted",
            "Times the not-ready taint was removed from this node",
            untaints.clone(),
        );
        Metrics {
            registry,
            installs,
            ready,
            repaired,
            untaints,
        }
    }
}

impl Metrics {
    /// One install pass ended with `result` (an [`install_result`]).
    pub fn install(&self, result: &'static str) {
        self.installs.get_or_create(&vec![("result", result)]).inc();
    }

    /// The readiness the gauge shows.
    pub fn set_ready(&self, ready: bool) {
        self.ready.set(i64::from(ready));
    }

    /// A broken pod was handled: `kind` is `delete` or `label`, `result` `success`, `skip` or `fail`.
    pub fn repaired(&self, kind: &'static str, result: &'static str) {
        self.repaired
            .get_or_create(&vec![("type", kind), ("result", result)])
            .inc();
    }

    /// The taint was removed.
    pub fn untainted(&self) {
        self.untaints.inc();
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Every metric the agent serves, as a fresh registry encodes them, with one sample of each labelled
/// family (the encoder leaves an empty family out): docs/reference/metrics.md is generated from it
/// (`cargo run -p xtask -- docs`).
pub fn exposition() -> String {
    let metrics = Metrics::default();
    metrics.install(install_result::SUCCESS);
    metrics.repaired("delete", "success");
    metrics.encode()
}
