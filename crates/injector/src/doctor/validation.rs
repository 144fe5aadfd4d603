//! The entry's fields the API server validates (k8s.io/apiserver's `ValidateWebhookClientConfig`, the
//! failurePolicy enum, the timeoutSeconds range): what it would refuse is an error here, with a fix.

use serde_json::{json, Value};

use crate::shared::webhook_entry::{Entry, DEFAULT_TIMEOUT_SECONDS};
use sidecar_core::fields::Fields;

use super::error::DoctorError;
use super::report::{finding, patch_fix, Finding, Level};
use super::url::{forbidden_char, parse_url};

/// The timeoutSeconds check of one entry.
pub fn check_timeout(h: &Entry) -> Finding {
    const WHY: &str =
        "every pod creation the webhook selects waits up to timeoutSeconds when the webhook \
hangs, and the API server's own request budget is 30 s; Istio's charts use 10";
    let hooks = [h];
    let fix = |v: i64| {
        Some(patch_fix(
            &h.config,
            &[
                json!({"op": "replace", "path": format!("/webhooks/{}/timeoutSeconds", h.index), "value": v}),
            ],
        ))
    };
    match h.value.field("timeoutSeconds") {
        None | Some(Value::Null) => finding(
            Level::Ok,
            "timeout",
            &hooks,
            format!("timeoutSeconds not set: the API server's default {DEFAULT_TIMEOUT_SECONDS}"),
            WHY,
            None,
        ),
        Some(v) => match v.as_i64() {
            Some(t) if !(1..=30).contains(&t) => finding(
                Level::Error,
                "timeout",
                &hooks,
                format!("timeoutSeconds {t} is outside 1..30, which the API server refuses"),
                WHY,
                fix(DEFAULT_TIMEOUT_SECONDS),
            ),
            Some(t) if t > DEFAULT_TIMEOUT_SECONDS => finding(
                Level::Warning,
                "timeout",
                &hooks,
                format!("timeoutSeconds {t} is above {DEFAULT_TIMEOUT_SECONDS}"),
                WHY,
                fix(DEFAULT_TIMEOUT_SECONDS),
            ),
            Some(t) => finding(
                Level::Ok,
                "timeout",
                &hooks,
                format!("timeoutSeconds {t}"),
                WHY,
                None,
            ),
            None => finding(
                Level::Error,
                "timeout",
                &hooks,
                format!("timeoutSeconds {v} is not an integer"),
                WHY,
                fix(DEFAULT_TIMEOUT_SECONDS),
            ),
        },
    }
}

/// What is wrong with a `clientConfig.service.path`, if anything.
pub(super) fn path_problem(path: &str) -> Option<String> {
    if let Some(c) = forbidden_char(path) {
        return Some(format!(
            "holds the control character or space {c:?}, which would be written into the HTTP request line"
        ));
    }
    if !path.is_empty() && !path.starts_with('/') {
        return Some("does not start with '/'".to_string());
    }
    None
}

/// The clientConfig checks of one entry: what the API server's `ValidateWebhookClientConfig`
/// (k8s.io/apiserver's webhook validation: `ValidateWebhookURL`, `ValidateWebhookService`) refuses in
/// `url` and `service.path`. Only errors are reported; a path refused here is never sent.
pub fn check_client_config(h: &Entry) -> Vec<Finding> {
    const WHY: &str = "the API server refuses a clientConfig.url that is not an https URL ('https' is the \
only allowed URL scheme) and a url or service.path that is not a plain URL; a control character or a space \
would end or split the HTTP request line of every call, so doctor sends no request with it";
    let hooks = [h];
    let edit = |field: &str| {
        Some(format!(
            "kubectl edit mutatingwebhookconfiguration {}  # webhooks[{}].clientConfig.{field}",
            h.config, h.index
        ))
    };
    let error = |found: String, fix: Option<String>| {
        finding(Level::Error, "client-config", &hooks, found, WHY, fix)
    };
    let mut out = Vec::new();
    let Some(client) = h.client() else {
        return out;
    };
    match client.field("url") {
        None | Some(Value::Null) => {}
        Some(Value::String(u)) => {
            let label = format!("webhook {}: clientConfig.url {u:?}", h.name);
            if let Some(c) = forbidden_char(u) {
                out.push(error(
                    format!("{label} holds the control character or space {c:?}"),
                    edit("url"),
                ));
            } else if let Some(rest) = u.strip_prefix("http://") {
                out.push(error(
                    format!("{label} is http: the API server calls webhooks over https only"),
                    Some(patch_fix(
                        &h.config,
                        &[json!({"op": "replace",
                            "path": format!("/webhooks/{}/clientConfig/url", h.index),
                            "value": format!("https://{rest}")})],
                    )),
                ));
            } else if let Err(e) = parse_url(u) {
                let reason = match e {
                    DoctorError::Url { reason, .. } => reason.to_string(),
                    other => other.to_string(),
                };
                out.push(error(format!("{label} {reason}"), edit("url")));
            }
        }
        Some(other) => out.push(error(
            format!(
                "webhook {}: clientConfig.url is {other}, not a string",
                h.name
            ),
            edit("url"),
        )),
    }
    match client.field("service").and_then(|s| s.field("path")) {
        None | Some(Value::Null) => {}
        Some(Value::String(p)) => {
            if let Some(problem) = path_problem(p) {
                out.push(error(
                    format!(
                        "webhook {}: clientConfig.service.path {p:?} {problem}",
                        h.name
                    ),
                    edit("service.path"),
                ));
            }
        }
        Some(other) => out.push(error(
            format!(
                "webhook {}: clientConfig.service.path is {other}, not a string",
                h.name
            ),
            edit("service.path"),
        )),
    }
    out
}

/// The failurePolicy check of one entry: admissionregistration/v1 knows `Fail` (the default) and
/// `Ignore` only, and the API server refuses any other value.
pub fn check_failure_policy(h: &Entry) -> Option<Finding> {
    const WHY: &str =
        "the API server refuses a failurePolicy other than Fail or Ignore (supported values: \
\"Fail\", \"Ignore\"), so this configuration cannot be applied as it is";
    match h.value.field("failurePolicy") {
        None | Some(Value::Null) => None,
        Some(Value::String(p)) if p == "Fail" || p == "Ignore" => None,
        Some(other) => Some(finding(
            Level::Error,
            "failure-policy",
            &[h],
            format!(
                "webhook {}: failurePolicy {other} is neither Fail nor Ignore",
                h.name
            ),
            WHY,
            Some(patch_fix(
                &h.config,
                &[json!({"op": "replace",
                    "path": format!("/webhooks/{}/failurePolicy", h.index), "value": "Fail"})],
            )),
        )),
    }
}
