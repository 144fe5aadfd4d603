//! How Go's `encoding/json` prints a typed Kubernetes `Container` (and the action types the prober JSON
//! uses): fields in Go declaration order, `omitempty` semantics, unknown fields dropped, quantities
//! canonical. Istio serialises user containers this way before re-applying them
//! (`reapplyOverwrittenContainers` in `webhook.go`), and the `proxy.istio.io/overrides` annotation and
//! `ISTIO_KUBE_APP_PROBERS` carry exactly this text.

use serde_json::{Map, Value};

/// How one Go struct field is printed.
#[derive(Debug, Clone, Copy)]
pub enum F {
    /// `string` with `omitempty`: dropped when `""`.
    Str,
    /// `string` without `omitempty`: always printed (`""` when absent).
    StrAlways,
    /// `int32`/`int64` with `omitempty`: dropped when 0.
    Int,
    /// Integer without `omitempty`: always printed (0 when absent).
    IntAlways,
    /// `bool` with `omitempty`: dropped when false.
    Bool,
    /// Pointer to a scalar with `omitempty`: printed when present and non-null, as is.
    Ptr,
    /// Pointer without `omitempty`: `null` when absent.
    PtrAlways,
    /// Pointer to a struct with `omitempty`: dropped when absent.
    Obj(&'static [(&'static str, F)]),
    /// Non-pointer struct: always printed (`{}` when empty).
    ObjAlways(&'static [(&'static str, F)]),
    /// Slice of structs with `omitempty`.
    List(&'static [(&'static str, F)]),
    /// Slice of scalars (or of structs this crate passes through) with `omitempty`.
    Scalars,
    /// `map[ResourceName]Quantity` with `omitempty`: sorted keys, canonical quantities.
    Quantities,
    /// A `resource.Quantity` value (a struct, so `omitempty` does not apply: `"0"` when absent).
    Quantity,
    /// `intstr.IntOrString`: always printed (0 when absent).
    IntOrStr,
}

use crate::fields::Fields;
use F::*;

