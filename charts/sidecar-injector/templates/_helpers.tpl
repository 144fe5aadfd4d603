{{/*
The revision served: empty for the default revision (`revision` empty or `default`), as
`injector webhook-config` reads --revision.
*/}}
{{- define "sidecar-injector.revision" -}}
{{- if ne .Values.revision "default" }}{{ .Values.revision }}{{ end -}}
{{- end }}

{{/* The revision's label value: `default` for the default revision. */}}
{{- define "sidecar-injector.revLabel" -}}
{{- include "sidecar-injector.revision" . | default "default" -}}
{{- end }}

{{/* The name of the injector's objects: `sidecar-injector[-<revision>]` (istiod's `istiod[-<revision>]`). */}}
{{- define "sidecar-injector.name" -}}
sidecar-injector{{ with include "sidecar-injector.revision" . }}-{{ . }}{{ end }}
{{- end }}

{{/* The injection ConfigMap's name, Istio's `istio-sidecar-injector[-<revision>]`. */}}
{{- define "sidecar-injector.configMapName" -}}
istio-sidecar-injector{{ with include "sidecar-injector.revision" . }}-{{ . }}{{ end }}
{{- end }}

{{/* Labels of every object but the webhook configurations (which carry exactly the generator's). */}}
{{- define "sidecar-injector.labels" -}}
app.kubernetes.io/name: sidecar-injector
app.kubernetes.io/part-of: sidecar-inject
istio.io/rev: {{ include "sidecar-injector.revLabel" . | quote }}
{{- end }}

{{/* The pods' labels the Deployment, Service, PDB and HPA select on (istiod's `app` + `istio.io/rev`). */}}
{{- define "sidecar-injector.selectorLabels" -}}
app.kubernetes.io/name: sidecar-injector
istio.io/rev: {{ include "sidecar-injector.revLabel" . | quote }}
{{- end }}

{{- define "sidecar-injector.image" -}}
{{- if contains "/" .Values.image }}{{ .Values.image }}{{ else }}{{ .Values.hub }}/{{ .Values.image }}:{{ .Values.tag }}{{ end -}}
{{- end }}

{{/* The names of this release's MutatingWebhookConfigurations: the revision's, then one per tag. */}}
{{- define "sidecar-injector.webhookNames" -}}
{{- $names := list (include "sidecar-injector.name" .) }}
{{- range .Values.revisionTags }}{{ $names = append $names (printf "sidecar-injector-tag-%s" .) }}{{ end }}
{{- toJson $names }}
{{- end }}

{{/*
Refuses what `injector webhook-config` refuses (webhook_config.rs `Args::validate`), with its words.
*/}}
{{- define "sidecar-injector.validate" -}}
{{- $label := "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" }}
{{- $rev := include "sidecar-injector.revision" . }}
{{- if and $rev (or (gt (len $rev) 63) (not (regexMatch $label $rev))) }}
{{- fail (printf "revision %q: not a DNS label (lowercase letters, digits and '-', at most 63)" $rev) }}
{{- end }}
{{- $seen := list }}
{{- range .Values.revisionTags }}
{{- if or (gt (len .) 63) (not (regexMatch $label .)) }}
{{- fail (printf "revisionTags %q: not a DNS label (lowercase letters, digits and '-', at most 63)" .) }}
{{- end }}
{{- if has . $seen }}
{{- fail (printf "revisionTags %q is given twice" .) }}
{{- end }}
{{- $seen = append $seen . }}
{{- if eq . ($rev | default "default") }}
{{- fail (printf "revisionTags %q names the revision itself; both would inject the same pods" .) }}
{{- end }}
{{- end }}
{{- if and .Values.sidecarInjectorWebhook.enableNamespacesByDefault $rev (not (has "default" .Values.revisionTags)) }}
{{- fail (printf "sidecarInjectorWebhook.enableNamespacesByDefault needs the default revision or the revision tag default (have revision %q)" $rev) }}
{{- end }}
{{- if not (has .Values.sidecarInjectorWebhook.reinvocationPolicy (list "Never" "IfNeeded")) }}
{{- fail (printf "sidecarInjectorWebhook.reinvocationPolicy %q: Never or IfNeeded" .Values.sidecarInjectorWebhook.reinvocationPolicy) }}
{{- end }}
{{- if not (hasPrefix "/" .Values.istiodRemote.injectionPath) }}
{{- fail (printf "istiodRemote.injectionPath %q: must start with '/'" .Values.istiodRemote.injectionPath) }}
{{- end }}
{{- include "sidecar-injector.validateTogether" . }}
{{- end }}

{{/*
What values.schema.json cannot say about one value alone (each value's type and range are there; Helm
checks them before rendering): the Deployment's rollout and the HPA's bounds, each refused as the API
server would refuse it, and the review deadline against the webhook's timeout, naming the values.
*/}}
{{- define "sidecar-injector.validateTogether" -}}
{{- $surge := .Values.rollingMaxSurge | toString }}
{{- $unavailable := .Values.rollingMaxUnavailable | toString }}
{{- if and (has $surge (list "0" "0%")) (has $unavailable (list "0" "0%")) }}
{{- fail (printf "rollingMaxSurge %s and rollingMaxUnavailable %s: both 0 would never roll the Deployment" $surge $unavailable) }}
{{- end }}
{{- if and .Values.autoscaleEnabled (lt (int64 .Values.autoscaleMax) (int64 .Values.autoscaleMin)) }}
{{- fail (printf "autoscaleMax %v is below autoscaleMin %v" .Values.autoscaleMax .Values.autoscaleMin) }}
{{- end }}
{{- if ge (int64 .Values.serve.reviewDeadlineMs) (mul (int64 .Values.webhook.timeoutSeconds) 1000) }}
{{- fail (printf "serve.reviewDeadlineMs %v is not below webhook.timeoutSeconds %v: the API server would give up on a review before the injector's own deadline answers it" .Values.serve.reviewDeadlineMs .Values.webhook.timeoutSeconds) }}
{{- end }}
{{- end }}
