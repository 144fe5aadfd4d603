//! The Go types of Istio's template data (`SidecarTemplateData` in Istio's `inject.go` and the Kubernetes
//! and mesh-config types it holds), as far as the evaluator models them: Go field name, JSON key and type,
//! so absent JSON keys get their Go zero value and the Go name of a type appears in errors as in Go.

/// Integer widths, for Go's type names in `printf` diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IntK {
    Int,
    Int32,
    Int64,
    Uint8,
}

impl IntK {
    pub fn go_name(self) -> &'static str {
        match self {
            IntK::Int => "int",
            IntK::Int32 => "int32",
            IntK::Int64 => "int64",
            IntK::Uint8 => "uint8",
        }
    }
}

/// A Go type.
#[derive(Debug)]
pub(crate) enum Ty {
    Str,
    Int(IntK),
    Bool,
    /// `interface{}` holding a JSON-decoded value (`map[string]any`, `[]any`, float64, string, bool, nil).
    Any,
    /// `map[string]any` (nil when absent).
    MapAny,
    /// `map[string]string` (nil when absent).
    MapStr,
    /// A map whose values print as Go structs (`map[ResourceName]Quantity`).
    MapOpaque(&'static str),
    Slice(&'static Ty, &'static str),
    Ptr(&'static Ty),
    Struct(&'static StructTy),
    Enum(&'static EnumTy),
    /// A protobuf wrapper (`*wrapperspb.Int32Value`): JSON holds the bare value.
    Wrapper(&'static Ty, &'static str),
    /// A struct whose fields are not modelled: usable in `if`/`with`/`toYaml`, refused for fields and `%v`.
    Opaque(&'static str),
}

/// A struct type: Go name, whether it is a proto message (getters `GetX`), fields.
#[derive(Debug)]
pub(crate) struct StructTy {
    pub go: &'static str,
    pub proto: bool,
    /// True when every Go field is listed (other names are Go's "can't evaluate field").
    pub complete: bool,
    pub fields: &'static [Field],
}

/// A struct field: Go name, JSON key, type, and whether Go's `encoding/json` writes it even when it is
/// the zero value (no `omitempty`, or a non-pointer struct).
#[derive(Debug)]
pub(crate) struct Field {
    pub go: &'static str,
    pub json: &'static str,
    pub ty: &'static Ty,
    pub always: bool,
}

/// An enum: Go name and value names by number.
#[derive(Debug)]
pub(crate) struct EnumTy {
    pub go: &'static str,
    pub names: &'static [&'static str],
}

impl StructTy {
    pub fn field(&self, go: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.go == go)
    }
}

const fn f(go: &'static str, json: &'static str, ty: &'static Ty) -> Field {
    Field {
        go,
        json,
        ty,
        always: false,
    }
}

/// A field without `omitempty`.
const fn fa(go: &'static str, json: &'static str, ty: &'static Ty) -> Field {
    Field {
        go,
        json,
        ty,
        always: true,
    }
}

pub(crate) static STR: Ty = Ty::Str;
pub(crate) static BOOL: Ty = Ty::Bool;
pub(crate) static INT32: Ty = Ty::Int(IntK::Int32);
pub(crate) static INT64: Ty = Ty::Int(IntK::Int64);
pub(crate) static ANY: Ty = Ty::Any;
pub(crate) static MAP_ANY: Ty = Ty::MapAny;
pub(crate) static MAP_STR: Ty = Ty::MapStr;
static SLICE_STR: Ty = Ty::Slice(&STR, "[]string");
static SLICE_INT64: Ty = Ty::Slice(&INT64, "[]int64");
static PTR_BOOL: Ty = Ty::Ptr(&BOOL);
static PTR_INT64: Ty = Ty::Ptr(&INT64);
static PTR_INT32: Ty = Ty::Ptr(&INT32);
static PTR_STR: Ty = Ty::Ptr(&STR);
static QUANTITIES: Ty = Ty::MapOpaque("v1.ResourceList");

macro_rules! opaque_ptr {
    ($name:ident, $go:expr) => {
        static $name: Ty = Ty::Ptr(&Ty::Opaque($go));
    };
}
opaque_ptr!(EXEC_ACTION, "v1.ExecAction");
/// `intstr.IntOrString`: written as the pod gives it (an integer or a string).
static INT_OR_STRING: Ty = Ty::Opaque("intstr.IntOrString");

static HTTP_HEADER: Ty = Ty::Struct(&StructTy {
    go: "v1.HTTPHeader",
    proto: false,
    complete: true,
    fields: &[fa("Name", "name", &STR), fa("Value", "value", &STR)],
});

static HTTP_HEADERS: Ty = Ty::Slice(&HTTP_HEADER, "[]v1.HTTPHeader");

/// A `corev1.Probe`, its embedded `ProbeHandler`'s fields first, as Go's `encoding/json` writes them.
static PROBE: Ty = Ty::Ptr(&Ty::Struct(&StructTy {
    go: "v1.Probe",
    proto: false,
    complete: false,
    fields: &[
        f("Exec", "exec", &EXEC_ACTION),
        f(
            "HTTPGet",
            "httpGet",
            &Ty::Ptr(&Ty::Struct(&StructTy {
                go: "v1.HTTPGetAction",
                proto: false,
                complete: true,
                fields: &[
                    f("Path", "path", &STR),
                    fa("Port", "port", &INT_OR_STRING),
                    f("Host", "host", &STR),
                    f("Scheme", "scheme", &STR),
                    f("HTTPHeaders", "httpHeaders", &HTTP_HEADERS),
                ],
            })),
        ),
        f(
            "TCPSocket",
            "tcpSocket",
            &Ty::Ptr(&Ty::Struct(&StructTy {
                go: "v1.TCPSocketAction",
                proto: false,
                complete: true,
                fields: &[fa("Port", "port", &INT_OR_STRING), f("Host", "host", &STR)],
            })),
        ),
        f(
            "GRPC",
            "grpc",
            &Ty::Ptr(&Ty::Struct(&StructTy {
                go: "v1.GRPCAction",
                proto: false,
                complete: true,
                fields: &[
                    fa("Port", "port", &INT32),
                    fa("Service", "service", &PTR_STR),
                ],
            })),
        ),
        f("InitialDelaySeconds", "initialDelaySeconds", &INT32),
        f("TimeoutSeconds", "timeoutSeconds", &INT32),
        f("PeriodSeconds", "periodSeconds", &INT32),
        f("SuccessThreshold", "successThreshold", &INT32),
        f("FailureThreshold", "failureThreshold", &INT32),
        f(
            "TerminationGracePeriodSeconds",
            "terminationGracePeriodSeconds",
            &PTR_INT64,
        ),
    ],
}));
opaque_ptr!(LIFECYCLE, "v1.Lifecycle");
opaque_ptr!(ENV_SOURCE, "v1.EnvVarSource");
opaque_ptr!(CAPS, "v1.Capabilities");
opaque_ptr!(AFFINITY, "v1.Affinity");
opaque_ptr!(DNS_CONFIG, "v1.PodDNSConfig");
opaque_ptr!(DURATION, "durationpb.Duration");
/// `networking.v1alpha3.ClientTLSSettings`, as far as the texts read it (the lightstep CA path).
static CLIENT_TLS_SETTINGS: Ty = Ty::Ptr(&Ty::Struct(&StructTy {
    go: "v1alpha3.ClientTLSSettings",
    proto: true,
    complete: false,
    fields: &[
        f("ClientCertificate", "clientCertificate", &STR),
        f("PrivateKey", "privateKey", &STR),
        f("CaCertificates", "caCertificates", &STR),
        f("CredentialName", "credentialName", &STR),
        f("Sni", "sni", &STR),
    ],
}));
/// `mesh.v1alpha1.Tracing`, as far as the texts read it (`.ProxyConfig.GetTracing.GetTlsSettings`).
static TRACING: Ty = Ty::Ptr(&Ty::Struct(&StructTy {
    go: "v1alpha1.Tracing",
    proto: true,
    complete: false,
    fields: &[
        f("TlsSettings", "tlsSettings", &CLIENT_TLS_SETTINGS),
        f("MaxPathTagLength", "maxPathTagLength", &INT32),
    ],
}));
opaque_ptr!(OBJ_TIME, "v1.Time");

static OPAQUE_ITEMS: Ty = Ty::Slice(&Ty::Opaque("v1.Toleration"), "[]v1.Toleration");
static ENV_FROM: Ty = Ty::Slice(&Ty::Opaque("v1.EnvFromSource"), "[]v1.EnvFromSource");

pub(crate) static TYPE_META: Ty = Ty::Struct(&StructTy {
    go: "v1.TypeMeta",
    proto: false,
    complete: true,
    fields: &[f("Kind", "kind", &STR), f("APIVersion", "apiVersion", &STR)],
});

static NAMESPACED_NAME: Ty = Ty::Struct(&StructTy {
    go: "types.NamespacedName",
    proto: false,
    complete: true,
    fields: &[f("Namespace", "namespace", &STR), f("Name", "name", &STR)],
});

static OWNER_REF: Ty = Ty::Struct(&StructTy {
    go: "v1.OwnerReference",
    proto: false,
    complete: true,
    fields: &[
        fa("APIVersion", "apiVersion", &STR),
        fa("Kind", "kind", &STR),
        fa("Name", "name", &STR),
        fa("UID", "uid", &STR),
        f("Controller", "controller", &PTR_BOOL),
        f("BlockOwnerDeletion", "blockOwnerDeletion", &PTR_BOOL),
    ],
});

pub(crate) static OBJECT_META_STRUCT: StructTy = StructTy {
    go: "v1.ObjectMeta",
    proto: false,
    complete: false,
    fields: &[
        f("Name", "name", &STR),
        f("GenerateName", "generateName", &STR),
        f("Namespace", "namespace", &STR),
        f("UID", "uid", &STR),
        f("ResourceVersion", "resourceVersion", &STR),
        f("Generation", "generation", &INT64),
        fa(
            "CreationTimestamp",
            "creationTimestamp",
            &Ty::Opaque("v1.Time"),
        ),
        f("DeletionTimestamp", "deletionTimestamp", &OBJ_TIME),
        f("Labels", "labels", &MAP_STR),
        f("Annotations", "annotations", &MAP_STR),
        f(
            "OwnerReferences",
            "ownerReferences",
            &Ty::Slice(&OWNER_REF, "[]v1.OwnerReference"),
        ),
        f("Finalizers", "finalizers", &SLICE_STR),
    ],
};
static OBJECT_META: Ty = Ty::Struct(&OBJECT_META_STRUCT);

static CONTAINER_PORT: Ty = Ty::Struct(&StructTy {
    go: "v1.ContainerPort",
    proto: false,
    complete: true,
    fields: &[
        f("Name", "name", &STR),
        f("HostPort", "hostPort", &INT32),
        fa("ContainerPort", "containerPort", &INT32),
        f("Protocol", "protocol", &STR),
        f("HostIP", "hostIP", &STR),
    ],
});

static ENV_VAR: Ty = Ty::Struct(&StructTy {
    go: "v1.EnvVar",
    proto: false,
    complete: true,
    fields: &[
        fa("Name", "name", &STR),
        f("Value", "value", &STR),
        f("ValueFrom", "valueFrom", &ENV_SOURCE),
    ],
});

static VOLUME_MOUNT: Ty = Ty::Struct(&StructTy {
    go: "v1.VolumeMount",
    proto: false,
    complete: true,
    fields: &[
        fa("Name", "name", &STR),
        f("ReadOnly", "readOnly", &BOOL),
        f("RecursiveReadOnly", "recursiveReadOnly", &PTR_STR),
        fa("MountPath", "mountPath", &STR),
        f("SubPath", "subPath", &STR),
        f("MountPropagation", "mountPropagation", &PTR_STR),
        f("SubPathExpr", "subPathExpr", &STR),
    ],
});

static RESOURCES: Ty = Ty::Struct(&StructTy {
    go: "v1.ResourceRequirements",
    proto: false,
    complete: false,
    fields: &[
        f("Limits", "limits", &QUANTITIES),
        f("Requests", "requests", &QUANTITIES),
    ],
});

static SECURITY_CONTEXT: Ty = Ty::Ptr(&Ty::Struct(&StructTy {
    go: "v1.SecurityContext",
    proto: false,
    complete: false,
    fields: &[
        f("Capabilities", "capabilities", &CAPS),
        f("Privileged", "privileged", &PTR_BOOL),
        f("RunAsUser", "runAsUser", &PTR_INT64),
        f("RunAsGroup", "runAsGroup", &PTR_INT64),
        f("RunAsNonRoot", "runAsNonRoot", &PTR_BOOL),
        f(
            "ReadOnlyRootFilesystem",
            "readOnlyRootFilesystem",
            &PTR_BOOL,
        ),
        f(
            "AllowPrivilegeEscalation",
            "allowPrivilegeEscalation",
            &PTR_BOOL,
        ),
    ],
}));

static POD_SECURITY_CONTEXT: Ty = Ty::Ptr(&Ty::Struct(&StructTy {
    go: "v1.PodSecurityContext",
    proto: false,
    complete: false,
    fields: &[
        f("RunAsUser", "runAsUser", &PTR_INT64),
        f("RunAsGroup", "runAsGroup", &PTR_INT64),
        f("RunAsNonRoot", "runAsNonRoot", &PTR_BOOL),
        f("SupplementalGroups", "supplementalGroups", &SLICE_INT64),
        f("FSGroup", "fsGroup", &PTR_INT64),
    ],
}));

static CONTAINER: Ty = Ty::Struct(&StructTy {
    go: "v1.Container",
    proto: false,
    complete: false,
    fields: &[
        fa("Name", "name", &STR),
        f("Image", "image", &STR),
        f("Command", "command", &SLICE_STR),
        f("Args", "args", &SLICE_STR),
        f("WorkingDir", "workingDir", &STR),
        f(
            "Ports",
            "ports",
            &Ty::Slice(&CONTAINER_PORT, "[]v1.ContainerPort"),
        ),
        f("EnvFrom", "envFrom", &ENV_FROM),
        f("Env", "env", &Ty::Slice(&ENV_VAR, "[]v1.EnvVar")),
        fa("Resources", "resources", &RESOURCES),
        f("RestartPolicy", "restartPolicy", &PTR_STR),
        f(
            "VolumeMounts",
            "volumeMounts",
            &Ty::Slice(&VOLUME_MOUNT, "[]v1.VolumeMount"),
        ),
        f("LivenessProbe", "livenessProbe", &PROBE),
        f("ReadinessProbe", "readinessProbe", &PROBE),
        f("StartupProbe", "startupProbe", &PROBE),
        f("Lifecycle", "lifecycle", &LIFECYCLE),
        f("TerminationMessagePath", "terminationMessagePath", &STR),
        f("TerminationMessagePolicy", "terminationMessagePolicy", &STR),
        f("ImagePullPolicy", "imagePullPolicy", &STR),
        f("SecurityContext", "securityContext", &SECURITY_CONTEXT),
        f("Stdin", "stdin", &BOOL),
        f("StdinOnce", "stdinOnce", &BOOL),
        f("TTY", "tty", &BOOL),
    ],
});
static CONTAINERS: Ty = Ty::Slice(&CONTAINER, "[]v1.Container");

static VOLUME: Ty = Ty::Struct(&StructTy {
    go: "v1.Volume",
    proto: false,
    complete: false,
    fields: &[fa("Name", "name", &STR)],
});

static LOCAL_OBJECT_REF: Ty = Ty::Struct(&StructTy {
    go: "v1.LocalObjectReference",
    proto: false,
    complete: true,
    fields: &[f("Name", "name", &STR)],
});

static POD_SPEC: Ty = Ty::Struct(&StructTy {
    go: "v1.PodSpec",
    proto: false,
    complete: false,
    fields: &[
        f("Volumes", "volumes", &Ty::Slice(&VOLUME, "[]v1.Volume")),
        f("InitContainers", "initContainers", &CONTAINERS),
        fa("Containers", "containers", &CONTAINERS),
        f("RestartPolicy", "restartPolicy", &STR),
        f(
            "TerminationGracePeriodSeconds",
            "terminationGracePeriodSeconds",
            &PTR_INT64,
        ),
        f("DNSPolicy", "dnsPolicy", &STR),
        f("NodeSelector", "nodeSelector", &MAP_STR),
        f("ServiceAccountName", "serviceAccountName", &STR),
        f(
            "AutomountServiceAccountToken",
            "automountServiceAccountToken",
            &PTR_BOOL,
        ),
        f("NodeName", "nodeName", &STR),
        f("HostNetwork", "hostNetwork", &BOOL),
        f("HostPID", "hostPID", &BOOL),
        f("HostIPC", "hostIPC", &BOOL),
        f("ShareProcessNamespace", "shareProcessNamespace", &PTR_BOOL),
        f("SecurityContext", "securityContext", &POD_SECURITY_CONTEXT),
        f(
            "ImagePullSecrets",
            "imagePullSecrets",
            &Ty::Slice(&LOCAL_OBJECT_REF, "[]v1.LocalObjectReference"),
        ),
        f("Hostname", "hostname", &STR),
        f("Subdomain", "subdomain", &STR),
        f("Affinity", "affinity", &AFFINITY),
        f("SchedulerName", "schedulerName", &STR),
        f("Tolerations", "tolerations", &OPAQUE_ITEMS),
        f("PriorityClassName", "priorityClassName", &STR),
        f("Priority", "priority", &PTR_INT32),
        f("DNSConfig", "dnsConfig", &DNS_CONFIG),
        f("RuntimeClassName", "runtimeClassName", &PTR_STR),
        f("EnableServiceLinks", "enableServiceLinks", &PTR_BOOL),
    ],
});

static INTERCEPTION_MODE: Ty = Ty::Enum(&EnumTy {
    go: "v1alpha1.ProxyConfig_InboundInterceptionMode",
    names: &["REDIRECT", "TPROXY", "NONE"],
});

static PROXY_IMAGE: Ty = Ty::Ptr(&Ty::Struct(&StructTy {
    go: "v1beta1.ProxyImage",
    proto: true,
    complete: true,
    fields: &[f("ImageType", "imageType", &STR)],
}));

static INT32_VALUE: Ty = Ty::Wrapper(&INT32, "wrapperspb.Int32Value");
static BOOL_VALUE: Ty = Ty::Wrapper(&BOOL, "wrapperspb.BoolValue");

static PROXY_CONFIG_STRUCT: StructTy = StructTy {
    go: "v1alpha1.ProxyConfig",
    proto: true,
    complete: false,
    fields: &[
        f("ConfigPath", "configPath", &STR),
        f("BinaryPath", "binaryPath", &STR),
        f("ServiceCluster", "serviceCluster", &STR),
        f("DrainDuration", "drainDuration", &DURATION),
        f("DiscoveryAddress", "discoveryAddress", &STR),
        f("StatNameLength", "statNameLength", &INT32),
        f("ProxyAdminPort", "proxyAdminPort", &INT32),
        f(
            "ControlPlaneAuthPolicy",
            "controlPlaneAuthPolicy",
            &Ty::Opaque("v1alpha1.AuthenticationPolicy"),
        ),
        f("CustomConfigFile", "customConfigFile", &STR),
        f("Concurrency", "concurrency", &INT32_VALUE),
        f("InterceptionMode", "interceptionMode", &INTERCEPTION_MODE),
        f("Tracing", "tracing", &TRACING),
        f("ProxyMetadata", "proxyMetadata", &MAP_STR),
        f("StatusPort", "statusPort", &INT32),
        f(
            "HoldApplicationUntilProxyStarts",
            "holdApplicationUntilProxyStarts",
            &BOOL_VALUE,
        ),
        f("Image", "image", &PROXY_IMAGE),
        f(
            "TerminationDrainDuration",
            "terminationDrainDuration",
            &DURATION,
        ),
        f("ClusterName", "clusterName", &STR),
    ],
};
static PROXY_CONFIG: Ty = Ty::Ptr(&Ty::Struct(&PROXY_CONFIG_STRUCT));

static MESH_CONFIG: Ty = Ty::Ptr(&Ty::Struct(&StructTy {
    go: "v1alpha1.MeshConfig",
    proto: true,
    complete: false,
    fields: &[
        f("ProxyListenPort", "proxyListenPort", &INT32),
        f("ProxyInboundListenPort", "proxyInboundListenPort", &INT32),
        f("ProxyHttpPort", "proxyHttpPort", &INT32),
        f("ConnectTimeout", "connectTimeout", &DURATION),
        f("IngressClass", "ingressClass", &STR),
        f("IngressService", "ingressService", &STR),
        f("EnableTracing", "enableTracing", &BOOL),
        f("AccessLogFile", "accessLogFile", &STR),
        f("AccessLogFormat", "accessLogFormat", &STR),
        f("DefaultConfig", "defaultConfig", &PROXY_CONFIG),
        f(
            "EnablePrometheusMerge",
            "enablePrometheusMerge",
            &BOOL_VALUE,
        ),
        f("RootNamespace", "rootNamespace", &STR),
        f("TrustDomain", "trustDomain", &STR),
        f("TrustDomainAliases", "trustDomainAliases", &SLICE_STR),
    ],
}));

/// Istio's `SidecarTemplateData`; the caller's JSON root uses the Go names as keys.
pub(crate) static ROOT: Ty = Ty::Ptr(&Ty::Struct(&StructTy {
    go: "inject.SidecarTemplateData",
    proto: false,
    complete: true,
    fields: &[
        f("TypeMeta", "TypeMeta", &TYPE_META),
        f("DeploymentMeta", "DeploymentMeta", &NAMESPACED_NAME),
        f("ObjectMeta", "ObjectMeta", &OBJECT_META),
        f("Spec", "Spec", &POD_SPEC),
        f("ProxyConfig", "ProxyConfig", &PROXY_CONFIG),
        f("MeshConfig", "MeshConfig", &MESH_CONFIG),
        f("Values", "Values", &MAP_ANY),
        f("Revision", "Revision", &STR),
        f("NativeSidecars", "NativeSidecars", &BOOL),
        f("ProxyImage", "ProxyImage", &STR),
        f("ProxyInitImage", "ProxyInitImage", &STR),
        f("ProxyUID", "ProxyUID", &INT64),
        f("ProxyGID", "ProxyGID", &INT64),
        f("InboundTrafficPolicyMode", "InboundTrafficPolicyMode", &STR),
        f("CompliancePolicy", "CompliancePolicy", &STR),
    ],
}));

/// Go's name of a type, as `printf` diagnostics and errors show it.
pub(crate) fn go_name(ty: &Ty) -> String {
    match ty {
        Ty::Str => "string".into(),
        Ty::Int(k) => k.go_name().into(),
        Ty::Bool => "bool".into(),
        Ty::Any => "interface {}".into(),
        Ty::MapAny => "map[string]interface {}".into(),
        Ty::MapStr => "map[string]string".into(),
        Ty::MapOpaque(n) | Ty::Slice(_, n) | Ty::Opaque(n) => (*n).into(),
        Ty::Ptr(t) => format!("*{}", go_name(t)),
        Ty::Struct(s) => s.go.into(),
        Ty::Enum(e) => e.go.into(),
        Ty::Wrapper(_, n) => format!("*{n}"),
    }
}
