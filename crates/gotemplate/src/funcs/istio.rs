//! Istio's functions of the subset (Istio's `template.go` `InjectionFuncmap`), which replace sprig's of
//! the same name.

use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::Value as Json;

use super::super::print;
use super::super::schema;
use super::super::state::{eval_err, new_str, Exec, E, P, R};
use super::super::value::Val;
use super::func::Func;
use super::shared::{self, charge_lookup, i, s};
use crate::fields::Fields;

use P::{Any, Int, MapStr, Meta, Str};

/// Istio's functions of the subset, in alphabetical order.
pub(super) const FUNCS: &[Func] = &[
    Func::new("annotation", &[Meta, Str, Any], None, annotation),
    Func::new(
        "appendMultusNetwork",
        &[Str, Str],
        None,
        append_multus_network,
    ),
    Func::new("contains", &[Str, Str], None, contains),
    Func::new("directory", &[Str], None, directory),
    Func::new("env", &[Str, Str], None, env),
    Func::new(
        "excludeInboundPort",
        &[Any, Str],
        None,
        exclude_inbound_port,
    ),
    Func::new("fromJSON", &[Str], None, from_json),
    Func::new("indent", &[Int, Str], None, indent),
    Func::new("isset", &[MapStr, Str], None, isset),
    Func::new("omit", &[MapStr], Some(Str), omit),
    Func::new("omitNil", &[Any], None, omit_nil),
    Func::new(
        "otelResourceAttributes",
        &[Any, MapStr, MapStr, Str, Any],
        None,
        otel_resource_attributes,
    ),
    Func::new("protoToJSON", &[Any], None, proto_to_json),
    Func::new("strdict", &[], Some(Str), strdict),
    Func::new("structToJSON", &[Any], None, struct_to_json),
    Func::new("toJSON", &[MapStr], None, to_json),
    Func::new("toLower", &[Str], None, shared::lower),
    Func::new("toYaml", &[Any], None, to_yaml),
    Func::new("valueOrDefault", &[Any, Any], None, value_or_default),
];

/// Istio's `protoToJSON`: the ProxyConfig as proto JSON with the fields equal to Istio's defaults cleared
/// (its `cleanProxyConfig`), `{}` where Istio's marshaller fails. The one printer the compiled path uses
/// too, so both paths print the same text.
fn proto_to_json<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let j = match &a[0] {
        Val::Nil | Val::NoValue => return Ok(Val::str("{}")),
        Val::Data(j, ty) if schema::go_name(ty) == "*v1alpha1.ProxyConfig" => *j,
        other => {
            return crate::state::unsupported(format!(
                "protoToJSON of {}: only the ProxyConfig is supported",
                other.type_name()
            ))
        }
    };
    // The printer walks the whole message: charged as the bytes it writes, twice (read, then written).
    let out = sidecar_core::proxy_config_json::proto_to_json(j).unwrap_or_else(|_| "{}".into());
    ex.read(out.len())?;
    ex.check_size(out.len())?;
    ex.touched(out.len());
    new_str(ex, out)
}

/// Istio's `otelResourceAttributes`, the one implementation the compiled path uses too.
fn otel_resource_attributes<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    fn json<'v>(v: &Val<'v>) -> Option<&'v Json> {
        match v {
            Val::Data(j, _) => Some(*j),
            _ => None,
        }
    }
    let mesh = json(&a[0]).unwrap_or(&Json::Null);
    let containers = json(&a[4])
        .and_then(Json::as_array)
        .map_or(&[][..], Vec::as_slice);
    // Reads the providers, the three maps' few keys and the containers' names and images.
    let size: usize = containers.len().saturating_add(1).saturating_mul(64);
    ex.read(size)?;
    match sidecar_core::otel::resource_attributes(
        mesh,
        json(&a[1]).and_then(Json::as_object),
        json(&a[2]).and_then(Json::as_object),
        s(&a[3]),
        containers,
    ) {
        Some(out) => new_str(ex, out),
        None => Ok(Val::str("")),
    }
}

/// Istio's `omitNil`: nils removed from maps and lists, recursively, and a map or list that loses every
/// entry that way becomes nil; a value without nils is returned as it is (its `omitNilInternal`).
fn omit_nil<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let j = match &a[0] {
        Val::Data(j, _) => *j,
        Val::Nil | Val::NoValue => return Ok(Val::Nil),
        other => return Ok(other.clone()),
    };
    let (out, changed) = omit_nil_json(ex, j, 0)?;
    if !changed {
        return Ok(a[0].clone());
    }
    match out {
        None => Ok(Val::Nil),
        Some(j) => decoded(ex, j, 0),
    }
}

