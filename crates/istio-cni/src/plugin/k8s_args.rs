//! `CNI_ARGS`: the `K=V;K=V` pairs the runtime passes, read as Istio's `K8sArgs` through the CNI
//! library's `types.LoadArgs` (an unknown key is an error unless `IgnoreUnknown` is true).

use super::spec::{code, CniError};

/// The Kubernetes arguments of a sandbox (containerd's and CRI-O's names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct K8sArgs {
    /// `K8S_POD_NAME`.
    pub pod_name: String,
    /// `K8S_POD_NAMESPACE`.
    pub pod_namespace: String,
    /// `K8S_POD_INFRA_CONTAINER_ID`.
    pub infra_container_id: String,
    /// `K8S_POD_UID`.
    pub pod_uid: String,
}

/// Parses `CNI_ARGS`.
pub fn parse(args: &str) -> Result<K8sArgs, CniError> {
    let mut out = K8sArgs::default();
    let mut unknown = Vec::new();
    let mut ignore_unknown = false;
    for pair in args.split(';').filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(CniError::new(
                code::INVALID_ENVIRONMENT,
                format!("CNI_ARGS: invalid pair {pair:?}"),
            ));
        };
        match key {
            "K8S_POD_NAME" => out.pod_name = value.to_string(),
            "K8S_POD_NAMESPACE" => out.pod_namespace = value.to_string(),
            "K8S_POD_INFRA_CONTAINER_ID" => out.infra_container_id = value.to_string(),
            "K8S_POD_UID" => out.pod_uid = value.to_string(),
            "IgnoreUnknown" => {
                ignore_unknown = iptables_init::parse_go_bool(value).map_err(|e| {
                    CniError::new(
                        code::INVALID_ENVIRONMENT,
                        format!("CNI_ARGS: IgnoreUnknown: {e}"),
                    )
                })?
            }
            _ => unknown.push(pair.to_string()),
        }
    }
    if !unknown.is_empty() && !ignore_unknown {
        return Err(CniError::new(
            code::INVALID_ENVIRONMENT,
            format!("CNI_ARGS: unknown args {unknown:?}"),
        ));
    }
    // The names go into the API request's path: anything Kubernetes would not accept as a pod's name or
    // namespace is refused (an empty one means "not a Kubernetes pod", as in Istio).
    if !out.pod_namespace.is_empty() && !is_dns1123_label(&out.pod_namespace) {
        return Err(invalid_name("K8S_POD_NAMESPACE", &out.pod_namespace, LABEL));
    }
    if !out.pod_name.is_empty() && !is_dns1123_subdomain(&out.pod_name) {
        return Err(invalid_name("K8S_POD_NAME", &out.pod_name, SUBDOMAIN));
    }
    Ok(out)
}

const LABEL: &str =
    "a namespace name: a lowercase RFC 1123 label (a-z, 0-9 and '-', starting and ending \
                     with a letter or digit, at most 63 characters)";
const SUBDOMAIN: &str =
    "a pod name: a lowercase RFC 1123 subdomain (a-z, 0-9, '-' and '.', each dot-separated \
                         part starting and ending with a letter or digit, at most 253 characters)";

fn invalid_name(key: &str, value: &str, want: &str) -> CniError {
    CniError::new(
        code::INVALID_ENVIRONMENT,
        format!("CNI_ARGS: {key} {value:?} is not {want}"),
    )
}

/// Kubernetes' `IsDNS1123Label` (`k8s.io/apimachinery/pkg/util/validation`): what a namespace's name
/// must be.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// Kubernetes' `IsDNS1123Subdomain`: what a pod's name must be (`ValidatePodName`).
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            // Each part is a label, without the label's own length limit.
            let b = part.as_bytes();
            let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
            b.first().is_some_and(alnum)
                && b.last().is_some_and(alnum)
                && b.iter().all(|c| alnum(c) || *c == b'-')
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn containerd_s_args_are_read() {
        let a = parse("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-1;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u;OTHER=x").unwrap();
        assert_eq!(a.pod_name, "web-1");
        assert_eq!(a.pod_namespace, "default");
        assert_eq!(a.infra_container_id, "abc");
        assert_eq!(parse("").unwrap(), K8sArgs::default());
    }

    #[test]
    fn unknown_keys_and_bad_pairs_are_refused() {
        let e = parse("K8S_POD_NAME=a;OTHER=x").unwrap_err();
        assert_eq!(e.code, code::INVALID_ENVIRONMENT);
        assert!(e.msg.contains("OTHER=x"), "{e}");
        assert!(parse("K8S_POD_NAME")
            .unwrap_err()
            .msg
            .contains("invalid pair"));
        assert!(parse("IgnoreUnknown=maybe").is_err());
    }

    /// Before the fix, the names went into the request path unescaped.
    #[test]
    fn names_kubernetes_would_refuse_are_refused_naming_them() {
        for (args, key, value) in [
            (
                "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p?watch=true",
                "K8S_POD_NAME",
                "p?watch=true",
            ),
            (
                "K8S_POD_NAMESPACE=default;K8S_POD_NAME=../../secrets/s",
                "K8S_POD_NAME",
                "../../secrets/s",
            ),
            (
                "K8S_POD_NAMESPACE=default;K8S_POD_NAME=Web",
                "K8S_POD_NAME",
                "Web",
            ),
            (
                "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web.",
                "K8S_POD_NAME",
                "web.",
            ),
            (
                "K8S_POD_NAMESPACE=../kube-system;K8S_POD_NAME=p",
                "K8S_POD_NAMESPACE",
                "../kube-system",
            ),
            (
                "K8S_POD_NAMESPACE=a.b;K8S_POD_NAME=p",
                "K8S_POD_NAMESPACE",
                "a.b",
            ),
            (
                "K8S_POD_NAMESPACE=-a;K8S_POD_NAME=p",
                "K8S_POD_NAMESPACE",
                "-a",
            ),
        ] {
            let e = parse(args).unwrap_err();
            assert_eq!(e.code, code::INVALID_ENVIRONMENT, "{args}");
            assert!(
                e.msg
                    .starts_with(&format!("CNI_ARGS: {key} {value:?} is not a ")),
                "{e}"
            );
        }
        let long_label = "a".repeat(64);
        assert!(!is_dns1123_label(&long_label));
        assert!(is_dns1123_label(&long_label[1..]));
        // A subdomain's parts may be longer than a label; the whole is bounded at 253.
        assert!(is_dns1123_subdomain(&format!("{long_label}.b")));
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
        assert!(is_dns1123_subdomain(&"a".repeat(253)));
        for ok in ["web-1", "web.v1", "0", "a-b.c-d"] {
            assert!(is_dns1123_subdomain(ok), "{ok}");
        }
        for bad in ["", ".", "a..b", "a_b", "-a", "é"] {
            assert!(!is_dns1123_subdomain(bad), "{bad}");
        }
        let a = parse("K8S_POD_NAMESPACE=istio-system;K8S_POD_NAME=istio-cni-node-x7.v2").unwrap();
        assert_eq!(a.pod_name, "istio-cni-node-x7.v2");
    }
}
