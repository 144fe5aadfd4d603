//! The types Istio decodes its configuration into, as tables of (field, type): the MeshConfig
//! (`mesh/v1alpha1/config.proto`), its ProxyConfig (`mesh/v1alpha1/proxy.proto`, the mesh `defaultConfig`
//! and the `proxy.istio.io/config` annotation) and the injector `values` (operator `values_types.proto`).
//! Istio decodes them with jsonpb (`protomarshal.ApplyJSON`: unknown fields allowed, a known field of the
//! wrong type is an error), so a value the injector would otherwise misread (a mapping as `trustDomain`, a
//! string as `seccompProfile`) is refused when the file is loaded. Fields not in a table are kept as they
//! are, like the unknown fields jsonpb lets through.

use serde_json::Value;

use sidecar_core::fields::Fields;
use sidecar_core::validate::is_env_var_name;

/// A field's type, as jsonpb decodes it. `null` is accepted everywhere (jsonpb: the field stays unset).
#[derive(Debug)]
pub(crate) enum Ty {
    Str,
    Bool,
    /// `int32`, `uint32` (wrappers included): a JSON integer in the range.
    Int(i64, i64),
    /// `google.protobuf.Duration`: `"<seconds>[.<fraction>]s"`.
    Duration,
    /// An enum the injector reads: one of these names.
    Enum(&'static [&'static str]),
    /// An enum the injector does not read: a name or a number (jsonpb resolves it).
    EnumAny,
    /// `string` or a number, printed with `%v` (`values.global.tag`).
    StrOrNum,
    /// `map<string, string>`.
    StrMap,
    /// `proxyMetadata`: environment variable names (as Kubernetes validates a container's env) to strings.
    EnvMap,
    List(&'static Ty),
    /// A message whose listed fields are typed; other fields are kept.
    Msg(&'static [(&'static str, Ty)]),
    /// A message the injector does not look into, `google.protobuf.Struct`, or a Kubernetes object.
    Mapping,
    /// A Kubernetes `SeccompProfile` (`type` RuntimeDefault, Localhost or Unconfined; `localhostProfile`
    /// exactly with Localhost, as the API server validates a pod).
    Seccomp,
}

const INT32: Ty = Ty::Int(i32::MIN as i64, i32::MAX as i64);
const UINT32: Ty = Ty::Int(0, u32::MAX as i64);
const STRINGS: Ty = Ty::List(&Ty::Str);

/// Istio's ProxyConfig (`mesh/v1alpha1/proxy.proto`), every field.
pub(crate) const PROXY_CONFIG: Ty = Ty::Msg(&[
    ("configPath", Ty::Str),
    ("binaryPath", Ty::Str),
    ("serviceCluster", Ty::Str),
    (
        "tracingServiceName",
        Ty::Enum(&[
            "APP_LABEL_AND_NAMESPACE",
            "CANONICAL_NAME_ONLY",
            "CANONICAL_NAME_AND_NAMESPACE",
        ]),
    ),
    ("drainDuration", Ty::Duration),
    ("parentShutdownDuration", Ty::Duration),
    ("discoveryAddress", Ty::Str),
    ("discoveryRefreshDelay", Ty::Duration),
    ("zipkinAddress", Ty::Str),
    ("statsdUdpAddress", Ty::Str),
    ("envoyMetricsServiceAddress", Ty::Str),
    ("proxyAdminPort", INT32),
    ("availabilityZone", Ty::Str),
    ("controlPlaneAuthPolicy", Ty::Enum(&["NONE", "MUTUAL_TLS"])),
    ("customConfigFile", Ty::Str),
    ("statNameLength", INT32),
    ("concurrency", INT32),
    ("proxyBootstrapTemplatePath", Ty::Str),
    (
        "interceptionMode",
        Ty::Enum(&["REDIRECT", "TPROXY", "NONE"]),
    ),
    ("tracing", Ty::Mapping),
    ("sds", Ty::Mapping),
    ("envoyAccessLogService", Ty::Mapping),
    ("envoyMetricsService", Ty::Mapping),
    ("proxyMetadata", Ty::EnvMap),
    ("runtimeValues", Ty::StrMap),
    ("statusPort", INT32),
    ("extraStatTags", STRINGS),
    ("gatewayTopology", Ty::Mapping),
    ("terminationDrainDuration", Ty::Duration),
    ("meshId", Ty::Str),
    ("readinessProbe", Ty::Mapping),
    ("proxyStatsMatcher", Ty::Mapping),
    ("holdApplicationUntilProxyStarts", Ty::Bool),
    ("caCertificatesPem", STRINGS),
    ("image", Ty::Msg(&[("imageType", Ty::Str)])),
    ("privateKeyProvider", Ty::Mapping),
    ("proxyHeaders", Ty::Mapping),
    ("fileFlushInterval", Ty::Duration),
    ("fileFlushMinSizeKb", UINT32),
    ("statsCompression", Ty::Bool),
    ("connectionSettings", Ty::Mapping),
]);

