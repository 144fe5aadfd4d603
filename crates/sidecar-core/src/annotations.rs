//! Istio's pod annotations that both the injector and the CNI plugin read, one row each: the name, and
//! the istio-iptables flag its value becomes (the injector's `istio-init` arguments and the plugin's
//! redirect alike), so that neither binary spells either.
//!
//! What a binary does with a missing or bad value stays with that binary, as Istio keeps
//! `pkg/kube/inject/validate.go` (the injector) apart from `cni/pkg/plugin/sidecar_redirect.go`
//! `annotationRegistry` (the plugin): their defaults differ (the plugin excludes the status port
//! outbound, the injector nothing) and so do their checks (the plugin refuses interception mode `NONE`,
//! the injector takes it).

use crate::flags::{self, Flag};

/// One annotation both binaries read.
#[derive(Debug, PartialEq, Eq)]
pub struct Annotation {
    /// The annotation's key, as Istio's `annotation` package names it.
    pub name: &'static str,
    /// The istio-iptables flag its value becomes; `None` for the annotations that decide whether a
    /// pod is handled at all.
    pub flag: Option<&'static Flag>,
}

/// Istio's `annotation.SidecarInject` (also a label, which wins): whether a pod gets a sidecar.
pub static INJECT: Annotation = Annotation {
    name: "sidecar.istio.io/inject",
    flag: None,
};
/// Istio's `annotation.SidecarStatus`: what the injection added; only an injected pod has it.
pub static STATUS: Annotation = Annotation {
    name: "sidecar.istio.io/status",
    flag: None,
};
/// Istio's `annotation.SidecarInterceptionMode`.
pub static INTERCEPTION_MODE: Annotation = Annotation {
    name: "sidecar.istio.io/interceptionMode",
    flag: Some(&flags::INBOUND_INTERCEPTION_MODE),
};
/// Istio's `annotation.SidecarTrafficIncludeOutboundIPRanges`.
pub static INCLUDE_OUTBOUND_IP_RANGES: Annotation = Annotation {
    name: "traffic.sidecar.istio.io/includeOutboundIPRanges",
    flag: Some(&flags::SERVICE_CIDR),
};
/// Istio's `annotation.SidecarTrafficExcludeOutboundIPRanges`.
pub static EXCLUDE_OUTBOUND_IP_RANGES: Annotation = Annotation {
    name: "traffic.sidecar.istio.io/excludeOutboundIPRanges",
    flag: Some(&flags::SERVICE_EXCLUDE_CIDR),
};
/// Istio's `annotation.SidecarTrafficIncludeInboundPorts`.
pub static INCLUDE_INBOUND_PORTS: Annotation = Annotation {
    name: "traffic.sidecar.istio.io/includeInboundPorts",
    flag: Some(&flags::INBOUND_PORTS),
};
/// Istio's `annotation.SidecarTrafficExcludeInboundPorts`.
pub static EXCLUDE_INBOUND_PORTS: Annotation = Annotation {
    name: "traffic.sidecar.istio.io/excludeInboundPorts",
    flag: Some(&flags::LOCAL_EXCLUDE_PORTS),
};
/// Istio's `annotation.SidecarTrafficIncludeOutboundPorts`.
pub static INCLUDE_OUTBOUND_PORTS: Annotation = Annotation {
    name: "traffic.sidecar.istio.io/includeOutboundPorts",
    flag: Some(&flags::OUTBOUND_PORTS),
};
/// Istio's `annotation.SidecarTrafficExcludeOutboundPorts`.
pub static EXCLUDE_OUTBOUND_PORTS: Annotation = Annotation {
    name: "traffic.sidecar.istio.io/excludeOutboundPorts",
    flag: Some(&flags::LOCAL_OUTBOUND_PORTS_EXCLUDE),
};
/// Istio's `annotation.SidecarTrafficExcludeInterfaces`.
pub static EXCLUDE_INTERFACES: Annotation = Annotation {
    name: "traffic.sidecar.istio.io/excludeInterfaces",
    flag: Some(&flags::EXCLUDE_INTERFACES),
};
/// Istio's `annotation.IoIstioRerouteVirtualInterfaces`.
pub static REROUTE_VIRTUAL_INTERFACES: Annotation = Annotation {
    name: "istio.io/reroute-virtual-interfaces",
    flag: Some(&flags::KUBE_VIRT_INTERFACES),
};
/// Istio's `annotation.SidecarTrafficKubevirtInterfaces`: deprecated, read when
/// [`REROUTE_VIRTUAL_INTERFACES`] is absent.
pub static KUBEVIRT_INTERFACES: Annotation = Annotation {
    name: "traffic.sidecar.istio.io/kubevirtInterfaces",
    flag: Some(&flags::KUBE_VIRT_INTERFACES),
};

/// Every row, for the tests and the generated reference.
pub static ANNOTATIONS: [&Annotation; 12] = [
    &INJECT,
    &STATUS,
    &INTERCEPTION_MODE,
    &INCLUDE_OUTBOUND_IP_RANGES,
    &EXCLUDE_OUTBOUND_IP_RANGES,
    &INCLUDE_INBOUND_PORTS,
    &EXCLUDE_INBOUND_PORTS,
    &INCLUDE_OUTBOUND_PORTS,
    &EXCLUDE_OUTBOUND_PORTS,
    &EXCLUDE_INTERFACES,
    &REROUTE_VIRTUAL_INTERFACES,
    &KUBEVIRT_INTERFACES,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Istio's names, written out here on purpose: a row whose name or flag drifts from what Istio's
    /// annotation package and istio-iptables call it fails this test, not a user's pod.
    #[test]
    fn the_rows_are_istio_s_names_and_flags() {
        let rows: Vec<(&str, Option<&str>)> = ANNOTATIONS
            .iter()
            .map(|a| (a.name, a.flag.map(|f| f.long)))
            .collect();
        assert_eq!(
            rows,
            [
                ("sidecar.istio.io/inject", None),
                ("sidecar.istio.io/status", None),
                (
                    "sidecar.istio.io/interceptionMode",
                    Some("istio-inbound-interception-mode")
                ),
                (
                    "traffic.sidecar.istio.io/includeOutboundIPRanges",
                    Some("istio-service-cidr")
                ),
                (
                    "traffic.sidecar.istio.io/excludeOutboundIPRanges",
                    Some("istio-service-exclude-cidr")
                ),
                (
                    "traffic.sidecar.istio.io/includeInboundPorts",
                    Some("istio-inbound-ports")
                ),
                (
                    "traffic.sidecar.istio.io/excludeInboundPorts",
                    Some("istio-local-exclude-ports")
                ),
                (
                    "traffic.sidecar.istio.io/includeOutboundPorts",
                    Some("istio-outbound-ports")
                ),
                (
                    "traffic.sidecar.istio.io/excludeOutboundPorts",
                    Some("istio-local-outbound-ports-exclude")
                ),
                (
                    "traffic.sidecar.istio.io/excludeInterfaces",
                    Some("istio-exclude-interfaces")
                ),
                (
                    "istio.io/reroute-virtual-interfaces",
                    Some("kube-virt-interfaces")
                ),
                (
                    "traffic.sidecar.istio.io/kubevirtInterfaces",
                    Some("kube-virt-interfaces")
                ),
            ]
        );
        // Every flag a row names is one istio-iptables parses.
        for a in ANNOTATIONS {
            if let Some(f) = a.flag {
                assert_eq!(flags::by_long(f.long), Some(f), "{}", a.name);
            }
        }
    }
}