/// The JSON half of [`omit_nil`]: the value without nils (None for nil) and whether anything changed.
fn omit_nil_json(ex: &mut Exec<'_, '_>, j: &Json, depth: usize) -> R<(Option<Json>, bool)> {
    ex.descend(depth)?;
    ex.step(1)?;
    Ok(match j {
        Json::Null => (None, true),
        Json::Object(m) => {
            let mut out = serde_json::Map::new();
            let mut changed = false;
            for (k, v) in m {
                let (v, c) = omit_nil_json(ex, v, depth + 1)?;
                changed |= c;
                if let Some(v) = v {
                    out.insert(k.clone(), v);
                }
            }
            match (changed, out.is_empty()) {
                (false, _) => (Some(j.clone()), false),
                (true, true) => (None, true),
                (true, false) => (Some(Json::Object(out)), true),
            }
        }
        Json::Array(l) => {
            let mut out = Vec::new();
            let mut changed = false;
            for v in l {
                let (v, c) = omit_nil_json(ex, v, depth + 1)?;
                changed |= c;
                out.extend(v);
            }
            match (changed, out.is_empty()) {
                (false, _) => (Some(j.clone()), false),
                (true, true) => (None, true),
                (true, false) => (Some(Json::Array(out)), true),
            }
        }
        other => (Some(other.clone()), false),
    })
}

/// Istio's `excludeInboundPort`: the port (printed as `fmt.Sprint` does) appended to the comma-separated
/// list unless it is empty, `0` or already there.
fn exclude_inbound_port<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let port = print::sprint(ex, &a[0..1], false)?;
    let port = port.trim();
    let list = s(&a[1]);
    ex.read(list.len().saturating_add(port.len()))?;
    if port.is_empty() || port == "0" {
        return Ok(a[1].clone());
    }
    let mut out: Vec<&str> = Vec::new();
    for p in list.split(',') {
        // Istio compares before trimming, so " 15020" does not count as excluded.
        if p == port {
            return Ok(a[1].clone());
        }
        let p = p.trim();
        if !p.is_empty() {
            out.push(p);
        }
    }
    out.push(port);
    new_str(ex, out.join(","))
}

/// Istio's `appendMultusNetwork`: the CNI network added to the pod's `k8s.v1.cni.cncf.io/networks`, in
/// its JSON form or its comma-separated form, unless it is already there.
fn append_multus_network<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let (existing, network) = (s(&a[0]), s(&a[1]));
    ex.read(
        existing
            .len()
            .saturating_mul(2)
            .saturating_add(network.len()),
    )?;
    if existing.is_empty() {
        return Ok(a[1].clone());
    }
    if let Some(i) = existing.rfind(']') {
        let Ok(nets) = serde_json::from_str::<Vec<serde_json::Map<String, Json>>>(existing) else {
            // Not JSON: Istio logs and leaves the value as it is.
            return Ok(a[0].clone());
        };
        // kstrings.SplitQualifiedName: "ns/name", or just a name.
        let (ns, name) = match network.split_once('/') {
            Some((ns, name)) => (ns, name),
            None => ("", network),
        };
        for net in &nets {
            if net.field("name") == Some(&Json::String(name.to_string())) {
                let net_ns = match net.field("namespace") {
                    None | Some(Json::Null) => Some(""),
                    Some(Json::String(s)) => Some(s.as_str()),
                    Some(_) => None,
                };
                if net_ns == Some(ns) {
                    return Ok(a[0].clone());
                }
            }
        }
        let added = if ns.is_empty() {
            format!(r#", {{"name": "{name}"}}"#)
        } else {
            format!(r#", {{"name": "{name}", "namespace": "{ns}"}}"#)
        };
        ex.check_size(existing.len() + added.len())?;
        return new_str(ex, format!("{}{added}{}", &existing[..i], &existing[i..]));
    }
    if existing.split(',').any(|n| n.trim() == network) {
        return Ok(a[0].clone());
    }
    ex.check_size(existing.len() + network.len() + 2)?;
    new_str(ex, format!("{existing}, {network}"))
}

/// Istio's `directory`: Go's `path.Split`, the part up to and including the last slash.
fn directory<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let p = s(&a[0]);
    ex.read(p.len())?;
    match p.rfind('/') {
        Some(i) => new_str(ex, p[..=i].to_string()),
        None => Ok(Val::str("")),
    }
}

fn to_yaml<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    match shared::marshal(ex, &a[0], true)? {
        Some(out) => new_str(ex, out),
        None => Ok(Val::str("")),
    }
}

fn struct_to_json<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    if matches!(a[0], Val::Nil) {
        return new_str(ex, "{}".to_string());
    }
    match shared::marshal(ex, &a[0], false)? {
        Some(out) => new_str(ex, out),
        None => Ok(Val::str("{}")),
    }
}

fn to_json<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let m = str_map(ex, &a[0])?;
    let j = Json::Object(
        m.into_iter()
            .map(|(k, v)| (k.to_string(), Json::String(v.to_string())))
            .collect(),
    );
    let mut out = String::new();
    print::write_json(&j, &mut out);
    ex.check_size(out.len())?;
    ex.touched(out.len());
    new_str(ex, out)
}