/// Istio's MeshConfig (`mesh/v1alpha1/config.proto`): every scalar field, and the messages the injector
/// reads into.
pub(crate) const MESH_CONFIG: Ty = Ty::Msg(&[
    // Ports the init container's arguments carry: a port, 0 not allowed.
    ("proxyListenPort", Ty::Int(1, 65535)),
    ("proxyInboundListenPort", Ty::Int(1, 65535)),
    ("proxyHttpPort", INT32),
    ("connectTimeout", Ty::Duration),
    ("protocolDetectionTimeout", Ty::Duration),
    (
        "tcpKeepalive",
        Ty::Msg(&[
            ("probes", UINT32),
            ("time", Ty::Duration),
            ("interval", Ty::Duration),
        ]),
    ),
    ("ingressClass", Ty::Str),
    ("ingressService", Ty::Str),
    ("ingressControllerMode", Ty::EnumAny),
    ("ingressSelector", Ty::Str),
    ("enableTracing", Ty::Bool),
    ("accessLogFile", Ty::Str),
    ("accessLogFormat", Ty::Str),
    ("accessLogEncoding", Ty::EnumAny),
    ("enableEnvoyAccessLogService", Ty::Bool),
    ("disableEnvoyListenerLog", Ty::Bool),
    ("defaultConfig", PROXY_CONFIG),
    ("outboundTrafficPolicy", Ty::Msg(&[("mode", Ty::EnumAny)])),
    (
        "inboundTrafficPolicy",
        Ty::Msg(&[("mode", Ty::Enum(&["PASSTHROUGH", "LOCALHOST"]))]),
    ),
    ("configSources", Ty::List(&Ty::Mapping)),
    ("enableAutoMtls", Ty::Bool),
    ("trustDomain", Ty::Str),
    ("trustDomainAliases", STRINGS),
    ("defaultServiceExportTo", STRINGS),
    ("defaultVirtualServiceExportTo", STRINGS),
    ("defaultDestinationRuleExportTo", STRINGS),
    ("rootNamespace", Ty::Str),
    ("localityLbSetting", Ty::Mapping),
    ("dnsRefreshRate", Ty::Duration),
    ("h2UpgradePolicy", Ty::EnumAny),
    ("inboundClusterStatName", Ty::Str),
    ("outboundClusterStatName", Ty::Str),
    ("certificates", Ty::List(&Ty::Mapping)),
    ("serviceSettings", Ty::List(&Ty::Mapping)),
    ("enablePrometheusMerge", Ty::Bool),
    ("verifyCertificateAtClient", Ty::Bool),
    ("ca", Ty::Mapping),
    (
        "extensionProviders",
        Ty::List(&Ty::Msg(&[
            ("name", Ty::Str),
            ("opentelemetry", Ty::Mapping),
        ])),
    ),
    (
        "defaultProviders",
        Ty::Msg(&[
            ("tracing", STRINGS),
            ("metrics", STRINGS),
            ("accessLogging", STRINGS),
        ]),
    ),
    ("discoverySelectors", Ty::List(&Ty::Mapping)),
    ("pathNormalization", Ty::Mapping),
    ("defaultHttpRetryPolicy", Ty::Mapping),
    ("meshMTLS", Ty::Mapping),
    ("tlsDefaults", Ty::Mapping),
]);

/// `resources` blocks of the values (`values_types.proto` `Resources`; quantities are checked by the
/// caller).
const RESOURCES: Ty = Ty::Msg(&[("limits", Ty::Mapping), ("requests", Ty::Mapping)]);

