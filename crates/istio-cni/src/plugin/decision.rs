//! Whether the plugin programs a pod (Istio's `cni/pkg/plugin/plugin.go` `doAddRun`, after the pod was
//! read): the checks in Istio's order, each skip with the reason Istio logs.

use super::pod_info::{PodInfo, ISTIO_INIT, ISTIO_PROXY};

/// The sidecar injection annotation and label (Istio's `annotation.SidecarInject`, `label.SidecarInject`).
const INJECT: &str = sidecar_core::annotations::INJECT.name;
/// The injector's status annotation; only an injected pod has it.
const STATUS: &str = sidecar_core::annotations::STATUS.name;

/// The plugin's answer for a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Program the pod's namespace.
    Program,
    /// Leave it alone, for this reason.
    Skip(String),
}

/// Decides for a pod that was read from the API server.
pub fn decide(pi: &PodInfo) -> Verdict {
    let skip = |why: String| Verdict::Skip(why);
    if pi.containers.contains(ISTIO_INIT) {
        return skip("excluded due to being already injected with istio-init container".into());
    }
    if let Some(v) = pi.proxy_env.get("DISABLE_ENVOY") {
        if iptables_init::parse_go_bool(v) == Ok(true) {
            return skip("excluded due to DISABLE_ENVOY on istio-proxy".into());
        }
    }
    if !pi.containers.contains(ISTIO_PROXY) {
        return skip(format!(
            "excluded because it does not have istio-proxy container (have {:?})",
            pi.containers
        ));
    }
    if !pi.proxy_type.is_empty() && pi.proxy_type != "sidecar" {
        return skip(format!(
            "excluded because it has proxy type {}",
            pi.proxy_type
        ));
    }
    // The label is the newer API; when both are there the label wins. A value Go cannot read as a
    // boolean does not exclude.
    let inject = pi.labels.get(INJECT).or_else(|| pi.annotations.get(INJECT));
    if let Some(v) = inject {
        if iptables_init::parse_go_bool(v) == Ok(false) {
            return skip("excluded due to inject-disabled annotation".into());
        }
    }
    if !pi.annotations.contains_key(STATUS) {
        return skip("excluded due to not containing sidecar annotation".into());
    }
    Verdict::Program
}

/// Whether the sandbox looks like the node agent's own pod (Istio's `isCNIPod`): it is let through
/// without the API server, which it may be the one to repair.
pub fn is_agent_pod(pod_name: &str, pod_namespace: &str, agent_namespace: &str) -> bool {
    pod_name.starts_with("istio-cni-node-") && pod_namespace == agent_namespace
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn injected() -> PodInfo {
        let mut pi = PodInfo::default();
        pi.containers.insert("app".into());
        pi.containers.insert("istio-proxy".into());
        pi.annotations.insert(STATUS.into(), "{}".into());
        pi
    }

    #[test]
    fn an_injected_pod_is_programmed() {
        assert_eq!(decide(&injected()), Verdict::Program);
        let mut pi = injected();
        pi.proxy_type = "sidecar".into();
        pi.annotations.insert(INJECT.into(), "maybe".into());
        assert_eq!(decide(&pi), Verdict::Program);
    }

    #[test]
    fn each_of_istio_s_exclusions_skips() {
        type Change = Box<dyn Fn(&mut PodInfo)>;
        let cases: Vec<(&str, Change)> = vec![
            (
                "istio-init",
                Box::new(|p| {
                    p.containers.insert("istio-init".into());
                }),
            ),
            (
                "DISABLE_ENVOY",
                Box::new(|p| {
                    p.proxy_env.insert("DISABLE_ENVOY".into(), "true".into());
                }),
            ),
            (
                "does not have istio-proxy",
                Box::new(|p| {
                    p.containers.remove("istio-proxy");
                }),
            ),
            (
                "proxy type router",
                Box::new(|p| p.proxy_type = "router".into()),
            ),
            (
                "inject-disabled",
                Box::new(|p| {
                    p.annotations.insert(INJECT.into(), "false".into());
                }),
            ),
            (
                "not containing sidecar annotation",
                Box::new(|p| {
                    p.annotations.remove(STATUS);
                }),
            ),
        ];
        for (why, change) in cases {
            let mut pi = injected();
            change(&mut pi);
            match decide(&pi) {
                Verdict::Skip(reason) => assert!(reason.contains(why), "{why}: {reason}"),
                Verdict::Program => panic!("{why}: programmed"),
            }
        }
        // The label wins over the annotation.
        let mut pi = injected();
        pi.annotations.insert(INJECT.into(), "false".into());
        pi.labels.insert(INJECT.into(), "true".into());
        assert_eq!(decide(&pi), Verdict::Program);
    }

    #[test]
    fn the_agent_pod_is_recognised_by_name_and_namespace() {
        assert!(is_agent_pod(
            "istio-cni-node-abcde",
            "istio-system",
            "istio-system"
        ));
        assert!(!is_agent_pod(
            "istio-cni-node-abcde",
            "default",
            "istio-system"
        ));
        assert!(!is_agent_pod("web", "istio-system", "istio-system"));
    }
}
