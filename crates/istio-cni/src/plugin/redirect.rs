//! The pod's traffic annotations turned into istio-iptables settings, as Istio's
//! `cni/pkg/plugin/sidecar_redirect.go` `NewRedirect` does, and those settings filled by flag into
//! iptables-init's typed [`iptables_init::Args`], which iptables-init resolves and checks (Istio's
//! `sidecar_iptables_linux.go` `Program` fills the same fields of istio-iptables' `config.Config`).

use iptables_init::{Args, FlagValueError};
use sidecar_core::annotations;
use sidecar_core::flags::{self, Flag};

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

/// One of Istio's traffic annotations as the plugin reads it (`sidecar_redirect.go` `annotationRegistry`):
/// the shared row's name and istio-iptables flag, and the plugin's own default and Istio's check of it,
/// which differ from the injector's.
struct Annotation {
    key: &'static str,
    flag: &'static Flag,
    default: &'static str,
    check: Check,
}

/// The plugin's reading of a shared row. Evaluated at compile time: a row without a flag does not build.
const fn reads(
    row: &'static annotations::Annotation,
    default: &'static str,
    check: Check,
) -> Annotation {
    let flag = match row.flag {
        Some(f) => f,
        None => panic!("the plugin reads only annotations that become an istio-iptables flag"),
    };
    Annotation {
        key: row.name,
        flag,
        default,
        check,
    }
}

const MODE: Annotation = reads(&annotations::INTERCEPTION_MODE, "REDIRECT", Check::Mode);
const INCLUDE_IPS: Annotation = reads(
    &annotations::INCLUDE_OUTBOUND_IP_RANGES,
    "*",
    Check::CidrsOrStar,
);
const EXCLUDE_IPS: Annotation = reads(&annotations::EXCLUDE_OUTBOUND_IP_RANGES, "", Check::Cidrs);
const EXCLUDE_INBOUND: Annotation = reads(
    &annotations::EXCLUDE_INBOUND_PORTS,
    "15020",
    Check::PortsOrStar,
);
const INCLUDE_INBOUND: Annotation =
    reads(&annotations::INCLUDE_INBOUND_PORTS, "*", Check::PortsOrStar);
// Istio's default here is the status port too (`defaultRedirectExcludePort`), unlike the injected
// istio-init, which excludes no outbound port by default.
const EXCLUDE_OUTBOUND: Annotation = reads(
    &annotations::EXCLUDE_OUTBOUND_PORTS,
    "15020",
    Check::PortsOrStar,
);
const INCLUDE_OUTBOUND: Annotation =
    reads(&annotations::INCLUDE_OUTBOUND_PORTS, "", Check::PortsOrStar);
const EXCLUDE_INTERFACES: Annotation =
    reads(&annotations::EXCLUDE_INTERFACES, "", Check::Interfaces);
const REROUTE: Annotation = reads(
    &annotations::REROUTE_VIRTUAL_INTERFACES,
    "",
    Check::Interfaces,
);
const KUBEVIRT: Annotation = reads(&annotations::KUBEVIRT_INTERFACES, "", Check::Interfaces);

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

/// An annotation's value, or its default when absent (Istio's `getAnnotationOrDefault`, with Istio's
/// check); `found` says which.
fn annotation(pi: &PodInfo, a: &Annotation) -> Result<(bool, String), CniError> {
    match pi.annotations.get(a.key) {
        Some(value) => check(a.check, value)
            .map(|()| (true, value.clone()))
            .map_err(|e| invalid(a, value, e)),
        None => Ok((false, a.default.to_string())),
    }
}

fn invalid(a: &Annotation, value: &str, why: impl std::fmt::Display) -> CniError {
    CniError::new(
        code::INVALID_ANNOTATION,
        format!("annotation {}={value:?} is invalid: {why}", a.key),
    )
}

/// Refuses an annotation's `value` when iptables-init refuses `arg`, the value of the flag it becomes:
/// the check is iptables-init's own (`iptables_init::check_in_process`, the resolution its apply
/// runs), so no value passes here that the apply would then refuse.
fn iptables_init_takes(a: &Annotation, value: &str, arg: &str) -> Result<(), CniError> {
    let mut args = Args::default();
    args.set_text(a.flag, arg)
        .map_err(|e| invalid(a, value, format_args!("iptables-init refuses it: {e}")))?;
    iptables_init::check_in_process(&args, &|_| None)
        .map_err(|e| invalid(a, value, format_args!("iptables-init refuses it: {e}")))
}

