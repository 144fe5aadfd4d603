//! OpenShift (istiod's `PLATFORM=openshift`): the proxy's uid and gid come from the pod's Namespace
//! annotations (Istio's `inject.go` `GetProxyIDs` and `openshift.go`), and a user `istio-proxy` that runs as
//! the app's uid loses that uid before injection (Istio's `webhook.go` `inject`). The Namespaces are read
//! by `namespaces`.

use serde_json::{Map, Value};

use sidecar_core::fields::Fields;

/// Istio's proxy uid and gid off OpenShift, and whenever an annotation is missing or invalid.
pub const DEFAULT_PROXY_ID: i64 = 1337;
/// The namespace annotation with the uid range (`start/size` or `start-end`).
pub const UID_RANGE_ANNOTATION: &str = "openshift.io/sa.scc.uid-range";
/// The namespace annotation with the supplemental group blocks (comma-separated).
pub const SUPPLEMENTAL_GROUPS_ANNOTATION: &str = "openshift.io/sa.scc.supplemental-groups";
/// Every namespace annotation [`proxy_ids`] reads.
pub const ID_ANNOTATIONS: [&str; 2] = [UID_RANGE_ANNOTATION, SUPPLEMENTAL_GROUPS_ANNOTATION];

/// Istio's `GetProxyIDs`: uid = end of the uid-range block; gid = end of the first supplemental-groups
/// block (the uid range when that key is absent); anything missing or invalid gives 1337.
pub fn proxy_ids(annotations: &Map<String, Value>) -> (i64, i64) {
    let get = |k: &str| annotations.field(k).and_then(Value::as_str);
    let uid = get(UID_RANGE_ANNOTATION)
        .filter(|t| !t.is_empty())
        .and_then(parse_block)
        .map_or(DEFAULT_PROXY_ID, i64::from);
    let groups = if annotations.has_field(SUPPLEMENTAL_GROUPS_ANNOTATION) {
        get(SUPPLEMENTAL_GROUPS_ANNOTATION)
    } else {
        get(UID_RANGE_ANNOTATION)
    };
    let gid = groups
        .filter(|t| !t.is_empty())
        .and_then(|t| t.split(',').map(parse_block).collect::<Option<Vec<u32>>>())
        .and_then(|ends| ends.first().copied())
        .map_or(DEFAULT_PROXY_ID, i64::from);
    (uid, gid)
}

/// The end of an OpenShift id block (`ParseBlock`): `start/size` → start+size−1 (32-bit wrapping), else
/// `start-end` → end. Scanned like Go's `fmt.Sscanf`: blanks before each number are skipped, text after the
/// second number is ignored, signs and values above `u32::MAX` are errors.
pub fn parse_block(text: &str) -> Option<u32> {
    let (sep, sized) = if text.contains('/') {
        ('/', true)
    } else {
        ('-', false)
    };
    let (start, rest) = scan_u32(text)?;
    let rest = rest.strip_prefix(sep)?;
    let (second, _) = scan_u32(rest)?;
    Some(if sized {
        start.wrapping_add(second).wrapping_sub(1)
    } else {
        second
    })
}

fn scan_u32(text: &str) -> Option<(u32, &str)> {
    let t = text.trim_start_matches([' ', '\t']);
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let n: u32 = t[..digits].parse().ok()?;
    Some((n, &t[digits..]))
}

/// The container lists scanned, in Istio's order.
const LISTS: [&str; 2] = ["containers", "initContainers"];
/// The proxy container and the init containers that are not app containers.
const PROXY: &str = "istio-proxy";
const NOT_APP: [&str; 2] = ["istio-init", "istio-validation"];

fn name(c: &Value) -> &str {
    c.field("name").and_then(Value::as_str).unwrap_or("")
}

fn run_as_user(c: &Value) -> Option<i64> {
    c.field("securityContext")
        .and_then(|s| s.field("runAsUser"))
        .and_then(Value::as_i64)
}

