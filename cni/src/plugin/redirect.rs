//! The pod's traffic annotations turned into istio-iptables settings, as Istio's
//! `cni/pkg/plugin/sidecar_redirect.go` `NewRedirect` does, and those settings as the istio-iptables
//! command line that iptables-init resolves (Istio's `sidecar_iptables_linux.go` `Program` fills the
//! same fields of istio-iptables' `Config`).

use std::ffi::OsString;

use super::pod_info::PodInfo;
use super::spec::{code, CniError};

/// The interception settings of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// `-p`: Envoy's outbound port (always 15001 in CNI mode).
    pub target_port: String,
    /// `-m`: `REDIRECT` or `TPROXY`.
    pub mode: String,
    /// `-u`: the proxy's uid.
    pub uid: String,
    /// `-g`: the proxy's gid.
    pub gid: String,
    /// `-i`.
    pub include_ip_cidrs: String,
    /// `-x`.
    pub exclude_ip_cidrs: String,
    /// `-d`, with Istio's own ports added.
    pub exclude_inbound_ports: String,
    /// `-o`.
    pub exclude_outbound_ports: String,
    /// `-b`.
    pub include_inbound_ports: String,
    /// `-q`.
    pub include_outbound_ports: String,
    /// `-k`.
    pub reroute_virtual_interfaces: String,
    /// `-c`.
    pub exclude_interfaces: String,
    /// `--redirect-dns` and `--capture-all-dns`, from the proxy's `ISTIO_META_DNS_CAPTURE`.
    pub dns_redirect: bool,
    /// `--dual-stack`, from the proxy's `ISTIO_DUAL_STACK`.
    pub dual_stack: bool,
    /// `--drop-invalid`, from the proxy's `INVALID_DROP`.
    pub invalid_drop: bool,
}

/// How an annotation's value is checked (Istio's `annotationRegistry` validators).
#[derive(Clone, Copy)]
enum Check {
    Mode,
    CidrsOrStar,
    Cidrs,
    PortsOrStar,
    Interfaces,
}

/// Istio's annotation names and defaults (`sidecar_redirect.go`).
const MODE: (&str, &str, Check) = ("sidecar.istio.io/interceptionMode", "REDIRECT", Check::Mode);
const INCLUDE_IPS: (&str, &str, Check) = (
    "traffic.sidecar.istio.io/includeOutboundIPRanges",
    "*",
    Check::CidrsOrStar,
);
const EXCLUDE_IPS: (&str, &str, Check) = (
    "traffic.sidecar.istio.io/excludeOutboundIPRanges",
    "",
    Check::Cidrs,
);
const EXCLUDE_INBOUND: (&str, &str, Check) = (
    "traffic.sidecar.istio.io/excludeInboundPorts",
    "15020",
    Check::PortsOrStar,
);
const INCLUDE_INBOUND: (&str, &str, Check) = (
    "traffic.sidecar.istio.io/includeInboundPorts",
    "*",
    Check::PortsOrStar,
);
// Istio's default here is the status port too (`defaultRedirectExcludePort`), unlike the injected
// istio-init, which excludes no outbound port by default.
const EXCLUDE_OUTBOUND: (&str, &str, Check) = (
    "traffic.sidecar.istio.io/excludeOutboundPorts",
    "15020",
    Check::PortsOrStar,
);
const INCLUDE_OUTBOUND: (&str, &str, Check) = (
    "traffic.sidecar.istio.io/includeOutboundPorts",
    "",
    Check::PortsOrStar,
);
const EXCLUDE_INTERFACES: (&str, &str, Check) = (
    "traffic.sidecar.istio.io/excludeInterfaces",
    "",
    Check::Interfaces,
);
const REROUTE: (&str, &str, Check) = ("istio.io/reroute-virtual-interfaces", "", Check::Interfaces);
const KUBEVIRT: (&str, &str, Check) = (
    "traffic.sidecar.istio.io/kubevirtInterfaces",
    "",
    Check::Interfaces,
);

