//! Istio's traffic annotations as the injector reads them, one row each: the shared row
//! (`sidecar_core::annotations`: the name and the istio-iptables flag it becomes), the injector's own
//! check (Istio's `pkg/kube/inject/validate.go`), the characters its `istio-init` argument may hold,
//! and where the value comes from when the pod does not say (Istio's `injection-template.yaml`).
//!
//! The rows are in the template's order: `render::init_args` writes the `istio-init` arguments and
//! `render::context` echoes the annotations for the CNI plugin by walking this table, and `annotations`
//! validates them from it, so that an annotation the CNI plugin also reads is added here once. The
//! plugin's own defaults and checks stay in `istio-cni`, as Istio keeps `validate.go` apart from
//! `cni/pkg/plugin/sidecar_redirect.go`.

use sidecar_core::annotations::{self, Annotation};
use sidecar_core::validate::{
    validate_exclude_ip_ranges, validate_include_ip_ranges, validate_interception_mode,
    validate_interfaces, validate_port_list,
};

/// An annotation value's check: the reason it is refused.
pub(crate) type Validator = fn(&str) -> Result<(), String>;

/// Which characters an `istio-init` argument value may hold.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Shape {
    /// CIDRs / addresses, comma separated, or `*`.
    Cidrs,
    /// Ports, comma separated (spaces allowed around entries), or `*`.
    Ports,
    /// Interface names, comma separated.
    Interfaces,
    /// `scope:level,scope:level` or `level`.
    LogLevel,
}

impl Shape {
    pub(crate) fn allows(self, c: char) -> bool {
        match self {
            // Spaces around list entries are accepted by Istio's validation (entries are trimmed) and are
            // harmless inside one argument.
            Shape::Cidrs => c.is_ascii_hexdigit() || matches!(c, '.' | ':' | '/' | ',' | '*' | ' '),
            Shape::Ports => c.is_ascii_digit() || matches!(c, ',' | ' ' | '*'),
            Shape::Interfaces => {
                c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | ',' | ' ')
            }
            Shape::LogLevel => {
                c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | ',' | ':')
            }
        }
    }
}

/// Where a traffic setting's value comes from, and when the template writes it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum From {
    /// The interception mode the inputs decided (the annotation, else the proxy config's), always.
    Mode,
    /// The annotation (even empty), else the values entry as Go prints it: always an argument, echoed
    /// for the CNI plugin when non-empty (or always, with `echo_empty`).
    Setting {
        values: &'static str,
        echo_empty: bool,
    },
    /// As `Setting`, with the status port appended, and Istio's own ports in front of the argument.
    ExcludeInbound { values: &'static str },
    /// The annotation when present, else the values entry when non-empty; otherwise nothing.
    Optional { values: &'static str },
    /// The annotation when present (echoed when non-empty).
    Annotation,
    /// The annotation, else the `fallback` annotation's value (the argument only; each is echoed as
    /// itself, the `fallback` row reading `FallbackOnly`).
    Preferred { fallback: &'static Annotation },
    /// Read only as another row's fallback: echoed when non-empty, never an argument of its own.
    FallbackOnly,
}

/// One traffic annotation as the injector reads it.
pub(crate) struct Traffic {
    /// The shared row: its name, and the flag it becomes.
    pub annotation: &'static Annotation,
    /// Istio's check (`validate.go`); `includeOutboundPorts`, which Istio leaves unchecked, is held to
    /// a port list here.
    pub validate: Validator,
    /// The characters its argument may hold (`Mode`'s was checked by the inputs).
    pub shape: Shape,
    pub from: From,
}

/// The traffic annotations, in the template's order.
pub(crate) static TRAFFIC: &[Traffic] = &[
    Traffic {
        annotation: &annotations::INTERCEPTION_MODE,
        validate: validate_interception_mode,
        // Not read: the inputs accept only REDIRECT, TPROXY and NONE.
        shape: Shape::Cidrs,
        from: From::Mode,
    },
    Traffic {
        annotation: &annotations::INCLUDE_OUTBOUND_IP_RANGES,
        validate: validate_include_ip_ranges,
        shape: Shape::Cidrs,
        from: From::Setting {
            values: "global.proxy.includeIPRanges",
            echo_empty: false,
        },
    },
    Traffic {
        annotation: &annotations::EXCLUDE_OUTBOUND_IP_RANGES,
        validate: validate_exclude_ip_ranges,
        shape: Shape::Cidrs,
        from: From::Setting {
            values: "global.proxy.excludeIPRanges",
            echo_empty: false,
        },
    },
    Traffic {
        annotation: &annotations::INCLUDE_INBOUND_PORTS,
        validate: validate_include_inbound_ports,
        shape: Shape::Ports,
        from: From::Setting {
            values: "global.proxy.includeInboundPorts",
            echo_empty: true,
        },
    },
    Traffic {
        annotation: &annotations::EXCLUDE_INBOUND_PORTS,
        validate: validate_exclude_inbound_ports,
        shape: Shape::Ports,
        from: From::ExcludeInbound {
            values: "global.proxy.excludeInboundPorts",
        },
    },
    Traffic {
        annotation: &annotations::INCLUDE_OUTBOUND_PORTS,
        validate: validate_include_outbound_ports,
        shape: Shape::Ports,
        from: From::Optional {
            values: "global.proxy.includeOutboundPorts",
        },
    },
    Traffic {
        annotation: &annotations::EXCLUDE_OUTBOUND_PORTS,
        validate: validate_exclude_outbound_ports,
        shape: Shape::Ports,
        from: From::Optional {
            values: "global.proxy.excludeOutboundPorts",
        },
    },
    Traffic {
        annotation: &annotations::KUBEVIRT_INTERFACES,
        validate: validate_interfaces,
        shape: Shape::Interfaces,
        from: From::FallbackOnly,
    },
    Traffic {
        annotation: &annotations::REROUTE_VIRTUAL_INTERFACES,
        validate: validate_interfaces,
        shape: Shape::Interfaces,
        from: From::Preferred {
            fallback: &annotations::KUBEVIRT_INTERFACES,
        },
    },
    Traffic {
        annotation: &annotations::EXCLUDE_INTERFACES,
        validate: validate_interfaces,
        shape: Shape::Interfaces,
        from: From::Annotation,
    },
];

fn validate_include_inbound_ports(v: &str) -> Result<(), String> {
    if v == "*" {
        return Ok(());
    }
    validate_port_list(v).map_err(|e| format!("includeInboundPorts invalid: {e}"))
}

fn validate_exclude_inbound_ports(v: &str) -> Result<(), String> {
    validate_port_list(v).map_err(|e| format!("excludeInboundPorts invalid: {e}"))
}

fn validate_include_outbound_ports(v: &str) -> Result<(), String> {
    validate_port_list(v).map_err(|e| format!("includeOutboundPorts invalid: {e}"))
}

fn validate_exclude_outbound_ports(v: &str) -> Result<(), String> {
    validate_port_list(v).map_err(|e| format!("excludeOutboundPorts invalid: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shared row that becomes a flag is read here, each once, and every row here names a flag.
    #[test]
    fn every_shared_traffic_annotation_is_one_row() {
        for a in annotations::ANNOTATIONS {
            let rows = TRAFFIC.iter().filter(|t| t.annotation == a).count();
            assert_eq!(rows, usize::from(a.flag.is_some()), "{}", a.name);
        }
        for t in TRAFFIC {
            assert!(t.annotation.flag.is_some(), "{}", t.annotation.name);
        }
    }
}