/// The string `{}` on invalid JSON, as Istio's `fromJSON` returns it.
fn from_json<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let text = s(&a[0]);
    ex.check_size(text.len())?;
    ex.touched(text.len());
    match serde_json::from_str::<Json>(text) {
        Ok(j) => decoded(ex, j, 0),
        Err(_) => Ok(Val::str("{}")),
    }
}

fn indent<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    shared::indent(ex, i(&a[0]), s(&a[1]), false)
}

fn isset<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let key = s(&a[1]);
    charge_lookup(ex, &a[0], key.len())?;
    Ok(Val::Bool(
        a[0].map_get(key).is_some_and(|r| matches!(r, Ok(Some(_)))),
    ))
}

fn annotation<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let name = s(&a[1]);
    ex.read(name.len())?;
    let Val::Data(j, _) = &a[0] else {
        return eval_err("annotation needs an ObjectMeta");
    };
    match j.field("annotations").and_then(|m| m.field(name)) {
        Some(Json::String(v)) => Ok(Val::borrowed(v)),
        _ => {
            let out = print::sprint(ex, &a[2..3], false)?;
            new_str(ex, out)
        }
    }
}

fn value_or_default<'a>(_: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    Ok(match &a[0] {
        Val::Nil | Val::NoValue => a[1].clone(),
        Val::Str(v) if v.is_empty() => a[1].clone(),
        v => v.clone(),
    })
}

/// Istio's `flippedContains`: the needle first. Two-way string search: linear in the text and the
/// needle.
fn contains<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    ex.read(s(&a[1]).len().saturating_add(s(&a[0]).len()))?;
    Ok(Val::Bool(s(&a[1]).contains(s(&a[0]))))
}

fn omit<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let mut m = str_map(ex, &a[0])?;
    for k in &a[1..] {
        ex.read(
            s(k).len()
                .saturating_mul(m.len().max(1).ilog2() as usize + 1),
        )?;
        m.remove(s(k));
    }
    ex.step(m.len())?;
    Ok(Val::StrDict(Rc::new(m)))
}

fn strdict<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let mut m = BTreeMap::new();
    for pair in a.chunks(2) {
        let v = key_of(ex, pair.get(1).map_or("", |v| s(v)))?;
        let k = key_of(ex, s(&pair[0]))?;
        m.insert(k, v);
    }
    ex.step(m.len())?;
    Ok(Val::StrDict(Rc::new(m)))
}

/// Istio reads istiod's environment; the injector is istiod's stand-in here.
fn env<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    ex.read(s(&a[0]).len())?;
    let v = std::env::var(s(&a[0])).unwrap_or_default();
    Ok(if v.is_empty() {
        a[1].clone()
    } else {
        new_str(ex, v)?
    })
}

/// A copy of a map's string entries, charged per entry and per byte copied.
fn str_map<'a>(ex: &mut Exec<'a, '_>, v: &Val<'a>) -> R<BTreeMap<Rc<str>, Rc<str>>> {
    let mut m = BTreeMap::new();
    if let Some(entries) = v.map_entries() {
        let entries = entries.map_err(E::Unsupported)?;
        ex.charge_sorted(entries.iter().map(|(k, _)| k.len()))?;
        for (k, e) in entries {
            if let Val::Str(s) = e {
                ex.check_size(k.len() + s.len())?;
                ex.touched(k.len() + s.len());
                m.insert(Rc::from(&*k), Rc::from(&*s));
            }
        }
    }
    Ok(m)
}

/// A key for a map the template builds, charged as the bytes it copies.
fn key_of(ex: &mut Exec<'_, '_>, s: &str) -> R<Rc<str>> {
    ex.check_size(s.len())?;
    ex.touched(s.len());
    Ok(Rc::from(s))
}

/// Converts decoded JSON to template values (`fromJSON`).
fn decoded<'a>(ex: &mut Exec<'a, '_>, j: Json, depth: usize) -> R<Val<'a>> {
    ex.descend(depth)?;
    // A node parsed, then rebuilt as a template value (allocations, a sorted-map insert): measured at
    // about four steps' time.
    ex.step(3)?;
    Ok(match j {
        Json::Null => Val::Nil,
        Json::Bool(b) => Val::Bool(b),
        Json::Number(n) => Val::Float(n.as_f64().unwrap_or(0.0)),
        Json::String(s) => Val::string(s),
        Json::Array(a) => Val::List(Rc::new(
            a.into_iter()
                .map(|e| decoded(ex, e, depth + 1))
                .collect::<R<_>>()?,
        )),
        Json::Object(o) => {
            let mut m = BTreeMap::new();
            for (k, e) in o {
                let v = decoded(ex, e, depth + 1)?;
                m.insert(Rc::from(k), v);
            }
            Val::Dict(Rc::new(m))
        }
    })
}
