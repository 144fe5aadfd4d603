//! Fields of Istio's template data: missing keys, nil, Go zero values, the proto getters, and arguments
//! of the wrong type.

use super::support::*;

#[test]
fn missing_keys_and_nil() {
    renders(&[
        (
            "[{{ index .Spec.NodeSelector \"x\" }}][{{ index .ProxyConfig.ProxyMetadata \"x\" }}]",
            "[][]",
        ),
        ("{{ .Spec.NodeSelector.x }}", "<no value>"),
        ("{{ .Values.missing }}", "<no value>"),
        ("{{ .Values.missing.deeper }}", "<no value>"),
        ("{{ .Values.nullv }}", "<no value>"),
        ("{{ .ObjectMeta.Labels.nope }}", "<no value>"),
    ]);
    assert_eq!(
        exec_msg("{{ .Values.nullv.b }}"),
        "nil pointer evaluating interface {}.b"
    );
    renders(&[
        ("{{ index .Values \"missing\" }}", "<no value>"),
        ("[{{ index .ObjectMeta.Annotations \"nope\" }}]", "[]"),
        ("{{ if .Values.missing }}y{{ else }}n{{ end }}", "n"),
        ("{{ .Values.missing | quote }}", ""),
        ("{{ toJSON .Values.missing }}", "{}"),
    ]);
}

#[test]
fn struct_fields_and_zero_values() {
    renders(&[
        (
            "{{ .DeploymentMeta.Name }}.{{ .DeploymentMeta.Namespace }}",
            "hello.default",
        ),
        (
            "[{{ .ObjectMeta.Name }}]{{ .ObjectMeta.GenerateName }}",
            "[]hello-",
        ),
        ("{{ .TypeMeta.APIVersion }} {{ .TypeMeta.Kind }}", "v1 Pod"),
        ("{{ .ObjectMeta.Labels.app }}", "hello"),
        (
            "{{ index .ObjectMeta.Annotations `sidecar.istio.io/proxyCPU` }}",
            "200m",
        ),
        ("{{ .ObjectMeta.OwnerReferences }}", "[]"),
        ("{{ .Spec.NodeSelector }}", "map[]"),
    ]);
    // k8s.io/api's generated String() returns "nil" for a nil receiver, and fmt calls it.
    renders(&[
        ("{{ .Spec.SecurityContext }}", "nil"),
        (
            "{{ .Spec.HostNetwork }} {{ .ProxyGID }} {{ .ProxyUID }}",
            "false 0 1337",
        ),
        ("{{ (index .Spec.Containers 0).Name }}", "hello"),
        (
            "{{ (index (index .Spec.Containers 0).Ports 0).ContainerPort }}",
            "80",
        ),
        (
            "{{ .Spec.ServiceAccountName }} {{ .Revision }} {{ .NativeSidecars }}",
            "default default true",
        ),
    ]);
    for (input, want) in [
        (
            "{{ .Spec.SecurityContext.RunAsUser }}",
            "nil pointer evaluating *v1.PodSecurityContext.RunAsUser",
        ),
        (
            "{{ .Foo }}",
            "can't evaluate field Foo in type inject.SidecarTemplateData",
        ),
        (
            "{{ .Revision.Foo }}",
            "can't evaluate field Foo in type string",
        ),
        (
            "{{ index .Spec.Containers 5 }}",
            "error calling index: index out of range: 5",
        ),
    ] {
        assert_eq!(exec_msg(input), want, "{input:?}");
    }
    assert_unsupported(&["{{ .Spec.Overhead }}"]);
}

#[test]
fn proxy_config_fields_and_getters() {
    renders(&[
        ("{{ printf \"%s|%q|%d|%v\" .ProxyConfig.InterceptionMode .ProxyConfig.InterceptionMode .ProxyConfig.InterceptionMode .ProxyConfig.InterceptionMode }}", "REDIRECT|\"REDIRECT\"|0|REDIRECT"),
        ("{{ quote .ProxyConfig.InterceptionMode }}", "\"REDIRECT\""),
        ("{{ .ProxyConfig.InterceptionMode }}", "REDIRECT"),
        ("{{ .ProxyConfig.InterceptionMode.String }}", "REDIRECT"),
        ("{{ eq .ProxyConfig.InterceptionMode 0 }}", "true"),
        ("{{ .ProxyConfig.Concurrency.GetValue }}", "2"),
        ("{{ .ProxyConfig.HoldApplicationUntilProxyStarts.GetValue }}", "false"),
        ("[{{ .ProxyConfig.GetImage.GetImageType }}]", "[]"),
        ("{{ .ProxyConfig.ProxyMetadata.DNS_CAPTURE }} {{ .ProxyConfig.StatusPort }}", "true 15020"),
        ("{{ .MeshConfig.TrustDomain }} {{ .MeshConfig.DefaultConfig }}", "cluster.local <nil>"),
        ("{{ .MeshConfig.EnablePrometheusMerge.GetValue }}", "false"),
    ]);
    assert_unsupported(&["{{ .ProxyConfig }}", "{{ index .Spec.Containers 0 }}"]);
}

#[test]
fn wrong_arguments_are_errors() {
    for (input, want) in [
        (
            "{{ toLower .Values.missing }}",
            "invalid value; expected string",
        ),
        ("{{ toLower 1 }}", "expected string; found a number"),
        (
            "{{ indent 2 }}",
            "wrong number of args for indent: want 2 got 1",
        ),
    ] {
        assert_eq!(exec_msg(input), want, "{input:?}");
    }
}
