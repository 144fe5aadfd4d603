//! The `sidecar.istio.io/status` annotation (Istio's `SidecarInjectionStatus`): what an injection
//! added, written by post-processing and read back to strip or skip it when the pod is injected again.

use serde_json::Value;

use crate::pod::{containers, name_of};
use sidecar_core::fields::Fields;

/// The `sidecar.istio.io/status` names a previous injection recorded (unparseable → `None`).
#[derive(Debug, Default, Clone)]
pub(crate) struct InjectedNames {
    pub containers: Vec<String>,
    pub init_containers: Vec<String>,
}

/// Parses the annotation's value; `None` when it is not a JSON object of name lists.
pub(crate) fn parse(text: &str) -> Option<InjectedNames> {
    let v: Value = serde_json::from_str(text).ok()?;
    let obj = v.as_object()?;
    let names = |k: &str| -> Option<Vec<String>> {
        match obj.field(k) {
            None | Some(Value::Null) => Some(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|n| n.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>(),
            Some(_) => None,
        }
    };
    // Go decodes the whole status struct: a mistyped list makes it unparseable
    names("volumes")?;
    names("imagePullSecrets")?;
    Some(InjectedNames {
        containers: names("containers")?,
        init_containers: names("initContainers")?,
    })
}

/// The annotation's value for a template pod: the names the template added, keys in Istio's order,
/// `null` for none.
pub fn build(template_pod: &Value, revision: &str) -> String {
    /// Istio's `SidecarInjectionStatus`, field order as Go prints it.
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Status<'a> {
        init_containers: Option<Vec<&'a str>>,
        containers: Option<Vec<&'a str>>,
        volumes: Option<Vec<&'a str>>,
        image_pull_secrets: Option<Vec<&'a str>>,
        revision: &'a str,
    }
    let names = |k: &str| -> Option<Vec<&str>> {
        let list = containers(template_pod, k);
        (!list.is_empty()).then(|| list.iter().map(name_of).collect())
    };
    let status = Status {
        init_containers: names("initContainers"),
        containers: names("containers"),
        volumes: names("volumes"),
        image_pull_secrets: names("imagePullSecrets"),
        revision: if revision.is_empty() {
            "default"
        } else {
            revision
        },
    };
    // Serialising string lists cannot fail.
    serde_json::to_string(&status).unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn build_then_parse_gives_the_names() {
        let template = json!({"spec": {"initContainers": [{"name": "istio-init"}],
                                       "containers": [{"name": "istio-proxy"}],
                                       "volumes": [{"name": "v"}]}});
        let text = build(&template, "");
        assert_eq!(
            text,
            r#"{"initContainers":["istio-init"],"containers":["istio-proxy"],"volumes":["v"],"imagePullSecrets":null,"revision":"default"}"#
        );
        let names = parse(&text).unwrap();
        assert_eq!(names.containers, ["istio-proxy"]);
        assert_eq!(names.init_containers, ["istio-init"]);
    }

    #[test]
    fn a_mistyped_list_makes_the_status_unparseable() {
        assert!(parse(r#"{"containers": ["a"], "volumes": "v"}"#).is_none());
        assert!(parse(r#"{"containers": [1]}"#).is_none());
        assert!(parse("[]").is_none());
        assert!(parse("{}").unwrap().containers.is_empty());
    }
}
