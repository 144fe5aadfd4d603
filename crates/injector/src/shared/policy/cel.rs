//! The policy's CEL: the variables and the JSONPatch mutation that splice a pod's own parts into the
//! configuration's fixed parts (`params::ParamsSpec`). The text depends on nothing of the configuration:
//! a new configuration changes only the params object.
//!
//! JSONPatch for every part, ApplyConfiguration for none. Per part:
//!
//! | part | patch | why not ApplyConfiguration |
//! | --- | --- | --- |
//! | `istio-init`/`istio-validation`, native `istio-proxy` | `add /spec/initContainers/0` (`/1`), or `/-` | a container's `args` and `command` are atomic lists: the API server refuses an apply configuration holding one ("may not mutate atomic arrays, maps or structs", k8s.io/apiserver `policy/mutating/patch/smd.go` `validatePatch`); and a new keyed item lands where structured-merge-diff's merge puts it (`typed/merge.go` `visitListItems`), not first as `reorderPod` puts it |
//! | classic `istio-proxy` | `add /spec/containers/0` (hold the application) or `/-` | the same |
//! | per-pod `args`, `env`, `image`, `resources` of both | `add <container>/args` …, after the container | `args` is atomic; `env` merges by name, and the per-pod entries must go between the fixed ones |
//! | rewritten probes and hooks (`ISTIO_KUBE_APP_PROBERS`' other half) | `add …/httpGet/port`, `remove …/tcpSocket`, `remove …/grpc` | an apply configuration cannot remove a field, and a probe's handler is a one-of |
//! | volumes, image pull secrets | `add /spec/volumes/<i>` before the pod's own | merged by name; a new item goes where the merge puts it, not before the pod's own |
//! | labels, annotations (status annotation, marker, Prometheus, default container) | `add /metadata/labels/<key>` … | would work as an apply configuration; kept as JSONPatch so that one mutation of one type carries the whole injection, in the webhook's order |
//!
//! Every list is patched by index (`/0`, `/-`), never replaced, so nothing of the pod's own is
//! re-encoded (the issue's trap: an `add` of `/spec/initContainers` replaces the pod's own list).
//!
//! Each piece mirrors the webhook's function named beside it; the differential through the API server
//! (`e2e/src/policy_differential`) is what shows they agree.

use super::params::{
    APP_CONTAINERS_ENV, CANONICAL_NAME_LABEL, CANONICAL_REVISION_LABEL, OWNER_ENV, PORTS_ENV,
    PROBERS_ENV, PROMETHEUS_ENV, SCRAPE_TARGETS_ANNOTATION, TLS_MODE_LABEL, TUNNEL_LABEL,
    WORKLOAD_NAME_ENV,
};
use super::params::{
    EXCLUDE_INBOUND_PORTS_ANNOTATION, EXCLUDE_INTERFACES_ANNOTATION,
    EXCLUDE_OUTBOUND_IP_RANGES_ANNOTATION, EXCLUDE_OUTBOUND_PORTS_ANNOTATION,
    INCLUDE_INBOUND_PORTS_ANNOTATION, INCLUDE_OUTBOUND_IP_RANGES_ANNOTATION,
    INCLUDE_OUTBOUND_PORTS_ANNOTATION, KUBEVIRT_INTERFACES_ANNOTATION,
    REROUTE_VIRTUAL_INTERFACES_ANNOTATION,
};
use inject::pod::{
    AGENT_LOG_LEVEL_ANNOTATION, COMPONENT_LOG_LEVEL_ANNOTATION, INTERCEPTION_MODE_ANNOTATION,
    LOG_LEVEL_ANNOTATION, MERGE_METRICS_ANNOTATION, NATIVE_SIDECAR_ANNOTATION,
    PROXY_CPU_ANNOTATION, PROXY_CPU_LIMIT_ANNOTATION, PROXY_IMAGE_ANNOTATION,
    PROXY_MEMORY_ANNOTATION, PROXY_MEMORY_LIMIT_ANNOTATION, REWRITE_PROBES_ANNOTATION,
    STATUS_ANNOTATION,
};

/// The annotation the policy adds to the pods it injects, so that the webhook (`injector
/// webhook-config --skip-policy-injected`, and `serve` itself) leaves them alone; its value is the
/// revision. The one part of a policy-injected pod the webhook does not write.
pub use inject::pod::POLICY_MARKER_ANNOTATION as MARKER_ANNOTATION;

/// One of the policy's `variables`.
pub struct Variable {
    pub name: &'static str,
    pub expression: String,
}

fn var(name: &'static str, expression: impl Into<String>) -> Variable {
    Variable {
        name,
        expression: expression.into(),
    }
}

/// A CEL string literal (single-quoted; the texts quoted here hold no quote or backslash).
fn lit(s: &str) -> String {
    debug_assert!(!s.contains('\'') && !s.contains('\\'));
    format!("'{s}'")
}

