//! The `istio-init` / `istio-validation` arguments (the init container of Istio's
//! `injection-template.yaml`), built from the pod's annotations, the values and the mesh exactly as Istio's
//! template builds them, so that they are valid `iptables-init istio-iptables` arguments; each flag is
//! named by its definition in `sidecar_core::flags`.
//!
//! Annotation values are validated by the engine before rendering (Istio's `validateAnnotations`); values
//! come from the operator's configuration. As a second line of defence every value placed into an argument
//! is checked here against the characters its kind can contain (and must not look like a flag), so nothing
//! unchecked reaches the init container's command line whatever its source.
//! `traffic.sidecar.istio.io/includeOutboundPorts`, which Istio does not validate, is held to the port-list
//! shape here.

use std::borrow::Cow;

use super::error::RenderError;
use super::inputs::{sprint, Inputs, Source};
use crate::traffic::{From, Shape, Traffic, TRAFFIC};
use sidecar_core::annotations::Annotation;
use sidecar_core::fields::Fields;
use sidecar_core::flags::{self, Argv};

fn check(value: &str, shape: Shape, source: Source) -> Result<(), RenderError> {
    let flag_like = value
        .split(',')
        .any(|entry| entry.trim_start().starts_with('-'));
    if flag_like || !value.chars().all(|c| shape.allows(c)) {
        return Err(RenderError::InvalidArgument {
            origin: source.to_string(),
            value: value.to_string(),
        });
    }
    Ok(())
}

/// `excludeInboundPort PORT LIST`: append the status port to the exclusion list unless it is `""`/`"0"` or
/// already an exact entry; other entries are trimmed and empty ones dropped when appending.
pub(crate) fn exclude_inbound_port<'a>(port: &str, list: &'a str) -> Cow<'a, str> {
    let p = port.trim();
    if p.is_empty() || p == "0" || list.split(',').any(|e| e == p) {
        return Cow::Borrowed(list);
    }
    let mut out = String::with_capacity(list.len() + p.len() + 1);
    for e in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        out.push_str(e);
        out.push(',');
    }
    out.push_str(p);
    Cow::Owned(out)
}

/// A traffic setting: the annotation's value when present (even empty), else the values entry as Go's
/// `fmt.Sprint` prints it.
pub(crate) fn setting<'a>(
    inp: &Inputs<'a>,
    annotation: &'static str,
    values_path: &'static str,
) -> (Cow<'a, str>, Source) {
    match inp.ann(annotation) {
        Some(v) => (Cow::Borrowed(v), Source::Annotation(annotation)),
        None => (
            sprint(inp.values_at(values_path)),
            Source::Values(values_path),
        ),
    }
}

/// The effective exclusion list for inbound ports with the status port appended (the template's
/// `excludeInboundPorts` with the status port); `values` is the row's values entry.
pub(crate) fn exclude_inbound<'a>(
    inp: &Inputs<'a>,
    annotation: &'static str,
    values: &'static str,
) -> (Cow<'a, str>, Source) {
    let (list, src) = setting(inp, annotation, values);
    let port = inp.status_port();
    match list {
        Cow::Borrowed(l) => (exclude_inbound_port(port, l), src),
        Cow::Owned(l) => (Cow::Owned(exclude_inbound_port(port, &l).into_owned()), src),
    }
}

/// An optional setting (`-q`, `-o`): present when the annotation is present or the values entry is
/// non-empty.
pub(crate) fn optional_setting<'a>(
    inp: &Inputs<'a>,
    annotation: &'static str,
    values_path: &'static str,
) -> Option<(Cow<'a, str>, Source)> {
    if let Some(v) = inp.ann(annotation) {
        return Some((Cow::Borrowed(v), Source::Annotation(annotation)));
    }
    match inp.values_at(values_path) {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => {
            let s = sprint(Some(v));
            (!s.is_empty()).then_some((s, Source::Values(values_path)))
        }
    }
}

/// A present annotation's value.
fn present<'a>(inp: &Inputs<'a>, annotation: &'static Annotation) -> Option<(&'a str, Source)> {
    inp.ann(annotation.name)
        .map(|v| (v, Source::Annotation(annotation.name)))
}

/// The argument value of one traffic row, if the template writes one.
fn traffic_arg<'a>(inp: &Inputs<'a>, t: &Traffic) -> Option<(Cow<'a, str>, Source)> {
    let name = t.annotation.name;
    match t.from {
        From::Mode => Some((
            Cow::Borrowed(inp.interception_mode),
            Source::Annotation(name),
        )),
        From::Setting { values, .. } => Some(setting(inp, name, values)),
        From::ExcludeInbound { values } => Some(exclude_inbound(inp, name, values)),
        From::Optional { values } => optional_setting(inp, name, values),
        From::Annotation => present(inp, t.annotation).map(|(v, s)| (Cow::Borrowed(v), s)),
        // `istio.io/reroute-virtual-interfaces` wins over the deprecated `kubevirtInterfaces`.
        From::Preferred { fallback } => present(inp, t.annotation)
            .or_else(|| present(inp, fallback))
            .map(|(v, s)| (Cow::Borrowed(v), s)),
        From::FallbackOnly => None,
    }
}