pub const CONTAINER: &[(&str, F)] = &[
    ("name", StrAlways),
    ("image", Str),
    ("command", Scalars),
    ("args", Scalars),
    ("workingDir", Str),
    ("ports", List(PORT)),
    ("envFrom", List(ENV_FROM)),
    ("env", List(ENV)),
    ("resources", ObjAlways(RESOURCES)),
    ("resizePolicy", List(RESIZE)),
    ("restartPolicy", Ptr),
    ("restartPolicyRules", Scalars),
    ("volumeMounts", List(MOUNT)),
    ("volumeDevices", List(DEVICE)),
    ("livenessProbe", Obj(PROBE)),
    ("readinessProbe", Obj(PROBE)),
    ("startupProbe", Obj(PROBE)),
    ("lifecycle", Obj(LIFECYCLE)),
    ("terminationMessagePath", Str),
    ("terminationMessagePolicy", Str),
    ("imagePullPolicy", Str),
    ("securityContext", Obj(SECURITY_CONTEXT)),
    ("stdin", Bool),
    ("stdinOnce", Bool),
    ("tty", Bool),
];
const PORT: &[(&str, F)] = &[
    ("name", Str),
    ("hostPort", Int),
    ("containerPort", IntAlways),
    ("protocol", Str),
    ("hostIP", Str),
];
const ENV_FROM: &[(&str, F)] = &[
    ("prefix", Str),
    ("configMapRef", Obj(NAME_OPTIONAL)),
    ("secretRef", Obj(NAME_OPTIONAL)),
];
const NAME_OPTIONAL: &[(&str, F)] = &[("name", Str), ("optional", Ptr)];
const ENV: &[(&str, F)] = &[
    ("name", StrAlways),
    ("value", Str),
    ("valueFrom", Obj(ENV_SOURCE)),
];
const ENV_SOURCE: &[(&str, F)] = &[
    ("fieldRef", Obj(FIELD_REF)),
    ("resourceFieldRef", Obj(RESOURCE_FIELD_REF)),
    ("configMapKeyRef", Obj(KEY_SELECTOR)),
    ("secretKeyRef", Obj(KEY_SELECTOR)),
    ("fileKeyRef", Ptr),
];
const FIELD_REF: &[(&str, F)] = &[("apiVersion", Str), ("fieldPath", StrAlways)];
const RESOURCE_FIELD_REF: &[(&str, F)] = &[
    ("containerName", Str),
    ("resource", StrAlways),
    ("divisor", Quantity),
];
const KEY_SELECTOR: &[(&str, F)] = &[("name", Str), ("key", StrAlways), ("optional", Ptr)];
const RESOURCES: &[(&str, F)] = &[
    ("limits", Quantities),
    ("requests", Quantities),
    ("claims", List(CLAIM)),
];
const CLAIM: &[(&str, F)] = &[("name", StrAlways), ("request", Str)];
const RESIZE: &[(&str, F)] = &[("resourceName", StrAlways), ("restartPolicy", StrAlways)];
const MOUNT: &[(&str, F)] = &[
    ("name", StrAlways),
    ("readOnly", Bool),
    ("recursiveReadOnly", Ptr),
    ("mountPath", StrAlways),
    ("subPath", Str),
    ("mountPropagation", Ptr),
    ("subPathExpr", Str),
];
const DEVICE: &[(&str, F)] = &[("name", StrAlways), ("devicePath", StrAlways)];
const PROBE: &[(&str, F)] = &[
    ("exec", Obj(EXEC)),
    ("httpGet", Obj(HTTP_GET)),
    ("tcpSocket", Obj(TCP_SOCKET)),
    ("grpc", Obj(GRPC)),
    ("initialDelaySeconds", Int),
    ("timeoutSeconds", Int),
    ("periodSeconds", Int),
    ("successThreshold", Int),
    ("failureThreshold", Int),
    ("terminationGracePeriodSeconds", Ptr),
];
const EXEC: &[(&str, F)] = &[("command", Scalars)];
pub const HTTP_GET: &[(&str, F)] = &[
    ("path", Str),
    ("port", IntOrStr),
    ("host", Str),
    ("scheme", Str),
    ("httpHeaders", List(HEADER)),
];
const HEADER: &[(&str, F)] = &[("name", StrAlways), ("value", StrAlways)];
pub const TCP_SOCKET: &[(&str, F)] = &[("port", IntOrStr), ("host", Str)];
pub const GRPC: &[(&str, F)] = &[("port", IntAlways), ("service", PtrAlways)];
const LIFECYCLE: &[(&str, F)] = &[
    ("postStart", Obj(HANDLER)),
    ("preStop", Obj(HANDLER)),
    ("stopSignal", Ptr),
];
const HANDLER: &[(&str, F)] = &[
    ("exec", Obj(EXEC)),
    ("httpGet", Obj(HTTP_GET)),
    ("tcpSocket", Obj(TCP_SOCKET)),
    ("sleep", Obj(SLEEP)),
];
const SLEEP: &[(&str, F)] = &[("seconds", IntAlways)];
const SECURITY_CONTEXT: &[(&str, F)] = &[
    ("capabilities", Obj(CAPABILITIES)),
    ("privileged", Ptr),
    ("seLinuxOptions", Obj(SELINUX)),
    ("windowsOptions", Obj(WINDOWS)),
    ("runAsUser", Ptr),
    ("runAsGroup", Ptr),
    ("runAsNonRoot", Ptr),
    ("readOnlyRootFilesystem", Ptr),
    ("allowPrivilegeEscalation", Ptr),
    ("procMount", Ptr),
    ("seccompProfile", Obj(PROFILE)),
    ("appArmorProfile", Obj(PROFILE)),
];
const CAPABILITIES: &[(&str, F)] = &[("add", Scalars), ("drop", Scalars)];
const SELINUX: &[(&str, F)] = &[("user", Str), ("role", Str), ("type", Str), ("level", Str)];
const WINDOWS: &[(&str, F)] = &[
    ("gmsaCredentialSpecName", Ptr),
    ("gmsaCredentialSpec", Ptr),
    ("runAsUserName", Ptr),
    ("hostProcess", Ptr),
];
const PROFILE: &[(&str, F)] = &[("type", StrAlways), ("localhostProfile", Ptr)];

fn is_zero_number(v: &Value) -> bool {
    v.as_f64() == Some(0.0)
}