/// An annotation read (Istio's check) and checked by iptables-init as it goes into its flag.
fn read(pi: &PodInfo, a: &Annotation) -> Result<(bool, String), CniError> {
    let (found, value) = annotation(pi, a)?;
    if found {
        iptables_init_takes(a, &value, &value)?;
    }
    Ok((found, value))
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
        let (found, raw) = annotation(pi, &EXCLUDE_INBOUND)?;
        // Istio's "sync with non-cni injection template": its own ports are always excluded inbound,
        // appended after the pod's and deduplicated keeping the first.
        let mut exclude_inbound = raw.trim().to_string();
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
        if found {
            iptables_init_takes(&EXCLUDE_INBOUND, &raw, &exclude_inbound)?;
        }
        let (found, mut reroute) = read(pi, &REROUTE)?;
        if !found {
            reroute = read(pi, &KUBEVIRT)?.1;
        }
        Ok(Redirect {
            target_port: "15001".to_string(),
            mode: read(pi, &MODE)?.1,
            uid: id(pi.proxy_uid),
            gid: id(pi.proxy_gid),
            include_ip_cidrs: read(pi, &INCLUDE_IPS)?.1,
            exclude_ip_cidrs: read(pi, &EXCLUDE_IPS)?.1,
            exclude_inbound_ports: exclude_inbound,
            include_inbound_ports: read(pi, &INCLUDE_INBOUND)?.1,
            exclude_outbound_ports: read(pi, &EXCLUDE_OUTBOUND)?.1,
            include_outbound_ports: read(pi, &INCLUDE_OUTBOUND)?.1,
            exclude_interfaces: read(pi, &EXCLUDE_INTERFACES)?.1,
            reroute_virtual_interfaces: reroute,
            dns_redirect: env_bool(pi, "ISTIO_META_DNS_CAPTURE"),
            dual_stack: env_bool(pi, "ISTIO_DUAL_STACK"),
            invalid_drop: env_bool(pi, "INVALID_DROP"),
        })
    }

    /// iptables-init's settings for the namespace `netns` (Istio's `Program`:
    /// `HostFilesystemPodNetwork` is `--cni-mode`, `NetworkNamespace` is `--network-namespace`).
    /// Every value set here is a string flag's, which iptables-init's resolution checks; the error is
    /// for a row naming a flag of another kind.
    pub fn args(&self, netns: &str, native_nftables: bool) -> Result<Args, FlagValueError> {
        let mut args = Args::default();
        args.set_text(&flags::ENVOY_PORT, &self.target_port)?
            .set_text(&flags::PROXY_UID, &self.uid)?
            .set_text(&flags::PROXY_GID, &self.gid)?;
        for (a, value) in [
            (&MODE, &self.mode),
            (&INCLUDE_IPS, &self.include_ip_cidrs),
            (&EXCLUDE_IPS, &self.exclude_ip_cidrs),
            (&INCLUDE_INBOUND, &self.include_inbound_ports),
            (&EXCLUDE_INBOUND, &self.exclude_inbound_ports),
            (&INCLUDE_OUTBOUND, &self.include_outbound_ports),
            (&EXCLUDE_OUTBOUND, &self.exclude_outbound_ports),
            (&EXCLUDE_INTERFACES, &self.exclude_interfaces),
            (&REROUTE, &self.reroute_virtual_interfaces),
        ] {
            args.set_text(a.flag, value)?;
        }
        args.switch(&flags::CNI_MODE)
            .set_text(&flags::NETWORK_NAMESPACE, netns)?;
        if self.dns_redirect {
            args.switch(&flags::REDIRECT_DNS)
                .switch(&flags::CAPTURE_ALL_DNS);
        }
        if self.invalid_drop {
            args.switch(&flags::DROP_INVALID);
        }
        if self.dual_stack {
            args.switch(&flags::DUAL_STACK);
        }
        if native_nftables {
            args.switch(&flags::NATIVE_NFTABLES);
        }
        Ok(args)
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
        // Istio's check (Go's ParseUint after TrimSpace) takes spaces around a port; iptables-init does
        // not, so the plugin refuses them up front rather than in the apply.
        let e = Redirect::from_pod(&pod(&[(
            "traffic.sidecar.istio.io/excludeOutboundPorts",
            " 80, 443",
        )]))
        .unwrap_err();
        assert_eq!(e.code, code::INVALID_ANNOTATION);
        assert!(
            e.msg
                .contains("iptables-init refuses it: invalid value \" 80\""),
            "{e}"
        );
    }

    /// Before the fix, `" 80 , 81 "` passed the plugin's check (Istio's, which trims) and was
    /// then refused by iptables-init's apply. For each value, what iptables-init refuses (its `explain`
    /// front end: the same resolution, read independently of the plugin's check) the plugin refuses
    /// up front, naming the annotation; what the plugin takes, iptables-init takes as the plugin passes
    /// it. `istio` marks the values Istio's own check refuses and iptables-init would take: refused as
    /// Istio's plugin refuses them.
    #[test]
    fn annotations_pass_exactly_when_iptables_init_takes_them() {
        let annotations = [
            &MODE,
            &INCLUDE_IPS,
            &EXCLUDE_IPS,
            &EXCLUDE_INBOUND,
            &INCLUDE_INBOUND,
            &EXCLUDE_OUTBOUND,
            &INCLUDE_OUTBOUND,
            &EXCLUDE_INTERFACES,
            &REROUTE,
            &KUBEVIRT,
        ];
        // (annotation, value, the plugin takes it, Istio's check alone refuses it)
        let table: &[(&Annotation, &str, bool, bool)] = &[
            (&EXCLUDE_OUTBOUND, " 80 , 81 ", false, false),
            (&EXCLUDE_INBOUND, " 80 , 81 ", false, false),
            (&INCLUDE_INBOUND, " 80 , 81 ", false, false),
            (&INCLUDE_OUTBOUND, " 80 , 81 ", false, false),
            (&EXCLUDE_INBOUND, " 80,81 ", true, false),
            (&EXCLUDE_OUTBOUND, "80,81", true, false),
            (&EXCLUDE_OUTBOUND, "*", false, false),
            (&INCLUDE_OUTBOUND, "*", false, false),
            (&EXCLUDE_OUTBOUND, "", true, false),
            (&EXCLUDE_OUTBOUND, "080", false, false),
            (&EXCLUDE_OUTBOUND, "0", false, false),
            (&EXCLUDE_OUTBOUND, "65535", true, false),
            (&EXCLUDE_OUTBOUND, "65536", false, false),
            (&EXCLUDE_OUTBOUND, "80,http", false, false),
            (&EXCLUDE_OUTBOUND, "80,,81", false, true),
            (&INCLUDE_INBOUND, "*", true, false),
            (&INCLUDE_INBOUND, "8080", true, false),
            (&MODE, "TPROXY", true, false),
            (&MODE, "NONE", false, false),
            (&MODE, "redirect", false, false),
            (&MODE, "", false, true),
            (&INCLUDE_IPS, "*", true, false),
            (&INCLUDE_IPS, "10.0.0.0/8,fd00::/8", true, false),
            (&INCLUDE_IPS, "10.0.0.0/8, 10.1.0.0/16", false, false),
            (&INCLUDE_IPS, "10.0.0.0", false, false),
            (&INCLUDE_IPS, "10.0.0.0/33", false, false),
            (&INCLUDE_IPS, "10.0.0.0/8,", false, true),
            (&EXCLUDE_IPS, "*", false, false),
            (&EXCLUDE_IPS, "192.168.0.0/16", true, false),
            (&EXCLUDE_INTERFACES, "eth1,net1", true, false),
            (&EXCLUDE_INTERFACES, "eth1, net1", false, false),
            (&EXCLUDE_INTERFACES, "1eth", false, true),
            (&EXCLUDE_INTERFACES, "eth+", false, true),
            (&EXCLUDE_INTERFACES, "averyveryverylongname", false, false),
            (&REROUTE, "net2", true, false),
            (&REROUTE, " net2", false, false),
            (&KUBEVIRT, "net1,", false, true),
        ];
        for &(a, value, takes, istio_only) in table {
            let pi = pod(&[(a.key, value)]);
            let plugin = Redirect::from_pod(&pi);
            let arg = match a.key {
                k if k == EXCLUDE_INBOUND.key => plugin
                    .as_ref()
                    .map(|r| r.exclude_inbound_ports.clone())
                    .unwrap_or_else(|_| value.trim().to_string()),
                _ => value.to_string(),
            };
            let by_iptables_init =
                iptables_init::explain(&[format!("--{}={arg}", a.flag.long)], &[]).is_ok();
            assert_eq!(plugin.is_ok(), takes, "{}={value:?}: {plugin:?}", a.key);
            if !by_iptables_init {
                let e = plugin.as_ref().unwrap_err();
                assert_eq!(e.code, code::INVALID_ANNOTATION, "{e}");
                assert!(
                    e.msg.contains(a.key) && e.msg.contains(&format!("{value:?}")),
                    "{e}"
                );
            }
            assert_eq!(
                takes,
                by_iptables_init && !istio_only,
                "{}={value:?}: iptables-init {}",
                a.key,
                if by_iptables_init {
                    "takes it"
                } else {
                    "refuses it"
                }
            );
            if let Ok(r) = &plugin {
                let args = r.args("/var/run/netns/x", false).unwrap();
                iptables_init::check_in_process(&args, &|_| None)
                    .unwrap_or_else(|e| panic!("{}={value:?}: {args:?}: {e}", a.key));
            }
        }
        // Every annotation is in the table.
        for a in annotations {
            assert!(table.iter().any(|(t, ..)| t.key == a.key), "{}", a.key);
        }
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
        let args = r.args("/var/run/netns/x", true).unwrap();
        for want in [
            &flags::REDIRECT_DNS,
            &flags::CAPTURE_ALL_DNS,
            &flags::NATIVE_NFTABLES,
            &flags::CNI_MODE,
        ] {
            assert_eq!(
                args.boolean(want),
                Some(true),
                "--{} in {args:?}",
                want.long
            );
        }
        assert_eq!(args.boolean(&flags::DROP_INVALID), None);
        assert_eq!(args.string(&flags::PROXY_UID), Some("1500"));
        assert_eq!(
            args.string(&flags::NETWORK_NAMESPACE),
            Some("/var/run/netns/x")
        );
    }
}