/// The injector `values` (operator `values_types.proto`): every field the built-in templates, the engine
/// and the chart's injector ConfigMap read.
pub(crate) const VALUES: Ty = Ty::Msg(&[
    (
        "global",
        Ty::Msg(&[
            ("hub", Ty::Str),
            ("tag", Ty::StrOrNum),
            ("variant", Ty::Str),
            ("imagePullPolicy", Ty::Str),
            ("imagePullSecrets", STRINGS),
            ("istioNamespace", Ty::Str),
            ("logAsJson", Ty::Bool),
            ("logging", Ty::Msg(&[("level", Ty::Str)])),
            ("meshID", Ty::Str),
            ("mountMtlsCerts", Ty::Bool),
            (
                "multiCluster",
                Ty::Msg(&[("enabled", Ty::Bool), ("clusterName", Ty::Str)]),
            ),
            ("network", Ty::Str),
            ("nativeNftables", Ty::Bool),
            ("pilotCertProvider", Ty::Str),
            ("caAddress", Ty::Str),
            ("caName", Ty::Str),
            ("trustBundleName", Ty::Str),
            ("trustDomain", Ty::Str),
            ("sts", Ty::Msg(&[("servicePort", UINT32)])),
            ("sds", Ty::Msg(&[("token", Ty::Msg(&[("aud", Ty::Str)]))])),
            (
                "proxy",
                Ty::Msg(&[
                    ("autoInject", Ty::Str),
                    ("clusterDomain", Ty::Str),
                    ("componentLogLevel", Ty::Str),
                    ("enableCoreDump", Ty::Bool),
                    ("excludeIPRanges", Ty::Str),
                    ("excludeInboundPorts", Ty::Str),
                    ("excludeOutboundPorts", Ty::Str),
                    ("includeIPRanges", Ty::Str),
                    ("includeInboundPorts", Ty::Str),
                    ("includeOutboundPorts", Ty::Str),
                    ("image", Ty::Str),
                    ("logLevel", Ty::Str),
                    ("outlierLogPath", Ty::Str),
                    ("privileged", Ty::Bool),
                    ("readinessInitialDelaySeconds", UINT32),
                    ("readinessPeriodSeconds", UINT32),
                    ("readinessFailureThreshold", UINT32),
                    (
                        "startupProbe",
                        Ty::Msg(&[("enabled", Ty::Bool), ("failureThreshold", UINT32)]),
                    ),
                    // A port (uint32 in the proto): it reaches the init container's `-d`.
                    ("statusPort", Ty::Int(0, 65535)),
                    ("resources", RESOURCES),
                    ("tracer", Ty::Str),
                    ("lifecycle", Ty::Mapping),
                    ("holdApplicationUntilProxyStarts", Ty::Bool),
                    ("seccompProfile", Ty::Seccomp),
                ]),
            ),
            (
                "proxy_init",
                Ty::Msg(&[
                    ("image", Ty::Str),
                    ("forceApplyIptables", Ty::Bool),
                    ("resources", RESOURCES),
                ]),
            ),
        ]),
    ),
    (
        "pilot",
        Ty::Msg(&[
            (
                "cni",
                Ty::Msg(&[("enabled", Ty::Bool), ("provider", Ty::Str)]),
            ),
            ("env", Ty::Mapping),
            ("crlConfigMapName", Ty::Str),
        ]),
    ),
    (
        "sidecarInjectorWebhook",
        Ty::Msg(&[
            ("rewriteAppHTTPProbe", Ty::Bool),
            ("enableNamespacesByDefault", Ty::Bool),
            ("reinvocationPolicy", Ty::Str),
            ("injectionURL", Ty::Str),
            ("templates", Ty::Mapping),
            ("defaultTemplates", STRINGS),
            ("injectedAnnotations", Ty::StrMap),
            ("neverInjectSelector", Ty::List(&Ty::Mapping)),
            ("alwaysInjectSelector", Ty::List(&Ty::Mapping)),
        ]),
    ),
    (
        "gateways",
        Ty::Msg(&[
            ("securityContext", Ty::Mapping),
            ("seccompProfile", Ty::Mapping),
        ]),
    ),
    ("revision", Ty::Str),
]);

/// A field whose value its type does not take: the dotted field path, the value, and what was expected.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TypeError {
    pub field: String,
    pub value: Value,
    pub reason: String,
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn wrong(field: &str, value: &Value, reason: impl Into<String>) -> TypeError {
    TypeError {
        field: field.to_string(),
        value: value.clone(),
        reason: reason.into(),
    }
}