/// Prints `v` (a JSON object, or anything: non-objects count as empty) as Go prints the struct `fields`.
pub fn go_struct(v: &Value, fields: &[(&str, F)]) -> Value {
    let empty = Map::new();
    let obj = v.as_object().unwrap_or(&empty);
    let mut out = Map::with_capacity(fields.len());
    for (name, kind) in fields {
        let field = obj.field(name).filter(|f| !f.is_null());
        let printed = match (*kind, field) {
            (StrAlways, None) => Some(Value::String(String::new())),
            (IntAlways | IntOrStr, None) => Some(Value::from(0)),
            (PtrAlways, None) => Some(Value::Null),
            (ObjAlways(fs), f) => Some(go_struct(f.unwrap_or(&Value::Null), fs)),
            (Quantity, None) => Some(Value::String("0".to_string())),
            (_, None) => None,
            (Str, Some(f)) => (f.as_str() != Some("")).then(|| f.clone()),
            (Int, Some(f)) => (!is_zero_number(f)).then(|| f.clone()),
            (Bool, Some(f)) => (f.as_bool() != Some(false)).then(|| f.clone()),
            (StrAlways | IntAlways | Ptr | PtrAlways | IntOrStr, Some(f)) => Some(f.clone()),
            (Obj(fs), Some(f)) => Some(go_struct(f, fs)),
            (List(fs), Some(f)) => match f.as_array() {
                Some(items) if items.is_empty() => None,
                Some(items) => Some(Value::Array(
                    items.iter().map(|i| go_struct(i, fs)).collect(),
                )),
                None => Some(f.clone()),
            },
            (Scalars, Some(f)) => match f.as_array() {
                Some(items) if items.is_empty() => None,
                _ => Some(f.clone()),
            },
            (Quantities, Some(f)) => match f.as_object() {
                Some(m) if m.is_empty() => None,
                Some(m) => {
                    let mut keys: Vec<&String> = m.keys().collect();
                    keys.sort();
                    Some(Value::Object(
                        keys.into_iter()
                            .map(|k| (k.clone(), canonical_quantity_value(&m[k])))
                            .collect(),
                    ))
                }
                None => Some(f.clone()),
            },
            (Quantity, Some(f)) => Some(canonical_quantity_value(f)),
        };
        if let Some(p) = printed {
            out.insert((*name).to_string(), p);
        }
    }
    Value::Object(out)
}

/// Removes from `v` the fields of `fields` that Go's `omitempty` leaves out (`""`, 0, false, and the
/// empty lists and maps), recursing into nested structs and lists of structs. Unlike [`go_struct`] it
/// keeps every other key where it is and adds nothing, so a partial object stays partial: what a text's
/// YAML such as `initialDelaySeconds: 0` becomes after Go decodes it into a typed struct and prints it.
pub fn drop_omitted_zeros(v: &mut Value, fields: &[(&str, F)]) {
    let Some(obj) = v.as_object_mut() else {
        return;
    };
    for (name, kind) in fields {
        let Some(field) = obj.field_mut(name) else {
            continue;
        };
        let omitted = match *kind {
            Str => field.as_str() == Some(""),
            Int => is_zero_number(field),
            Bool => field.as_bool() == Some(false),
            Obj(fs) | ObjAlways(fs) => {
                drop_omitted_zeros(field, fs);
                false
            }
            List(fs) => {
                if let Some(items) = field.as_array_mut() {
                    items.iter_mut().for_each(|i| drop_omitted_zeros(i, fs));
                }
                false
            }
            _ => false,
        };
        if omitted {
            obj.remove(*name);
        }
    }
}

/// A container as Go prints a typed `corev1.Container`.
pub fn go_container(v: &Value) -> Value {
    go_struct(v, CONTAINER)
}

/// A quantity as `resource.Quantity.MarshalJSON` writes it: the canonical text of a string or number.
pub fn canonical_quantity_value(v: &Value) -> Value {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => return other.clone(),
    };
    Value::String(canonical_quantity(&text).unwrap_or(text))
}

const DECIMAL_SUFFIXES: &[(&str, i32)] = &[
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];
const BINARY_SUFFIXES: &[(&str, u32)] = &[
    ("Ki", 1),
    ("Mi", 2),
    ("Gi", 3),
    ("Ti", 4),
    ("Pi", 5),
    ("Ei", 6),
];