fn check(kind: Check, value: &str) -> Result<(), String> {
    let cidrs = |v: &str| -> Result<(), String> {
        if v.is_empty() {
            return Ok(());
        }
        for cidr in v.split(',') {
            iptables_init::Cidr::parse(cidr)
                .map_err(|e| format!("failed parsing cidr {cidr:?}: {e}"))?;
        }
        Ok(())
    };
    let ports = |v: &str| -> Result<(), String> {
        let v = v.trim();
        if v.is_empty() {
            return Ok(());
        }
        for p in v.split(',') {
            // Go's strconv.ParseUint(strings.TrimSpace(p), 10, 16): decimal digits only.
            let t = p.trim();
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) || t.parse::<u16>().is_err() {
                return Err(format!("portList {v:?} invalid: failed parsing port {p:?}"));
            }
        }
        Ok(())
    };
    match kind {
        Check::Mode => match value {
            "REDIRECT" | "TPROXY" => Ok(()),
            _ => Err(format!("interceptionMode invalid: {value}")),
        },
        Check::CidrsOrStar if value == "*" => Ok(()),
        Check::CidrsOrStar => cidrs(value).map_err(|e| format!("IPRanges invalid: {e}")),
        Check::Cidrs => cidrs(value),
        Check::PortsOrStar if value == "*" => Ok(()),
        Check::PortsOrStar => ports(value),
        Check::Interfaces => {
            if value.is_empty() {
                return Ok(());
            }
            for iface in value.split(',') {
                let iface = iface.trim();
                if iface.is_empty() {
                    return Err("empty interface name".to_string());
                }
                if iface.len() > 15 {
                    return Err(format!("interface name {iface:?} too long (max 15 chars)"));
                }
                let mut chars = iface.chars();
                let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
                if !first_ok
                    || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
                {
                    return Err(format!(
                        "interface name {iface:?} contains invalid characters"
                    ));
                }
            }
            Ok(())
        }
    }
}

/// An annotation's value, or its default when absent (Istio's `getAnnotationOrDefault`); `found` says
/// which.
fn annotation(
    pi: &PodInfo,
    (key, default, kind): (&str, &str, Check),
) -> Result<(bool, String), CniError> {
    match pi.annotations.get(key) {
        Some(value) => check(kind, value)
            .map(|()| (true, value.clone()))
            .map_err(|e| {
                CniError::new(
                    code::INVALID_ANNOTATION,
                    format!("annotation {key}={value:?} is invalid: {e}"),
                )
            }),
        None => Ok((false, default.to_string())),
    }
}

/// A boolean of the proxy's environment, as Go's `strconv.ParseBool`; a bad value is logged and off.
fn env_bool(pi: &PodInfo, name: &str) -> bool {
    let Some(v) = pi.proxy_env.get(name) else {
        return false;
    };
    iptables_init::parse_go_bool(v).unwrap_or_else(|e| {
        tracing::warn!("cannot parse the proxy's {name}: {e}");
        false
    })
}

impl Redirect {
    /// The settings of a pod (Istio's `NewRedirect`).
    pub fn from_pod(pi: &PodInfo) -> Result<Redirect, CniError> {
        let id = |v: Option<i64>| match v {
            Some(n) if n != 0 => n.to_string(),
            _ => "1337".to_string(),
        };
        let (_, mut exclude_inbound) = annotation(pi, EXCLUDE_INBOUND)?;
        // Istio's "sync with non-cni injection template": its own ports are always excluded inbound,
        // appended after the pod's and deduplicated keeping the first.
        exclude_inbound = exclude_inbound.trim().to_string();
        if !exclude_inbound.is_empty() && !exclude_inbound.ends_with(',') {
            exclude_inbound.push(',');
        }
        exclude_inbound.push_str("15020,15021,15090");
        let mut seen = std::collections::HashSet::new();
        let exclude_inbound = exclude_inbound
            .split(',')
            .filter(|p| seen.insert(*p))
            .collect::<Vec<_>>()
            .join(",");
        let (found, mut reroute) = annotation(pi, REROUTE)?;
        if !found {
            reroute = annotation(pi, KUBEVIRT)?.1;
        }
        Ok(Redirect {
            target_port: "15001".to_string(),
            mode: annotation(pi, MODE)?.1,
            uid: id(pi.proxy_uid),
            gid: id(pi.proxy_gid),
            include_ip_cidrs: annotation(pi, INCLUDE_IPS)?.1,
            exclude_ip_cidrs: annotation(pi, EXCLUDE_IPS)?.1,
            exclude_inbound_ports: exclude_inbound,
            include_inbound_ports: annotation(pi, INCLUDE_INBOUND)?.1,
            exclude_outbound_ports: annotation(pi, EXCLUDE_OUTBOUND)?.1,
            include_outbound_ports: annotation(pi, INCLUDE_OUTBOUND)?.1,
            exclude_interfaces: annotation(pi, EXCLUDE_INTERFACES)?.1,
            reroute_virtual_interfaces: reroute,
            dns_redirect: env_bool(pi, "ISTIO_META_DNS_CAPTURE"),
            dual_stack: env_bool(pi, "ISTIO_DUAL_STACK"),
            invalid_drop: env_bool(pi, "INVALID_DROP"),
        })
    }