/// Istio's OpenShift step before injection: when the pod already has an `istio-proxy` with a
/// `securityContext` whose `runAsUser` (unset: 0) equals the app's (the last other container that sets
/// one; unset: 0), that proxy's `runAsUser` and `runAsGroup` are removed, so the template's ids apply.
/// Returns whether the pod changed.
pub fn clear_proxy_user_equal_to_app(pod: &mut Value) -> bool {
    let Some(spec) = pod.field("spec") else {
        return false;
    };
    let containers = || {
        LISTS
            .iter()
            .filter_map(|l| spec.field(l).and_then(Value::as_array))
            .flatten()
    };
    let found = LISTS.iter().find_map(|l| {
        spec.field(l)
            .and_then(Value::as_array)?
            .iter()
            .position(|c| name(c) == PROXY)
            .map(|i| (*l, i))
    });
    let Some((list, index)) = found else {
        return false;
    };
    if spec
        .field(list)
        .and_then(|cs| cs.as_array()?.get(index))
        .and_then(|c| c.field("securityContext"))
        .is_none_or(Value::is_null)
    {
        return false;
    }
    let proxy_user = containers()
        .filter(|c| name(c) == PROXY)
        .filter_map(run_as_user)
        .next_back()
        .unwrap_or(0);
    let app_user = containers()
        .filter(|c| name(c) != PROXY && !NOT_APP.contains(&name(c)))
        .filter_map(run_as_user)
        .next_back()
        .unwrap_or(0);
    if proxy_user != app_user {
        return false;
    }
    let Some(sc) = pod
        .field_mut("spec")
        .and_then(|s| s.field_mut(list))
        .and_then(|cs| cs.as_array_mut()?.get_mut(index))
        .and_then(|c| c.field_mut("securityContext"))
        .and_then(Value::as_object_mut)
    else {
        return false;
    };
    let a = sc.remove("runAsUser").is_some();
    let b = sc.remove("runAsGroup").is_some();
    a || b
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::namespaces::Namespaces;
    use serde_json::json;

    fn ids(ann: Value) -> (i64, i64) {
        proxy_ids(ann.as_object().unwrap())
    }

    #[test]
    fn blocks_parse_like_go_sscanf() {
        assert_eq!(parse_block("1000620000/10000"), Some(1_000_629_999));
        assert_eq!(parse_block("1000620000-1000629999"), Some(1_000_629_999));
        assert_eq!(parse_block(" 1000640000/10000"), Some(1_000_649_999));
        assert_eq!(parse_block("5/ 10"), Some(14));
        assert_eq!(parse_block("1000620000/10000abc"), Some(1_000_629_999));
        assert_eq!(parse_block("0/0"), Some(u32::MAX));
        for bad in [
            "5 / 10",
            "5/x",
            "+5/10",
            "-5/10",
            "",
            "/10",
            "5/",
            "4294967296/1",
            "abc",
        ] {
            assert_eq!(parse_block(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn ids_come_from_the_annotations_and_fall_back_to_1337() {
        let r = "1000620000/10000";
        assert_eq!(
            ids(json!({UID_RANGE_ANNOTATION: r, SUPPLEMENTAL_GROUPS_ANNOTATION: r})),
            (1_000_629_999, 1_000_629_999)
        );
        // The gid falls back to the uid range only when supplemental-groups is absent.
        assert_eq!(
            ids(json!({UID_RANGE_ANNOTATION: r})),
            (1_000_629_999, 1_000_629_999)
        );
        assert_eq!(
            ids(json!({UID_RANGE_ANNOTATION: r, SUPPLEMENTAL_GROUPS_ANNOTATION: ""})),
            (1_000_629_999, 1337)
        );
        assert_eq!(
            ids(json!({SUPPLEMENTAL_GROUPS_ANNOTATION: "1000620000/10000,1000640000/10000"})),
            (1337, 1_000_629_999)
        );
        assert_eq!(
            ids(json!({SUPPLEMENTAL_GROUPS_ANNOTATION: "1000620000/10000,bad"})),
            (1337, 1337)
        );
        assert_eq!(
            ids(json!({SUPPLEMENTAL_GROUPS_ANNOTATION: "2000/10"})),
            (1337, 2009)
        );
        assert_eq!(ids(json!({UID_RANGE_ANNOTATION: "5/x"})), (1337, 1337));
        assert_eq!(ids(json!({UID_RANGE_ANNOTATION: ""})), (1337, 1337));
        assert_eq!(ids(json!({})), (1337, 1337));
        assert_eq!(ids(json!({UID_RANGE_ANNOTATION: "0/1"})), (0, 0));
        assert_eq!(Namespaces::default().proxy_ids("missing"), (1337, 1337));
    }

    #[test]
    fn a_proxy_running_as_the_app_user_loses_its_ids() {
        let mut pod = json!({"spec": {"containers": [
            {"name": "hello", "securityContext": {"runAsUser": 1000620000}},
            {"name": "istio-proxy", "securityContext": {"runAsUser": 1000620000, "runAsGroup": 5,
                                                        "readOnlyRootFilesystem": false}}]}});
        assert!(clear_proxy_user_equal_to_app(&mut pod));
        assert_eq!(
            pod["spec"]["containers"][1]["securityContext"],
            json!({"readOnlyRootFilesystem": false})
        );
        // Unset counts as 0: a lone runAsGroup goes too when no app container sets runAsUser.
        let mut lone = json!({"spec": {"containers": [{"name": "a"},
            {"name": "istio-proxy", "securityContext": {"runAsGroup": 7}}]}});
        assert!(clear_proxy_user_equal_to_app(&mut lone));
        // A different uid, or no securityContext, is kept; istio-init does not count as the app.
        for keep in [
            json!({"spec": {"containers": [{"name": "a", "securityContext": {"runAsUser": 1}},
                {"name": "istio-proxy", "securityContext": {"runAsUser": 2}}]}}),
            json!({"spec": {"containers": [{"name": "a"}, {"name": "istio-proxy"}]}}),
            json!({"spec": {"containers": [{"name": "a"}],
                "initContainers": [{"name": "istio-init", "securityContext": {"runAsUser": 2}},
                                   {"name": "istio-proxy", "securityContext": {"runAsUser": 2}}]}}),
        ] {
            let mut p = keep.clone();
            assert!(!clear_proxy_user_equal_to_app(&mut p), "{keep}");
            assert_eq!(p, keep);
        }
    }
}
