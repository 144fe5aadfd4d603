{{/* Labels of every object. */}}
{{- define "istio-cni.labels" -}}
app.kubernetes.io/name: istio-cni
app.kubernetes.io/part-of: sidecar-inject
{{- end }}

{{/* The pods' labels the DaemonSet selects on (Istio's `k8s-app: istio-cni-node`). */}}
{{- define "istio-cni.selectorLabels" -}}
k8s-app: istio-cni-node
{{- end }}

{{/* `<hub>/<image>:<tag>` (hub and tag from global when unset), or `image` alone when it holds a `/`. */}}
{{- define "istio-cni.image" -}}
{{- $c := .Values.cni }}
{{- if contains "/" $c.image }}{{ $c.image }}{{ else }}{{ $c.hub | default .Values.global.hub }}/{{ $c.image }}:{{ $c.tag | default .Values.global.tag }}{{ end -}}
{{- end }}

{{/* Refuses values the agent cannot honour, naming them. */}}
{{- define "istio-cni.validate" -}}
{{- $r := .Values.cni.repair }}
{{- if $r.repairPods }}
{{- fail "cni.repair.repairPods: in-place repair is not implemented (it needs CAP_SYS_ADMIN and the host's /proc); use cni.repair.deletePods or cni.repair.labelPods" }}
{{- end }}
{{- $level := .Values.cni.logging.level | default .Values.global.logging.level }}
{{- if not (has $level (list "debug" "info" "warn" "error" "none")) }}
{{- $from := ternary "cni.logging.level" "global.logging.level" (ne (toString .Values.cni.logging.level) "") }}
{{- fail (printf "%s %q: debug, info, warn, error or none" $from (toString $level)) }}
{{- end }}
{{- range .Values.cni.excludeNamespaces }}
{{- if or (gt (len .) 63) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" .)) }}
{{- fail (printf "cni.excludeNamespaces %q: not a namespace name" .) }}
{{- end }}
{{- end }}
{{- end }}
