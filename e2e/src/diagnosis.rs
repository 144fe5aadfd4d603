//! What the cluster says about pods that did not become ready, for a failed wait's message: each pod's
//! phase, conditions and containers' states (with the last termination), the tail of its containers'
//! logs (current and previous), the namespace's warning events, and the nodes' pressure conditions and
//! taints. A CI log shows only the failure's message, so the message has to carry the reason.

use std::fmt::Write as _;

use serde_json::Value;

use crate::product::Product;

/// Lines of each container log kept.
const LOG_LINES: &str = "15";
/// Warning events kept (the newest).
const EVENTS: usize = 15;

/// The report on the pods of `ns` matching `selector` (`k=v[,k=v]`); every part the cluster cannot
/// answer is named with its error instead, so the report itself never fails.
pub fn pods(p: &Product, ns: &str, selector: &str) -> String {
    report(p, ns, selector, "labelSelector", selector)
}

/// The report on pod `ns/name`, as [`pods`].
pub fn pod(p: &Product, ns: &str, name: &str) -> String {
    report(
        p,
        ns,
        name,
        "fieldSelector",
        &format!("metadata.name={name}"),
    )
}

fn report(p: &Product, ns: &str, what: &str, key: &str, value: &str) -> String {
    let mut out = String::new();
    let path = format!(
        "/api/v1/namespaces/{ns}/pods?{key}={}",
        value.replace('=', "%3D").replace(',', "%2C")
    );
    match p.get(&path) {
        Ok(list) => {
            let items = list["items"].as_array().cloned().unwrap_or_default();
            let _ = writeln!(out, "pods {ns}/{what}: {}", items.len());
            for pod in &items {
                pod_report(p, ns, pod, &mut out);
            }
        }
        Err(e) => {
            let _ = writeln!(out, "pods {ns}/{what}: {e:#}");
        }
    }
    events(p, ns, &mut out);
    nodes(p, &mut out);
    out
}