/// Checks `v` (at dotted path `field`) against `ty`; the first field that does not fit is the error.
pub(crate) fn check(ty: &Ty, v: &Value, field: &str) -> Result<(), TypeError> {
    if v.is_null() {
        return Ok(());
    }
    let ok = match ty {
        Ty::Str => v.is_string(),
        Ty::Bool => v.is_boolean(),
        Ty::StrOrNum => v.is_string() || v.is_number(),
        Ty::Int(min, max) => {
            let n = v.as_i64().or_else(|| v.as_u64().map(|_| i64::MAX));
            if !n.is_some_and(|n| (*min..=*max).contains(&n)) {
                return Err(wrong(
                    field,
                    v,
                    format!("expected an integer in {min}..={max}"),
                ));
            }
            true
        }
        Ty::Duration => {
            if v.as_str()
                .and_then(sidecar_core::proto_duration::parse_duration_nanos)
                .is_none()
            {
                return Err(wrong(
                    field,
                    v,
                    "expected a duration in seconds, such as \"5s\" or \"1.5s\"",
                ));
            }
            true
        }
        Ty::Enum(names) => {
            if !v.as_str().is_some_and(|s| names.contains(&s)) {
                return Err(wrong(
                    field,
                    v,
                    format!("expected one of {}", names.join(", ")),
                ));
            }
            true
        }
        Ty::EnumAny => v.is_string() || v.is_i64(),
        Ty::StrMap | Ty::EnvMap => {
            let Some(m) = v.as_object() else {
                return Err(wrong(field, v, "expected a mapping of strings"));
            };
            for (k, val) in m {
                if matches!(ty, Ty::EnvMap) && !is_env_var_name(k) {
                    return Err(wrong(
                        field,
                        &Value::String(k.clone()),
                        "is not a valid environment variable name (not empty, printable ASCII, \
                         no '=')",
                    ));
                }
                if !val.is_string() {
                    return Err(wrong(&join(field, k), val, "expected a string"));
                }
            }
            true
        }
        Ty::List(item) => {
            let Some(items) = v.as_array() else {
                return Err(wrong(field, v, "expected a list"));
            };
            for (i, x) in items.iter().enumerate() {
                check(item, x, &format!("{field}[{i}]"))?;
            }
            true
        }
        Ty::Msg(fields) => {
            let Some(m) = v.as_object() else {
                return Err(wrong(field, v, "expected a mapping"));
            };
            for (name, fty) in *fields {
                if let Some(x) = m.field(name) {
                    check(fty, x, &join(field, name))?;
                }
            }
            true
        }
        Ty::Mapping => v.is_object(),
        Ty::Seccomp => return check_seccomp(v, field),
    };
    if ok {
        Ok(())
    } else {
        Err(wrong(field, v, format!("expected {}", describe(ty))))
    }
}

fn describe(ty: &Ty) -> &'static str {
    match ty {
        Ty::Str => "a string",
        Ty::Bool => "a boolean",
        Ty::StrOrNum => "a string or a number",
        Ty::EnumAny => "an enum name",
        Ty::Mapping | Ty::Msg(_) | Ty::Seccomp => "a mapping",
        _ => "another type",
    }
}

