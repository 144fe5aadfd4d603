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
    Ok(out)
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
}