fn pod_report(p: &Product, ns: &str, pod: &Value, out: &mut String) {
    let name = pod["metadata"]["name"].as_str().unwrap_or("?");
    let s = &pod["status"];
    let _ = writeln!(
        out,
        "- pod {name} on {}: {}{}",
        pod["spec"]["nodeName"].as_str().unwrap_or("(unscheduled)"),
        s["phase"].as_str().unwrap_or("?"),
        if pod["metadata"]["deletionTimestamp"].is_null() {
            ""
        } else {
            " (terminating)"
        }
    );
    for c in s["conditions"].as_array().into_iter().flatten() {
        if c["status"] != "True" {
            let _ = writeln!(
                out,
                "  condition {} {}: {} {}",
                c["type"].as_str().unwrap_or("?"),
                c["status"].as_str().unwrap_or("?"),
                c["reason"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or("")
            );
        }
    }
    for key in ["initContainerStatuses", "containerStatuses"] {
        for c in s[key].as_array().into_iter().flatten() {
            let cname = c["name"].as_str().unwrap_or("?");
            let _ = writeln!(
                out,
                "  container {cname}: ready {}, restarts {}, now {}, last {}",
                c["ready"],
                c["restartCount"],
                state(&c["state"]),
                state(&c["lastState"])
            );
            let restarted = c["restartCount"].as_u64().unwrap_or(0) > 0;
            for previous in [false, true] {
                if previous && !restarted {
                    continue;
                }
                log_tail(p, ns, name, cname, previous, out);
            }
        }
    }
}

/// One container state in a line: `waiting CrashLoopBackOff: …`, `running since …`,
/// `terminated OOMKilled (exit 137) at …`, or `-`.
fn state(s: &Value) -> String {
    if let Some(w) = s.get("waiting") {
        format!(
            "waiting {} {}",
            w["reason"].as_str().unwrap_or(""),
            w["message"].as_str().unwrap_or("")
        )
    } else if let Some(r) = s.get("running") {
        format!("running since {}", r["startedAt"].as_str().unwrap_or("?"))
    } else if let Some(t) = s.get("terminated") {
        format!(
            "terminated {} (exit {}) at {} {}",
            t["reason"].as_str().unwrap_or(""),
            t["exitCode"],
            t["finishedAt"].as_str().unwrap_or("?"),
            t["message"].as_str().unwrap_or("")
        )
    } else {
        "-".to_string()
    }
}

fn log_tail(p: &Product, ns: &str, pod: &str, container: &str, previous: bool, out: &mut String) {
    let mut args = vec!["logs", "-n", ns, pod, "-c", container, "--tail", LOG_LINES];
    if previous {
        args.push("--previous");
    }
    let which = if previous { "previous" } else { "current" };
    match p.kubectl(&args) {
        Ok(text) if text.trim().is_empty() => {
            let _ = writeln!(out, "    log ({which}): empty");
        }
        Ok(text) => {
            let _ = writeln!(out, "    log ({which}), last {LOG_LINES} lines:");
            for line in text.lines() {
                let _ = writeln!(out, "      {line}");
            }
        }
        Err(e) => {
            let _ = writeln!(out, "    log ({which}): {}", first_line(&format!("{e:#}")));
        }
    }
}

fn events(p: &Product, ns: &str, out: &mut String) {
    let path = format!("/api/v1/namespaces/{ns}/events?fieldSelector=type%3DWarning");
    match p.get(&path) {
        Ok(list) => {
            // MissingClusterDNS is benign on these nodes (they run no cluster DNS) and repeats for every pod.
            let mut items: Vec<Value> = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["reason"] != "MissingClusterDNS")
                .cloned()
                .collect();
            items.sort_by(|a, b| {
                let at = |e: &Value| {
                    e["lastTimestamp"]
                        .as_str()
                        .or(e["eventTime"].as_str())
                        .unwrap_or("")
                        .to_string()
                };
                at(a).cmp(&at(b))
            });
            let skip = items.len().saturating_sub(EVENTS);
            let _ = writeln!(
                out,
                "warning events in {ns}: {} (the last {} shown)",
                items.len(),
                items.len() - skip
            );
            for e in &items[skip..] {
                let _ = writeln!(
                    out,
                    "- {} {}/{} x{}: {}",
                    e["reason"].as_str().unwrap_or("?"),
                    e["involvedObject"]["kind"].as_str().unwrap_or("?"),
                    e["involvedObject"]["name"].as_str().unwrap_or("?"),
                    e["count"].as_u64().unwrap_or(1),
                    e["message"].as_str().unwrap_or("").trim()
                );
            }
        }
        Err(e) => {
            let _ = writeln!(out, "warning events in {ns}: {e:#}");
        }
    }
}

/// Each node's conditions that are not as a healthy node has them (Ready True, the pressures False),
/// and its taints.
fn nodes(p: &Product, out: &mut String) {
    match p.get("/api/v1/nodes") {
        Ok(list) => {
            for n in list["items"].as_array().into_iter().flatten() {
                let mut odd = Vec::new();
                for c in n["status"]["conditions"].as_array().into_iter().flatten() {
                    let healthy = if c["type"] == "Ready" {
                        "True"
                    } else {
                        "False"
                    };
                    if c["status"] != healthy {
                        odd.push(format!(
                            "{}={} ({})",
                            c["type"].as_str().unwrap_or("?"),
                            c["status"].as_str().unwrap_or("?"),
                            c["message"].as_str().unwrap_or("")
                        ));
                    }
                }
                let taints: Vec<String> = n["spec"]["taints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| {
                        format!(
                            "{}:{}",
                            t["key"].as_str().unwrap_or("?"),
                            t["effect"].as_str().unwrap_or("?")
                        )
                    })
                    .collect();
                let _ = writeln!(
                    out,
                    "node {}: conditions {}, taints {}",
                    n["metadata"]["name"].as_str().unwrap_or("?"),
                    if odd.is_empty() {
                        "healthy".to_string()
                    } else {
                        odd.join("; ")
                    },
                    if taints.is_empty() {
                        "none".to_string()
                    } else {
                        taints.join(", ")
                    }
                );
            }
        }
        Err(e) => {
            let _ = writeln!(out, "nodes: {e:#}");
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}