/// One JSONPatch operation as data, `[op, path, value]` (value `null` for `remove`): variables cannot
/// build `JSONPatch` objects, so the mutation turns these into them.
fn patch(op: &str, path: &str, value: Option<&str>) -> String {
    format!(
        "[dyn('{op}'), dyn({path}), dyn({})]",
        value.unwrap_or("null")
    )
}

/// `{"name": N, "value": V}` (an env entry).
fn env_entry(name: &str, value: &str) -> String {
    format!("{{'name': {}, 'value': {value}}}", lit(name))
}

/// The first non-empty of `labels` keys, else `fallback` (the templates' `default` chains).
fn first_label(keys: &[&str], fallback: &str) -> String {
    keys.iter().rev().fold(fallback.to_string(), |acc, k| {
        format!(
            "(variables.labels[?{k}].orValue('') != '' ? variables.labels[{k}] : {acc})",
            k = lit(k)
        )
    })
}

/// `jsonpatch.escapeKey` of a literal key, done here.
fn escape_key(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

/// The ops of `patchRewriteProbe` (`probes::rewrite_handler`) for the handler `h` at JSON path `base`
/// (CEL expressions), pointed at `url`; `grpc_too` for probes (hooks have no gRPC).
fn rewrite_ops(h: &str, base: &str, url: &str, grpc_too: bool) -> String {
    let port = "dyn(params.spec.statusPort)";
    let http = format!(
        "[{}, {}] + ({h}.httpGet.?scheme.orValue('') == 'HTTPS' ? [{}] : [])",
        patch("add", &format!("{base} + '/httpGet/port'"), Some(port)),
        patch("add", &format!("{base} + '/httpGet/path'"), Some(url)),
        patch(
            "replace",
            &format!("{base} + '/httpGet/scheme'"),
            Some("'HTTP'")
        ),
    );
    let to_http = patch(
        "add",
        &format!("{base} + '/httpGet'"),
        Some(&format!("{{'path': dyn({url}), 'port': {port}}}")),
    );
    let remove_tcp = format!(
        "('tcpSocket' in {h} ? [{}] : [])",
        patch("remove", &format!("{base} + '/tcpSocket'"), None)
    );
    if grpc_too {
        format!(
            "('httpGet' in {h} ? {http} : ('tcpSocket' in {h} || 'grpc' in {h}) ? {remove_tcp} + ('grpc' in {h} ? [{}] : []) + [{to_http}] : [])",
            patch("remove", &format!("{base} + '/grpc'"), None)
        )
    } else {
        format!(
            "('httpGet' in {h} ? {http} : 'tcpSocket' in {h} ? {remove_tcp} + [{to_http}] : [])"
        )
    }
}

/// The ops that set the resources of the container at `path` (a CEL string) to the resource
/// annotations' (`render::shared::resources`: the values' resources replaced whole). Built op by op:
/// a map literal with optional entries makes the 1.35 API server's CEL validator panic.
fn resource_ops(path: &str) -> String {
    let set = |k: &str, at: &str| {
        format!(
            "('{k}' in variables.annotations ? [{}] : [])",
            patch(
                "add",
                &format!("{path} + '/resources/{at}'"),
                Some(&format!("variables.annotations['{k}']"))
            )
        )
    };
    let block = |name: &str, cpu: &str, memory: &str| {
        format!(
            "('{cpu}' in variables.annotations || '{memory}' in variables.annotations ? [{}] + {} + {} : [])",
            patch("add", &format!("{path} + '/resources/{name}'"), Some("{}")),
            set(cpu, &format!("{name}/cpu")),
            set(memory, &format!("{name}/memory")),
        )
    };
    format!(
        "(variables.resources ? [{}] + {} + {} : [])",
        patch("add", &format!("{path} + '/resources'"), Some("{}")),
        block("requests", PROXY_CPU_ANNOTATION, PROXY_MEMORY_ANNOTATION),
        block(
            "limits",
            PROXY_CPU_LIMIT_ANNOTATION,
            PROXY_MEMORY_LIMIT_ANNOTATION
        ),
    )
}

/// Go's `strconv.ParseBool` of annotation `key`, else `fallback` (a CEL bool).
fn go_bool(key: &str, fallback: &str) -> String {
    format!(
        "variables.annotations[?'{key}'].orValue('') in ['1', 't', 'T', 'TRUE', 'true', 'True'] ? true : \
         variables.annotations[?'{key}'].orValue('') in ['0', 'f', 'F', 'FALSE', 'false', 'False'] ? false : {fallback}"
    )
}

/// A JSON string of a CEL string (the subset admits only strings that need no escaping).
fn json_str(s: &str) -> String {
    format!("'\"' + {s} + '\"'")
}

/// The `ISTIO_KUBE_APP_PROBERS` entry (`probes::prober_entry` printed as Go's `Prober`) of an element `e`
/// of the `handlers` variable (`[URL, handler, is a probe, the container's ports]`): a JSON text, or
/// `''` when there is nothing to record.
fn prober_entry() -> String {
    let h = "e[1]";
    let timeout = format!(
        "(e[2] && {h}.?timeoutSeconds.orValue(0) != 0 ? ',\"timeoutSeconds\":' + string({h}.timeoutSeconds) : '')"
    );
    // The action's port: a name resolves against the container's ports (the last of the name wins; none,
    // nothing recorded); a number equal to the status port is already the agent's.
    let resolved = |action: &str| {
        format!(
            "(type({action}.?port.orValue(0)) == string ? \
               e[3].filter(q, q.?name.orValue('') == {action}.port && has(q.containerPort)).map(q, q.containerPort) \
             : {action}.?port.orValue(0) == params.spec.statusPort ? [] : [{action}.?port.orValue(0)]).reverse()[?0]"
        )
    };
    let http = format!("{h}.httpGet");
    let http_json = format!(
        "{port}.optMap(port, '{{\"httpGet\":{{' + [\
            {http}.?path.orValue('') != '' ? '\"path\":' + {path} : '', \
            '\"port\":' + string(port), \
            {http}.?host.orValue('') != '' ? '\"host\":' + {host} : '', \
            {http}.?scheme.orValue('') != '' ? '\"scheme\":' + {scheme} : '', \
            {http}.?httpHeaders.orValue([]).size() > 0 ? '\"httpHeaders\":[' + {http}.httpHeaders.map(x, '{{\"name\":' + {hn} + ',\"value\":' + {hv} + '}}').join(',') + ']' : ''\
          ].filter(s, s != '').join(',') + '}}' + {timeout} + '}}').orValue('')",
        port = resolved(&http),
        path = json_str(&format!("{http}.path")),
        host = json_str(&format!("{http}.host")),
        scheme = json_str(&format!("{http}.scheme")),
        hn = json_str("x.?name.orValue('')"),
        hv = json_str("x.?value.orValue('')"),
    );
    let tcp = format!("{h}.tcpSocket");
    let tcp_json = format!(
        "{port}.optMap(port, '{{\"tcpSocket\":{{\"port\":' + string(port) + \
          ({tcp}.?host.orValue('') != '' ? ',\"host\":' + {host} : '') + '}}' + {timeout} + '}}').orValue('')",
        port = resolved(&tcp),
        host = json_str(&format!("{tcp}.host")),
    );
    let grpc_json = format!(
        "'{{\"grpc\":{{\"port\":' + string({h}.grpc.?port.orValue(0)) + ',\"service\":' + \
          ('service' in {h}.grpc ? {svc} : 'null') + '}}' + {timeout} + '}}'",
        svc = json_str(&format!("{h}.grpc.service")),
    );
    format!(
        "(e[2] && 'grpc' in {h}) ? {grpc_json} : 'httpGet' in {h} ? {http_json} : 'tcpSocket' in {h} ? {tcp_json} : ''"
    )
}

/// The probes and hooks `probes` rewrites: field, kind of the agent's URL.
const PROBES: &str =
    "[['readinessProbe', 'readyz'], ['livenessProbe', 'livez'], ['startupProbe', 'startupz']]";
const HOOKS: &str = "[['preStop', 'prestopz'], ['postStart', 'poststartz']]";

/// The policy's variables, in dependency order.
pub fn variables() -> Vec<Variable> {
    let workload_name = "variables.workload[2]";
    let mut v = vec![
        var("annotations", "object.metadata.?annotations.orValue({})"),
        var("labels", "object.metadata.?labels.orValue({})"),
        // The pod's choices among the configuration's variants: `sidecar.istio.io/interceptionMode`,
        // and `sidecar.istio.io/nativeSidecar` as the template reads it (non-empty decides, anything
        // but "false" is native).
        var(
            "native",
            format!(
                "variables.annotations[?'{NATIVE_SIDECAR_ANNOTATION}'].orValue('') != '' ? \
                 variables.annotations['{NATIVE_SIDECAR_ANNOTATION}'] != 'false' : params.spec.native"
            ),
        ),
        var(
            "variant",
            format!(
                "params.spec.variants[string(variables.annotations[?'{INTERCEPTION_MODE_ANNOTATION}'].orValue(params.spec.defaultMode))]\
                 [variables.native ? 'native' : 'classic']"
            ),
        ),
        // `sidecar.istio.io/rewriteAppHTTPProbers` and `prometheus.istio.io/merge-metrics` (Go's
        // ParseBool; anything else leaves the configuration's).
        var("rewrite", go_bool(REWRITE_PROBES_ANNOTATION, "params.spec.rewriteProbes")),
        var("merge", go_bool(MERGE_METRICS_ANNOTATION, "params.spec.prometheusMerge")),
        var("containers", "object.spec.?containers.orValue([])"),
        var("inits", "object.spec.?initContainers.orValue([])"),
        // Istio's `GetDeployMetaFromPod` (`workload::deploy_meta_from_pod`): [kind, apiVersion, name].
        var(
            "owner",
            "object.metadata.?generateName.orValue('') != '' ? \
             object.metadata.?ownerReferences.orValue([]).filter(r, r.?controller.orValue(false) == true) : []",
        ),
        var(
            "workload",
            r"variables.owner.size() == 0 ? ['Pod', 'v1', string(object.metadata.?name.orValue(''))] :
              variables.owner[0].?kind.orValue('') == 'ReplicaSet' && 'pod-template-hash' in variables.labels ?
                (variables.owner[0].?name.orValue('').endsWith('-' + variables.labels['pod-template-hash']) ?
                  ['Deployment', string(variables.owner[0].?apiVersion.orValue('')), string(variables.owner[0].name.substring(0, size(variables.owner[0].name) - size(variables.labels['pod-template-hash']) - 1))] :
                  ['ReplicaSet', string(variables.owner[0].?apiVersion.orValue('')), string(variables.owner[0].?name.orValue(''))]) :
              variables.owner[0].?kind.orValue('') == 'ReplicaSet' && 'rollouts-pod-template-hash' in variables.labels ?
                ['Rollout', 'v1alpha1', string(variables.owner[0].?name.orValue('').endsWith('-' + variables.labels['rollouts-pod-template-hash']) ?
                  variables.owner[0].name.substring(0, size(variables.owner[0].name) - size(variables.labels['rollouts-pod-template-hash']) - 1) :
                  variables.owner[0].?name.orValue(''))] :
              variables.owner[0].?kind.orValue('') == 'ReplicationController' && 'deploymentconfig' in variables.labels ?
                ['DeploymentConfig', string(variables.owner[0].?apiVersion.orValue('')), string(variables.labels['deploymentconfig'])] :
              variables.owner[0].?kind.orValue('') == 'Job' && variables.owner[0].?name.orValue('').matches('^(?s).+-[0-9]{8,10}$') ?
                ['CronJob', 'batch/v1', string(variables.owner[0].name.substring(0, variables.owner[0].name.lastIndexOf('-')))] :
              [string(variables.owner[0].?kind.orValue('')), string(variables.owner[0].?apiVersion.orValue('')), string(variables.owner[0].?name.orValue(''))]",
        ),
        var(
            "deployName",
            format!("string({workload_name} != '' ? {workload_name} : object.metadata.?name.orValue(''))"),
        ),
        // `PodMeta`: the canonical service labels (the sidecar template truncates the name to 63 and
        // trims `-_.`).
        var(
            "canonicalName",
            format!(
                "string((size({n}) > 63 ? {n}.substring(0, 63) : {n}).find('(?s)[^-_.](.*[^-_.])?'))",
                n = first_label(
                    &["service.istio.io/canonical-name", "app.kubernetes.io/name", "app"],
                    "variables.deployName"
                )
            ),
        ),
        var(
            "canonicalRevision",
            format!("string({})", first_label(
                &[
                    "service.istio.io/canonical-revision",
                    "app.kubernetes.io/version",
                    "version",
                ],
                "'latest'",
            )),
        ),
        var(
            "appNames",
            "variables.containers.map(c, c.?name.orValue('')).filter(n, n != '' && n != 'istio-proxy')",
        ),
        // `render::shared::pod_ports`: Go's `ContainerPort` JSON, one per line.
        var(
            "podPorts",
            r#"'[' + variables.containers.map(c, c.?ports.orValue([])).flatten().transformList(i, p, '\n    ' + (i > 0 ? ',' : '') + '{' + [
                p.?name.orValue('') != '' ? '"name":"' + p.name + '"' : '',
                p.?hostPort.orValue(0) != 0 ? '"hostPort":' + string(p.hostPort) : '',
                '"containerPort":' + string(p.?containerPort.orValue(0)),
                p.?protocol.orValue('') != '' ? '"protocol":"' + p.protocol + '"' : '',
                p.?hostIP.orValue('') != '' ? '"hostIP":"' + p.hostIP + '"' : ''
              ].filter(s, s != '').join(',') + '}').join('') + '\n]'"#,
        ),
        // `applyPrometheusMerge`: the app's scrape settings for the agent, unless the app opts out or
        // already points at the agent.
        var(
            "prometheus",
            "variables.merge && \
             !(variables.annotations[?'prometheus.io/scrape'].orValue('') in ['0', 'f', 'F', 'FALSE', 'false', 'False']) && \
             variables.annotations[?'prometheus.io/port'].orValue('') != string(params.spec.statusPort)",
        ),
        // `prometheus.istio.io/scrape-targets` as [port, path] pairs (`postprocess::scrape_targets`; the
        // subset admits only plain `port[:path]` entries, so a split is Istio's parse).
        var(
            "promTargets",
            format!(
                "variables.annotations[?{t}].orValue('') == '' ? [] : \
                 variables.annotations[{t}].split(',').map(e, e.split(':')).map(p, [p[0], p.size() > 1 && p[1] != '' ? p[1] : '/metrics'])",
                t = lit(SCRAPE_TARGETS_ANNOTATION)
            ),
        ),
        var(
            "prometheusEnv",
            format!(
                "variables.prometheus && (variables.promTargets.size() > 0 || ['prometheus.io/scrape', 'prometheus.io/port', 'prometheus.io/path'].exists(k, variables.annotations[?k].orValue('') != '')) ? \
                 [{}] : []",
                env_entry(
                    PROMETHEUS_ENV,
                    r#"'{"scrape":"' + variables.annotations[?'prometheus.io/scrape'].orValue('') + '","path":"' + (variables.promTargets.size() > 0 ? variables.promTargets[0][1] : variables.annotations[?'prometheus.io/path'].orValue('')) + '","port":"' + (variables.promTargets.size() > 0 ? variables.promTargets[0][0] : variables.annotations[?'prometheus.io/port'].orValue('')) + '"' + (variables.promTargets.size() > 0 ? ',"targets":[' + variables.promTargets.map(t, '{"port":"' + t[0] + '","path":"' + t[1] + '"}').join(',') + ']' : '') + '}'"#
                )
            ),
        ),
        // `DumpAppProbers`: every probe and hook of the pod's containers, as [URL, handler, is a probe,
        // the container's ports], then as [URL, entry], sorted.
        var(
            "handlers",
            format!(
                "(variables.inits + variables.containers).filter(c, c.?name.orValue('') != 'istio-proxy').map(c, \
                   {PROBES}.filter(p, p[0] in c).map(p, [dyn('/app-health/' + c.name + '/' + p[1]), dyn(c[p[0]]), dyn(true), dyn(c.?ports.orValue([]))]) + \
                   ('lifecycle' in c ? {HOOKS}.filter(p, p[0] in c.lifecycle).map(p, [dyn('/app-lifecycle/' + c.name + '/' + p[1]), dyn(c.lifecycle[p[0]]), dyn(false), dyn(c.?ports.orValue([]))]) : [])\
                 ).flatten()"
            ),
        ),
        var(
            "probers",
            format!(
                "variables.handlers.map(e, [string(e[0]), {}]).filter(e, e[1] != '').sortBy(e, e[0])",
                prober_entry()
            ),
        ),
        var(
            "probersEnv",
            format!(
                "variables.rewrite && variables.probers.size() > 0 ? [{}] : []",
                env_entry(
                    PROBERS_ENV,
                    r#"'{' + variables.probers.map(e, '"' + e[0] + '":' + e[1]).join(',') + '}'"#
                )
            ),
        ),
        var(
            "proxyEnv",
            format!(
                "variables.variant.proxyEnv.head + [{ports}, {apps}] + variables.variant.proxyEnv.middle + \
                 (variables.labels[?'service.istio.io/workload-name'].orValue('') != '' ? [{wl_label}] : \
                  variables.deployName != '' ? [{wl_name}] : []) + \
                 (variables.workload[1] != '' && variables.deployName != '' ? [{owner}] : []) + \
                 variables.variant.proxyEnv.tail + variables.prometheusEnv + variables.probersEnv",
                ports = env_entry(PORTS_ENV, "variables.podPorts"),
                apps = env_entry(APP_CONTAINERS_ENV, "variables.appNames.join(',')"),
                wl_label = env_entry(
                    WORKLOAD_NAME_ENV,
                    "string(variables.labels['service.istio.io/workload-name'])"
                ),
                wl_name = env_entry(WORKLOAD_NAME_ENV, "variables.deployName"),
                owner = env_entry(
                    OWNER_ENV,
                    "'kubernetes://apis/' + variables.workload[1] + '/namespaces/' + \
                     string(object.metadata.?namespace.orValue('') != '' ? object.metadata.namespace : 'default') + '/' + \
                     variables.workload[0].lowerAscii() + 's/' + variables.deployName"
                ),
            ),
        ),
    ];

    // The metadata: labels, then annotations, each map created when the pod has none.
    let label = |k: &str, value: &str| {
        patch(
            "add",
            &format!("'/metadata/labels/{}'", escape_key(k)),
            Some(value),
        )
    };
    let annotation = |k: &str, value: &str| {
        patch(
            "add",
            &format!("'/metadata/annotations/{}'", escape_key(k)),
            Some(value),
        )
    };
    v.push(var(
        "metadataOps",
        format!(
            "(has(object.metadata.labels) ? [] : [{new_labels}]) + \
             params.spec.labels.map(k, {fixed_label}) + \
             [{tls}, {name}, {revision}] + \
             (params.spec.tunnelLabel ? [{tunnel}] : []) + \
             (has(object.metadata.annotations) ? [] : [{new_annotations}]) + \
             variables.variant.annotations.map(k, {fixed_annotation}) + \
             (variables.appNames.size() > 0 && !('kubectl.kubernetes.io/default-logs-container' in variables.annotations) ? [{logs}] : []) + \
             (variables.appNames.size() > 0 && !('kubectl.kubernetes.io/default-container' in variables.annotations) ? [{default}] : []) + \
             (variables.prometheus ? [{prom_port}, {prom_path}, {prom_scrape}] : []) + \
             (variables.prometheus && {targets} in variables.annotations ? [{prom_targets}] : []) + \
             [{marker}]",
            new_labels = patch("add", "'/metadata/labels'", Some("{}")),
            fixed_label = patch(
                "add",
                "'/metadata/labels/' + k.replace('~', '~0').replace('/', '~1')",
                Some("params.spec.labels[k]")
            ),
            tls = label(
                TLS_MODE_LABEL,
                &format!(
                    "variables.labels[?{l}].orValue('') != '' ? variables.labels[{l}] : 'istio'",
                    l = lit(TLS_MODE_LABEL)
                )
            ),
            name = label(CANONICAL_NAME_LABEL, "variables.canonicalName"),
            revision = label(CANONICAL_REVISION_LABEL, "variables.canonicalRevision"),
            tunnel = label(
                TUNNEL_LABEL,
                &format!(
                    "variables.labels[?{l}].orValue('') != '' ? variables.labels[{l}] : 'http'",
                    l = lit(TUNNEL_LABEL)
                )
            ),
            new_annotations = patch("add", "'/metadata/annotations'", Some("{}")),
            fixed_annotation = patch(
                "add",
                "'/metadata/annotations/' + k.replace('~', '~0').replace('/', '~1')",
                Some("variables.variant.annotations[k]")
            ),
            logs = annotation(
                "kubectl.kubernetes.io/default-logs-container",
                "variables.appNames[0]"
            ),
            default = annotation(
                "kubectl.kubernetes.io/default-container",
                "variables.appNames[0]"
            ),
            prom_port = annotation("prometheus.io/port", "string(params.spec.statusPort)"),
            prom_path = annotation("prometheus.io/path", "'/stats/prometheus'"),
            prom_scrape = annotation("prometheus.io/scrape", "'true'"),
            targets = lit(SCRAPE_TARGETS_ANNOTATION),
            prom_targets = patch(
                "remove",
                &format!("'/metadata/annotations/{}'", escape_key(SCRAPE_TARGETS_ANNOTATION)),
                None
            ),
            marker = annotation(MARKER_ANNOTATION, "params.spec.revision"),
        ),
    ));
    let _ = STATUS_ANNOTATION; // written through the variant's fixed annotations

    // `patchRewriteProbe` on the pod's own containers, at their own indices (before anything is
    // inserted before them).
    let list_ops = |list: &str, var_name: &str| {
        format!(
            "variables.{var_name}.transformList(i, c, c.?name.orValue('') == 'istio-proxy' ? [] : \
               {PROBES}.filter(p, p[0] in c).map(p, {probe}).flatten() + \
               ('lifecycle' in c ? {HOOKS}.filter(p, p[0] in c.lifecycle).map(p, {hook}).flatten() : [])\
             ).flatten()",
            probe = rewrite_ops(
                "c[p[0]]",
                &format!("'/spec/{list}/' + string(i) + '/' + p[0]"),
                "'/app-health/' + c.name + '/' + p[1]",
                true
            ),
            hook = rewrite_ops(
                "c.lifecycle[p[0]]",
                &format!("'/spec/{list}/' + string(i) + '/lifecycle/' + p[0]"),
                "'/app-lifecycle/' + c.name + '/' + p[1]",
                false
            ),
        )
    };
    v.push(var(
        "probeOps",
        format!(
            "variables.rewrite ? {} + {} : []",
            list_ops("containers", "containers"),
            list_ops("initContainers", "inits")
        ),
    ));

    // The init container's arguments (`render::init_args`): the traffic annotations replace the
    // configuration's values, the status port is appended to the excluded inbound ports
    // (`exclude_inbound_port`), the agent's log level.
    let ann = |k: &str| format!("variables.annotations[?'{k}']");
    let exclude_inbound = format!(
        "(params.spec.initStatusPort == '' || params.spec.initStatusPort == '0' || \
           variables.annotations['{k}'].split(',').exists(e, e == params.spec.initStatusPort) ? \
           variables.annotations['{k}'] : \
           (variables.annotations['{k}'].split(',').map(e, e.trim()).filter(e, e != '') + [params.spec.initStatusPort]).join(','))",
        k = EXCLUDE_INBOUND_PORTS_ANNOTATION
    );
    v.push(var(
        "initArgs",
        format!(
            "!has(variables.variant.init) ? [] : \
             variables.variant.initArgs.head + \
             ['-i', string({i}.orValue(variables.variant.initArgs.includeIpRanges)), \
              '-x', string({x}.orValue(variables.variant.initArgs.excludeIpRanges)), \
              '-b', string({b}.orValue(variables.variant.initArgs.includeInboundPorts)), \
              '-d', string('{EXCLUDE_INBOUND_PORTS_ANNOTATION}' in variables.annotations ? ({d} == '' ? '15090,15021' : '15090,15021,' + {d}) : variables.variant.initArgs.excludeInbound)] + \
             ({q}.hasValue() ? ['-q', string({q}.value())] : has(variables.variant.initArgs.includeOutboundPorts) ? ['-q', string(variables.variant.initArgs.includeOutboundPorts)] : []) + \
             ({o}.hasValue() ? ['-o', string({o}.value())] : has(variables.variant.initArgs.excludeOutboundPorts) ? ['-o', string(variables.variant.initArgs.excludeOutboundPorts)] : []) + \
             ({reroute}.hasValue() ? ['-k', string({reroute}.value())] : {kubevirt}.hasValue() ? ['-k', string({kubevirt}.value())] : []) + \
             ({c}.hasValue() ? ['-c', string({c}.value())] : []) + \
             ['--log_output_level=' + string({agent}.orValue(variables.variant.initArgs.logLevel))] + \
             variables.variant.initArgs.tail",
            i = ann(INCLUDE_OUTBOUND_IP_RANGES_ANNOTATION),
            x = ann(EXCLUDE_OUTBOUND_IP_RANGES_ANNOTATION),
            b = ann(INCLUDE_INBOUND_PORTS_ANNOTATION),
            d = exclude_inbound,
            q = ann(INCLUDE_OUTBOUND_PORTS_ANNOTATION),
            o = ann(EXCLUDE_OUTBOUND_PORTS_ANNOTATION),
            reroute = ann(REROUTE_VIRTUAL_INTERFACES_ANNOTATION),
            kubevirt = ann(KUBEVIRT_INTERFACES_ANNOTATION),
            c = ann(EXCLUDE_INTERFACES_ANNOTATION),
            agent = ann(AGENT_LOG_LEVEL_ANNOTATION),
        ),
    ));
    // The proxy's arguments: the log levels of the annotations (`render::shared::proxy_args`).
    v.push(var(
        "proxyArgs",
        format!(
            "variables.variant.proxy.args.map(a, \
               a.startsWith('--proxyLogLevel=') && {l}.hasValue() ? '--proxyLogLevel=' + {l}.value() : \
               a.startsWith('--proxyComponentLogLevel=') && {cl}.hasValue() ? '--proxyComponentLogLevel=' + {cl}.value() : \
               a.startsWith('--log_output_level=') && {agent}.hasValue() ? '--log_output_level=' + {agent}.value() : a)",
            l = ann(LOG_LEVEL_ANNOTATION),
            cl = ann(COMPONENT_LOG_LEVEL_ANNOTATION),
            agent = ann(AGENT_LOG_LEVEL_ANNOTATION),
        ),
    ));
    // The resource annotations replace both containers' resources whole (`render::shared::resources`).
    v.push(var(
        "resources",
        format!(
            "[{}].exists(k, k in variables.annotations)",
            [
                PROXY_CPU_ANNOTATION,
                PROXY_MEMORY_ANNOTATION,
                PROXY_CPU_LIMIT_ANNOTATION,
                PROXY_MEMORY_LIMIT_ANNOTATION
            ]
            .map(lit)
            .join(", "),
        ),
    ));

    // `sidecar.istio.io/proxyImage` names both containers' image when it names a repository (holds a
    // `/`); otherwise the configuration's image stands (`render::image::choose`).
    v.push(var(
        "image",
        format!("variables.annotations[?'{PROXY_IMAGE_ANNOTATION}'].orValue('')"),
    ));
    // `reorderPod`: native, `istio-init` (or `istio-validation`) and `istio-proxy` first among the init
    // containers; otherwise `istio-validation` first, `istio-init` last, and `istio-proxy` last among
    // the containers (first when holding the application). Then the per-pod fields of each at its
    // index: the init container's arguments and resources, the proxy's environment, arguments and
    // resources.
    v.push(var(
        "initPath",
        "!has(variables.variant.init) ? '' : \
         variables.native || variables.variant.init.name == 'istio-validation' ? '/spec/initContainers/0' : \
         '/spec/initContainers/' + string(size(variables.inits))",
    ));
    v.push(var(
        "proxyPath",
        "variables.native ? '/spec/initContainers/' + (has(variables.variant.init) ? '1' : '0') : \
         params.spec.proxyFirst ? '/spec/containers/0' : '/spec/containers/' + string(size(variables.containers))",
    ));
    let field = |container: &str, name: &str, value: &str| {
        patch(
            "add",
            &format!("variables.{container}Path + '/{name}'"),
            Some(value),
        )
    };
    v.push(var(
        "containerOps",
        format!(
            "(has(object.spec.initContainers) ? [] : [{new_inits}]) + \
             (!has(variables.variant.init) ? [] : \
               [variables.native || variables.variant.init.name == 'istio-validation' ? {init_at_0} : {init_last}, {init_args}] + \
               (variables.image.contains('/') ? [{init_image}] : []) + \
               {init_resources}) + \
             [variables.native ? {proxy_native} : params.spec.proxyFirst ? {proxy_first} : {proxy_last}, \
              {proxy_env}, {proxy_args}] + \
             (variables.image.contains('/') ? [{proxy_image}] : []) + \
             {proxy_resources}",
            new_inits = patch("add", "'/spec/initContainers'", Some("[]")),
            init_at_0 = patch(
                "add",
                "'/spec/initContainers/0'",
                Some("variables.variant.init")
            ),
            init_last = patch(
                "add",
                "'/spec/initContainers/-'",
                Some("variables.variant.init")
            ),
            init_args = field("init", "args", "variables.initArgs"),
            init_image = field("init", "image", "variables.image"),
            proxy_image = field("proxy", "image", "variables.image"),
            init_resources = resource_ops("variables.initPath"),
            proxy_native = patch(
                "add",
                "variables.proxyPath",
                Some("variables.variant.proxy")
            ),
            proxy_first = patch(
                "add",
                "'/spec/containers/0'",
                Some("variables.variant.proxy")
            ),
            proxy_last = patch(
                "add",
                "'/spec/containers/-'",
                Some("variables.variant.proxy")
            ),
            proxy_env = field("proxy", "env", "variables.proxyEnv"),
            proxy_args = field("proxy", "args", "variables.proxyArgs"),
            proxy_resources = resource_ops("variables.proxyPath"),
        ),
    ));

    // The strategic merge puts the template's volumes and pull secrets before the pod's.
    let listed = |field: &str| {
        format!(
            "(size(params.spec.{field}) == 0 ? [] : has(object.spec.{field}) ? \
               params.spec.{field}.transformList(i, x, {at}) : [{whole}])",
            at = patch("add", &format!("'/spec/{field}/' + string(i)"), Some("x")),
            whole = patch(
                "add",
                &format!("'/spec/{field}'"),
                Some(&format!("params.spec.{field}"))
            ),
        )
    };
    v.push(var(
        "listOps",
        format!("{} + {}", listed("volumes"), listed("imagePullSecrets")),
    ));
    v
}

