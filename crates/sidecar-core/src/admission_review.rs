//! The AdmissionReview envelope (`admission.k8s.io/v1` and `v1beta1`): the request the API server sends a
//! mutating webhook and the answer around the webhook's response, written once for the injector's server,
//! its doctor's probe and the tests that play the API server (Kubernetes'
//! `staging/src/k8s.io/api/admission/v1/types.go`; Istio's `pkg/kube/inject/webhook.go` `serveInject`).

use serde_json::{json, Value};

use crate::fields::{path, Fields};

/// The envelope's `kind`.
pub const KIND: &str = "AdmissionReview";

/// The API versions a review may come in, the current one first. The answer carries the request's.
pub const API_VERSIONS: [&str; 2] = ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"];

/// A review asking to create `pod` in `namespace`, as the API server sends it for a pod's creation
/// (`version` is `v1` or `v1beta1`): the pod's name, the user `username` and `dry_run` as given.
pub fn pod_create(
    version: &str,
    uid: &str,
    namespace: &str,
    username: &str,
    dry_run: bool,
    pod: &Value,
) -> Value {
    let name = path(pod, ["metadata", "name"])
        .and_then(Value::as_str)
        .unwrap_or_default();
    json!({
        "apiVersion": format!("admission.k8s.io/{version}"),
        "kind": KIND,
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": name,
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": username},
            "object": pod,
            "oldObject": null,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}

/// The answer of `api_version` around `response`.
pub fn answer(api_version: &str, response: Value) -> Value {
    json!({"kind": KIND, "apiVersion": api_version, "response": response})
}

/// A response that refuses the review `uid` with `message` (`allowed: false`, the message as the status's,
/// as Istio's `toAdmissionResponse` writes it).
pub fn refusal(uid: &str, message: &str) -> Value {
    json!({"uid": uid, "allowed": false, "status": {"metadata": {}, "message": message}})
}

/// Why `answer` is not an answer of `api_version` to the review `uid`; its response when it is.
pub fn response_to<'a>(
    answer: &'a Value,
    api_version: &str,
    uid: &str,
) -> Result<&'a Value, String> {
    let field = |v: &'a Value, name: &str| v.field(name).unwrap_or(&Value::Null);
    if field(answer, "apiVersion") != api_version || field(answer, "kind") != KIND {
        return Err(format!(
            "not an {api_version} {KIND} (apiVersion {}, kind {})",
            field(answer, "apiVersion"),
            field(answer, "kind")
        ));
    }
    let response = field(answer, "response");
    if field(response, "uid") != uid {
        return Err(format!(
            "response.uid is {}, not the request's {uid:?}",
            field(response, "uid")
        ));
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_creation_round_trips_through_its_answer() {
        let pod = json!({"metadata": {"name": "p"}});
        let review = pod_create("v1beta1", "u-1", "apps", "someone", true, &pod);
        assert_eq!(review["apiVersion"], API_VERSIONS[1]);
        assert_eq!(review["request"]["name"], "p");
        assert_eq!(review["request"]["dryRun"], true);
        let answered = answer(API_VERSIONS[1], refusal("u-1", "no"));
        let response = response_to(&answered, API_VERSIONS[1], "u-1").expect("an answer");
        assert_eq!(response["status"]["message"], "no");
        assert!(response_to(&answered, API_VERSIONS[0], "u-1").is_err());
        assert!(response_to(&answered, API_VERSIONS[1], "u-2").is_err());
    }
}