    /// The istio-iptables command line of these settings for the namespace `netns` (Istio's `Program`:
    /// `HostFilesystemPodNetwork` is `--cni-mode`, `NetworkNamespace` is `--network-namespace`).
    pub fn args(&self, netns: &str, native_nftables: bool) -> Vec<OsString> {
        let mut args: Vec<String> = vec![
            format!("--envoy-port={}", self.target_port),
            format!("--proxy-uid={}", self.uid),
            format!("--proxy-gid={}", self.gid),
            format!("--istio-inbound-interception-mode={}", self.mode),
            format!("--istio-service-cidr={}", self.include_ip_cidrs),
            format!("--istio-service-exclude-cidr={}", self.exclude_ip_cidrs),
            format!("--istio-inbound-ports={}", self.include_inbound_ports),
            format!("--istio-local-exclude-ports={}", self.exclude_inbound_ports),
            format!("--istio-outbound-ports={}", self.include_outbound_ports),
            format!(
                "--istio-local-outbound-ports-exclude={}",
                self.exclude_outbound_ports
            ),
            format!("--istio-exclude-interfaces={}", self.exclude_interfaces),
            format!("--kube-virt-interfaces={}", self.reroute_virtual_interfaces),
            "--cni-mode".to_string(),
            format!("--network-namespace={netns}"),
        ];
        if self.dns_redirect {
            args.push("--redirect-dns".to_string());
            args.push("--capture-all-dns".to_string());
        }
        if self.invalid_drop {
            args.push("--drop-invalid".to_string());
        }
        if self.dual_stack {
            args.push("--dual-stack".to_string());
        }
        if native_nftables {
            args.push("--native-nftables".to_string());
        }
        args.into_iter().map(OsString::from).collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pod(annotations: &[(&str, &str)]) -> PodInfo {
        PodInfo {
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..PodInfo::default()
        }
    }

    #[test]
    fn defaults_are_istio_s() {
        let r = Redirect::from_pod(&pod(&[])).unwrap();
        assert_eq!(r.mode, "REDIRECT");
        assert_eq!((r.uid.as_str(), r.gid.as_str()), ("1337", "1337"));
        assert_eq!(r.include_ip_cidrs, "*");
        assert_eq!(r.exclude_inbound_ports, "15020,15021,15090");
        assert_eq!(r.exclude_outbound_ports, "15020");
        assert_eq!(r.include_inbound_ports, "*");
        assert!(!r.dns_redirect);
    }

    #[test]
    fn annotations_are_read_and_istio_s_ports_appended_once() {
        let r = Redirect::from_pod(&pod(&[
            ("traffic.sidecar.istio.io/excludeInboundPorts", "15021,8080"),
            ("sidecar.istio.io/interceptionMode", "TPROXY"),
            ("traffic.sidecar.istio.io/kubevirtInterfaces", "net1"),
            ("istio.io/reroute-virtual-interfaces", "net2"),
        ]))
        .unwrap();
        assert_eq!(r.exclude_inbound_ports, "15021,8080,15020,15090");
        assert_eq!(r.mode, "TPROXY");
        assert_eq!(r.reroute_virtual_interfaces, "net2");
        let r = Redirect::from_pod(&pod(&[(
            "traffic.sidecar.istio.io/kubevirtInterfaces",
            "net1",
        )]))
        .unwrap();
        assert_eq!(r.reroute_virtual_interfaces, "net1");
    }

    #[test]
    fn an_invalid_annotation_is_refused_naming_it() {
        for (key, value) in [
            ("sidecar.istio.io/interceptionMode", "NONE"),
            (
                "traffic.sidecar.istio.io/includeOutboundIPRanges",
                "10.0.0.0",
            ),
            ("traffic.sidecar.istio.io/excludeOutboundIPRanges", "*"),
            ("traffic.sidecar.istio.io/excludeInboundPorts", "0x10"),
            ("traffic.sidecar.istio.io/includeOutboundPorts", "70000"),
            ("traffic.sidecar.istio.io/excludeInterfaces", "1eth"),
            (
                "istio.io/reroute-virtual-interfaces",
                "averyveryverylongname",
            ),
        ] {
            let e = Redirect::from_pod(&pod(&[(key, value)])).unwrap_err();
            assert_eq!(e.code, code::INVALID_ANNOTATION);
            assert!(e.msg.contains(key) && e.msg.contains(value), "{e}");
        }
        // Go's ParseUint after TrimSpace: spaces around a port are fine.
        Redirect::from_pod(&pod(&[(
            "traffic.sidecar.istio.io/excludeOutboundPorts",
            " 80, 443",
        )]))
        .unwrap();
    }

    #[test]
    fn the_proxy_s_user_and_environment_are_used() {
        let mut pi = pod(&[]);
        pi.proxy_uid = Some(1500);
        pi.proxy_gid = Some(0);
        pi.proxy_env
            .insert("ISTIO_META_DNS_CAPTURE".into(), "True".into());
        pi.proxy_env.insert("INVALID_DROP".into(), "yes".into());
        let r = Redirect::from_pod(&pi).unwrap();
        assert_eq!((r.uid.as_str(), r.gid.as_str()), ("1500", "1337"));
        assert!(r.dns_redirect && !r.invalid_drop);
        let args = r.args("/var/run/netns/x", true);
        for want in [
            "--redirect-dns",
            "--capture-all-dns",
            "--native-nftables",
            "--proxy-uid=1500",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
        }
    }
}