/// The traffic rows' arguments, in the template's order.
fn traffic_args(inp: &Inputs<'_>, args: &mut Argv) -> Result<(), RenderError> {
    for t in TRAFFIC {
        let (Some(flag), Some((v, src))) = (t.annotation.flag, traffic_arg(inp, t)) else {
            continue;
        };
        match t.from {
            // The interception mode was validated (REDIRECT/TPROXY/NONE) when the context was built.
            From::Mode => {}
            _ => check(&v, t.shape, src)?,
        }
        match t.from {
            From::ExcludeInbound { .. } if v.is_empty() => args.short(flag, "15090,15021"),
            From::ExcludeInbound { .. } => args.short(flag, &format!("15090,15021,{v}")),
            _ => args.short(flag, &v),
        };
    }
    Ok(())
}

/// A mesh listener port, or its default when unset/0.
fn mesh_port(inp: &Inputs<'_>, key: &'static str, default: u16) -> Result<String, RenderError> {
    match inp.mesh.field(key) {
        None | Some(serde_json::Value::Null) => Ok(default.to_string()),
        Some(v) => match sidecar_core::goconv::as_i64(v) {
            Some(0) => Ok(default.to_string()),
            Some(n) if (1..=65535).contains(&n) => Ok(n.to_string()),
            _ => Err(RenderError::InvalidArgument {
                origin: Source::Mesh(key).to_string(),
                value: v.to_string(),
            }),
        },
    }
}

/// The full argument list of the init container.
pub(crate) fn init_args(inp: &Inputs<'_>) -> Result<Vec<String>, RenderError> {
    let mut args = Argv::new();
    args.word("istio-iptables");
    args.short(
        &flags::ENVOY_PORT,
        &mesh_port(inp, "proxyListenPort", 15001)?,
    );
    args.short(
        &flags::INBOUND_CAPTURE_PORT,
        &mesh_port(inp, "proxyInboundListenPort", 15006)?,
    );
    let uid = if inp.tproxy || inp.proxy_uid == 0 {
        1337
    } else {
        inp.proxy_uid
    };
    args.short(&flags::PROXY_UID, &uid.to_string());
    traffic_args(inp, &mut args)?;

    let (level, src) = inp.agent_log_level();
    check(&level, Shape::LogLevel, src)?;
    args.long(&flags::LOG_OUTPUT_LEVEL, &level);
    if inp.values_true("global.logAsJson") {
        args.switch(&flags::LOG_AS_JSON);
    }
    if inp.cni {
        args.switch(&flags::RUN_VALIDATION);
        args.switch(&flags::SKIP_RULE_APPLY);
    } else if inp.values_true("global.proxy_init.forceApplyIptables") {
        args.switch(&flags::FORCE_APPLY);
    }
    if inp.values_true("global.nativeNftables") {
        args.switch(&flags::NATIVE_NFTABLES);
    }
    Ok(args.into_vec())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn exclude_inbound_port_rules() {
        assert_eq!(exclude_inbound_port("15020", ""), "15020");
        assert_eq!(exclude_inbound_port("15020", "4, 5,6"), "4,5,6,15020");
        assert_eq!(exclude_inbound_port("15020", "4,15020"), "4,15020");
        // Only an exact entry counts: " 15020" is not "15020".
        assert_eq!(exclude_inbound_port("15020", "4, 15020"), "4,15020,15020");
        assert_eq!(exclude_inbound_port("0", "4,5"), "4,5");
        assert_eq!(exclude_inbound_port("", "4,5"), "4,5");
        assert_eq!(exclude_inbound_port(" 123 ", "4,,5,"), "4,5,123");
    }

    #[test]
    fn shapes_reject_flags_and_odd_characters() {
        let src = Source::Annotation("x");
        assert!(check("10.0.0.0/8,fd00::/8", Shape::Cidrs, src).is_ok());
        assert!(check("*", Shape::Cidrs, src).is_ok());
        assert!(check("", Shape::Ports, src).is_ok());
        assert!(check("1, 2,3", Shape::Ports, src).is_ok());
        assert!(check("-j ACCEPT", Shape::Ports, src).is_err());
        assert!(check("80;rm", Shape::Ports, src).is_err());
        assert!(check("eth0,-x", Shape::Interfaces, src).is_err());
        assert!(check("net1,net2", Shape::Interfaces, src).is_ok());
        assert!(check("net1, net2", Shape::Interfaces, src).is_ok());
        assert!(check("net1, -net2", Shape::Interfaces, src).is_err());
        assert!(check("10.0.0.0/8\t", Shape::Cidrs, src).is_err());
        assert!(check("default:info,ads:debug", Shape::LogLevel, src).is_ok());
        assert!(check("info --x", Shape::LogLevel, src).is_err());
        let err = check("1\n2", Shape::Ports, Source::Values("global.proxy.x")).unwrap_err();
        assert!(err.to_string().contains("global.proxy.x"), "{err}");
    }
}