fn check_seccomp(v: &Value, field: &str) -> Result<(), TypeError> {
    let Some(m) = v.as_object() else {
        return Err(wrong(
            field,
            v,
            "expected a mapping (a Kubernetes SeccompProfile)",
        ));
    };
    let localhost = m.field("localhostProfile").filter(|p| !p.is_null());
    if let Some(p) = localhost {
        if !p.is_string() {
            return Err(wrong(
                &join(field, "localhostProfile"),
                p,
                "expected a string",
            ));
        }
    }
    // `seccompProfile: {}` is the chart default: the template leaves the field out.
    if m.values().all(Value::is_null) {
        return Ok(());
    }
    match (m.field("type").and_then(Value::as_str), localhost) {
        (Some("Localhost"), Some(_)) | (Some("RuntimeDefault" | "Unconfined"), None) => Ok(()),
        (Some("Localhost"), None) => {
            Err(wrong(field, v, "type Localhost needs a localhostProfile"))
        }
        (Some("RuntimeDefault" | "Unconfined"), Some(_)) => Err(wrong(
            field,
            v,
            "localhostProfile is only allowed with type Localhost",
        )),
        _ => Err(wrong(
            &join(field, "type"),
            m.field("type").unwrap_or(&Value::Null),
            "expected RuntimeDefault, Localhost or Unconfined",
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(ty: &Ty, v: Value) -> TypeError {
        check(ty, &v, "").unwrap_err()
    }

    #[test]
    fn the_builtin_documents_fit_their_types() {
        check(&VALUES, crate::defaults::builtin_values(), "").unwrap();
        check(&MESH_CONFIG, crate::defaults::builtin_mesh(), "").unwrap();
        check(&PROXY_CONFIG, &crate::defaults::builtin_proxy_config(), "").unwrap();
    }

    #[test]
    fn wrong_types_name_the_field_and_value() {
        let e = err(&MESH_CONFIG, json!({"trustDomain": {"a": 1}}));
        assert_eq!(
            (e.field.as_str(), e.value, e.reason.as_str()),
            ("trustDomain", json!({"a": 1}), "expected a string")
        );
        let e = err(
            &VALUES,
            json!({"global": {"proxy": {"seccompProfile": "str"}}}),
        );
        assert_eq!(e.field, "global.proxy.seccompProfile");
        assert_eq!(e.value, json!("str"));
        for (doc, field) in [
            (
                json!({"defaultConfig": {"drainDuration": "1m"}}),
                "defaultConfig.drainDuration",
            ),
            (
                json!({"defaultConfig": {"statusPort": 1.5}}),
                "defaultConfig.statusPort",
            ),
            (
                json!({"defaultConfig": {"concurrency": "2"}}),
                "defaultConfig.concurrency",
            ),
            (
                json!({"enablePrometheusMerge": "yes"}),
                "enablePrometheusMerge",
            ),
            (
                json!({"inboundTrafficPolicy": {"mode": "BOGUS"}}),
                "inboundTrafficPolicy.mode",
            ),
            (
                json!({"extensionProviders": [{"name": 3}]}),
                "extensionProviders[0].name",
            ),
            (json!({"rootNamespace": ["a"]}), "rootNamespace"),
            (
                json!({"defaultConfig": {"image": {"imageType": 1}}}),
                "defaultConfig.image.imageType",
            ),
        ] {
            assert_eq!(err(&MESH_CONFIG, doc.clone()).field, field, "{doc}");
        }
        for (doc, field) in [
            (
                json!({"global": {"proxy": {"privileged": "true"}}}),
                "global.proxy.privileged",
            ),
            (
                json!({"global": {"proxy": {"statusPort": -1}}}),
                "global.proxy.statusPort",
            ),
            (
                json!({"global": {"sts": {"servicePort": "x"}}}),
                "global.sts.servicePort",
            ),
            (
                json!({"global": {"proxy": {"lifecycle": "x"}}}),
                "global.proxy.lifecycle",
            ),
            (
                json!({"global": {"imagePullSecrets": [{"name": "a"}]}}),
                "global.imagePullSecrets[0]",
            ),
            (
                json!({"pilot": {"cni": {"enabled": 1}}}),
                "pilot.cni.enabled",
            ),
            (
                json!({"sidecarInjectorWebhook": {"injectedAnnotations": {"a": 1}}}),
                "sidecarInjectorWebhook.injectedAnnotations.a",
            ),
            (json!({"global": "x"}), "global"),
            (json!({"revision": 1}), "revision"),
        ] {
            assert_eq!(err(&VALUES, doc.clone()).field, field, "{doc}");
        }
        // Unknown fields and nulls pass, as jsonpb lets them.
        check(
            &MESH_CONFIG,
            &json!({"someFutureField": {"x": 1}, "trustDomain": null}),
            "",
        )
        .unwrap();
        check(
            &VALUES,
            &json!({"global": {"proxy": {"capNetBindService": true}}, "x": 1}),
            "",
        )
        .unwrap();
    }

    #[test]
    fn env_names_are_checked_as_kubernetes_does() {
        for good in ["A B", "1A", "ISTIO_META_X.y-z", "a:b"] {
            check(&PROXY_CONFIG, &json!({"proxyMetadata": {good: "v"}}), "").unwrap();
        }
        for bad in ["A\tB", "", "A\nB", "A=B", "\u{e4}"] {
            let e = err(&PROXY_CONFIG, json!({"proxyMetadata": {bad: "v"}}));
            assert_eq!(
                (e.field.as_str(), e.value),
                ("proxyMetadata", json!(bad)),
                "{bad:?}"
            );
        }
        check(
            &PROXY_CONFIG,
            &json!({"proxyMetadata": {"ISTIO_META_X": "1", "a.b-c": "", "_x": "y"}}),
            "",
        )
        .unwrap();
    }

    #[test]
    fn seccomp_profiles_as_the_api_server_takes_them() {
        let ty = &Ty::Seccomp;
        for ok in [
            json!({}),
            json!({"type": "RuntimeDefault"}),
            json!({"type": "Unconfined"}),
            json!({"type": "Localhost", "localhostProfile": "p.json"}),
        ] {
            check(ty, &ok, "s").unwrap();
        }
        for (bad, field) in [
            (json!("str"), "s"),
            (json!({"type": "Bogus"}), "s.type"),
            (json!({"type": "Localhost"}), "s"),
            (
                json!({"type": "RuntimeDefault", "localhostProfile": "p"}),
                "s",
            ),
            (json!({"localhostProfile": "p"}), "s.type"),
            (json!({"foo": 1}), "s.type"),
            (
                json!({"type": "Localhost", "localhostProfile": 1}),
                "s.localhostProfile",
            ),
        ] {
            assert_eq!(check(ty, &bad, "s").unwrap_err().field, field, "{bad}");
        }
    }
}