/// Kubernetes' canonical text of a quantity (`2000m` → `2`, `1024Mi` → `1Gi`, `0.5` → `500m`), or `None`
/// when `s` is not a quantity this function understands (then the caller keeps the text as given).
/// Values are held exactly in nano-units; finer fractions round up, as Kubernetes does.
pub fn canonical_quantity(s: &str) -> Option<String> {
    let s = s.trim();
    let (negative, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let num_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(num_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return None;
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    // nano-units of the mantissa
    let mut mantissa: i128 = 0;
    for c in int_part.chars() {
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(i128::from(c as u8 - b'0'))?;
    }
    let mut frac_nanos: i128 = 0;
    let mut round_up = false;
    for (i, c) in frac_part.chars().enumerate() {
        let d = i128::from(c as u8 - b'0');
        if i < 9 {
            frac_nanos += d * 10i128.pow(8 - i as u32);
        } else if d != 0 {
            round_up = true;
        }
    }
    let base_nanos = mantissa
        .checked_mul(1_000_000_000)?
        .checked_add(frac_nanos)?;
    let (nanos, binary) = if let Some((_, k)) = BINARY_SUFFIXES.iter().find(|(n, _)| *n == suffix) {
        (base_nanos.checked_mul(1024i128.pow(*k))?, true)
    } else if let Some((_, e)) = DECIMAL_SUFFIXES.iter().find(|(n, _)| *n == suffix) {
        if *e >= 0 {
            (base_nanos.checked_mul(10i128.pow(*e as u32))?, false)
        } else {
            let div = 10i128.pow((-*e) as u32);
            let q = base_nanos / div;
            if base_nanos % div != 0 {
                round_up = true;
            }
            (q, false)
        }
    } else {
        // exponent forms (`1e3`) and unknown suffixes are kept as written
        return None;
    };
    let nanos = if round_up {
        nanos.checked_add(1)?
    } else {
        nanos
    };
    let sign = if negative && nanos != 0 { "-" } else { "" };
    const NANO: i128 = 1_000_000_000;
    if binary && nanos % NANO == 0 && nanos / NANO >= 1024 {
        let mut whole = nanos / NANO;
        let mut k = 0usize;
        while k < BINARY_SUFFIXES.len() && whole % 1024 == 0 {
            whole /= 1024;
            k += 1;
        }
        let suffix = if k == 0 { "" } else { BINARY_SUFFIXES[k - 1].0 };
        return Some(format!("{sign}{whole}{suffix}"));
    }
    if nanos == 0 {
        return Some("0".to_string());
    }
    // largest decimal exponent (multiple of 3) that keeps the mantissa whole
    for (suffix, e) in DECIMAL_SUFFIXES.iter().rev() {
        let unit = 10i128.pow((e + 9) as u32);
        if nanos % unit == 0 {
            return Some(format!("{sign}{}{suffix}", nanos / unit));
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities() {
        for (given, want) in [
            ("2000m", "2"),
            ("1024Mi", "1Gi"),
            ("4000m", "4"),
            ("100m", "100m"),
            ("500Mi", "500Mi"),
            ("0", "0"),
            ("123m", "123m"),
            ("1500m", "1500m"),
            ("0.5", "500m"),
            ("1", "1"),
            ("1000", "1k"),
            ("128Mi", "128Mi"),
            ("512", "512"),
            ("1Ki", "1Ki"),
            ("1.5Gi", "1536Mi"),
        ] {
            assert_eq!(canonical_quantity(given).as_deref(), Some(want), "{given}");
        }
        assert_eq!(canonical_quantity("abc"), None);
        assert_eq!(canonical_quantity("1e3"), None);
    }

    proptest::proptest! {
        #[test]
        fn quantity_parsing_never_panics(s in "[-+]?[0-9.]{0,40}[a-zA-Z]{0,2}") {
            let _ = canonical_quantity(&s);
        }
    }

    #[test]
    fn container_in_go_order_with_omitempty() {
        let c = json!({
            "tty": true,
            "name": "istio-proxy",
            "stdin": false,
            "image": "",
            "args": [],
            "resources": {"requests": {"cpu": "123m"}, "limits": {"cpu": "3000m"}},
            "securityContext": {"runAsGroup": 1234, "runAsUser": 1234, "privileged": false},
            "unknownField": 1,
            "ports": [{"containerPort": 80, "name": "http", "hostPort": 0}],
        });
        assert_eq!(
            serde_json::to_string(&go_container(&c)).unwrap(),
            r#"{"name":"istio-proxy","ports":[{"name":"http","containerPort":80}],"resources":{"limits":{"cpu":"3"},"requests":{"cpu":"123m"}},"securityContext":{"privileged":false,"runAsUser":1234,"runAsGroup":1234},"tty":true}"#
        );
    }
}