/// The operations' variables, in order.
const OPS: [&str; 4] = ["metadataOps", "probeOps", "containerOps", "listOps"];

/// The mutation: every operation, the removals first (they are of the pod's own probe handlers, at its
/// own indices: before anything is inserted before them), then the rest in order.
pub fn mutation() -> String {
    let all = OPS.map(|o| format!("variables.{o}")).join(" + ");
    format!(
        "({all}).filter(o, o[0] == 'remove').map(o, JSONPatch{{op: 'remove', path: string(o[1])}}) + \
         ({all}).filter(o, o[0] != 'remove').map(o, JSONPatch{{op: string(o[0]), path: string(o[1]), value: o[2]}})"
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_used_after_their_definition() {
        let vars = variables();
        for (i, v) in vars.iter().enumerate() {
            assert!(
                !vars[..i].iter().any(|w| w.name == v.name),
                "{} twice",
                v.name
            );
            // A variable refers only to variables defined before it.
            for w in &vars[i..] {
                assert!(
                    !v.expression.contains(&format!("variables.{}", w.name))
                        || vars[..i].iter().any(|u| u.name == w.name),
                    "{} uses {} before its definition",
                    v.name,
                    w.name
                );
            }
        }
        for name in OPS {
            assert!(vars.iter().any(|w| w.name == name), "{name}");
            assert!(mutation().contains(&format!("variables.{name}")), "{name}");
        }
    }

    #[test]
    fn brackets_balance() {
        for v in variables() {
            let mut depth: Vec<char> = Vec::new();
            let mut quote: Option<char> = None;
            let mut escaped = false;
            for ch in v.expression.chars() {
                if let Some(q) = quote {
                    if escaped {
                        escaped = false;
                    } else if ch == '\\' {
                        escaped = true;
                    } else if ch == q {
                        quote = None;
                    }
                    continue;
                }
                match ch {
                    '\'' | '"' => quote = Some(ch),
                    '(' | '[' | '{' => depth.push(ch),
                    ')' | ']' | '}' => {
                        let open = depth.pop();
                        let want = match ch {
                            ')' => '(',
                            ']' => '[',
                            _ => '{',
                        };
                        assert_eq!(open, Some(want), "{}: {}", v.name, v.expression);
                    }
                    _ => {}
                }
            }
            assert!(depth.is_empty() && quote.is_none(), "{}", v.name);
        }
    }
}
