{{/* Names, labels and the checks that refuse a values combination that cannot work. */}}

{{- define "modelgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* fullname is the prefix of every object name; it leaves room for the longest suffix ("-webhook-server-cert"). */}}
{{- define "modelgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else if contains (include "modelgate.name" .) .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "modelgate.name" .) | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "modelgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "modelgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "modelgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "modelgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: modelgate
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Per-component labels: call with (dict "ctx" $ "component" "manager"). */}}
{{- define "modelgate.componentLabels" -}}
{{ include "modelgate.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "modelgate.componentSelectorLabels" -}}
{{ include "modelgate.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "modelgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "modelgate.manager.serviceAccountName" -}}
{{- if .Values.manager.serviceAccount.create }}
{{- default (printf "%s-manager" (include "modelgate.fullname" .)) .Values.manager.serviceAccount.name }}
{{- else }}
{{- required "manager.serviceAccount.name is required when manager.serviceAccount.create is false" .Values.manager.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "modelgate.gatewayd.serviceAccountName" -}}
{{- if .Values.gatewayd.serviceAccount.create }}
{{- default (printf "%s-gatewayd" (include "modelgate.fullname" .)) .Values.gatewayd.serviceAccount.name }}
{{- else }}
{{- required "gatewayd.serviceAccount.name is required when gatewayd.serviceAccount.create is false" .Values.gatewayd.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "modelgate.webhook.serviceName" -}}
{{- printf "%s-webhook" (include "modelgate.fullname" .) }}
{{- end }}

{{- define "modelgate.webhook.secretName" -}}
{{- printf "%s-webhook-server-cert" (include "modelgate.fullname" .) }}
{{- end }}

{{- define "modelgate.webhook.configurationName" -}}
{{- printf "%s-validating" (include "modelgate.fullname" .) }}
{{- end }}

{{- define "modelgate.webhook.mutatingConfigurationName" -}}
{{- printf "%s-mutating" (include "modelgate.fullname" .) }}
{{- end }}

{{- define "modelgate.webhook.certificateName" -}}
{{- printf "%s-serving-cert" (include "modelgate.fullname" .) }}
{{- end }}

{{- define "modelgate.redis.secretName" -}}
{{- default (printf "%s-redis" (include "modelgate.fullname" .)) .Values.redis.existingSecret }}
{{- end }}

{{- define "modelgate.stateClaimName" -}}
{{- default (printf "%s-gatewayd-state" (include "modelgate.fullname" .)) .Values.store.embedded.persistence.existingClaim }}
{{- end }}

{{/*
validate fails the render for values that would install something broken. Every message names the value and the
rule, so that `helm install` explains itself instead of leaving a crash-looping pod.
*/}}
{{- define "modelgate.validate" -}}
{{- if and .Values.tracing.enabled (not .Values.tracing.endpoint) }}
{{- fail "tracing.enabled=true needs tracing.endpoint, the OTLP collector's base URL" }}
{{- end }}
{{- $store := .Values.store.type }}
{{- if not (has $store (list "embedded" "redis")) }}
{{- fail (printf "store.type must be \"embedded\" or \"redis\", got %q" $store) }}
{{- end }}
{{- if and (eq $store "embedded") (gt (int .Values.gatewayd.replicas) 1) }}
{{- fail (printf "gatewayd.replicas=%d needs store.type=redis: the embedded store keeps rate windows in one pod's memory and usage in one pod's volume, so replicas would each enforce their own limits. Set store.type=redis with redis.url or redis.existingSecret, or set gatewayd.replicas=1." (int .Values.gatewayd.replicas)) }}
{{- end }}
{{- if eq $store "redis" }}
{{- include "modelgate.validateRedis" . }}
{{- end }}
{{- if not (has .Values.gatewayd.secretAccess (list "named" "namespace")) }}
{{- fail (printf "gatewayd.secretAccess must be \"named\" or \"namespace\", got %q" .Values.gatewayd.secretAccess) }}
{{- end }}
{{- if lt (int .Values.gatewayd.replicas) 1 }}
{{- fail "gatewayd.replicas must be at least 1" }}
{{- end }}
{{- if and .Values.gatewayd.httpRoute.enabled (not .Values.gatewayd.httpRoute.parentRefs) }}
{{- fail "gatewayd.httpRoute.enabled=true needs gatewayd.httpRoute.parentRefs: at least one Gateway for the route to attach to" }}
{{- end }}
{{- range .Values.namespaces }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" .) }}
{{- fail (printf "namespaces: %q is not a valid namespace name (RFC 1123 label)" .) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
validateRedis checks redis.* against redis.mode: what each deployment needs, and nothing another one takes.
*/}}
{{- define "modelgate.validateRedis" -}}
{{- $r := .Values.redis }}
{{- $mode := $r.mode | default "standalone" }}
{{- if eq $mode "standalone" }}
{{- if and (not $r.url) (not $r.existingSecret) }}
{{- fail "store.type=redis needs redis.url or redis.existingSecret (a Secret holding the URL under redis.existingSecretKey)" }}
{{- end }}
{{- if or $r.addrs $r.masterName $r.tls }}
{{- fail "redis.addrs, redis.masterName and redis.tls are for redis.mode=sentinel or cluster; a standalone Redis takes redis.url (rediss:// for TLS)" }}
{{- end }}
{{- if and $r.tlsCASecret $r.url (not (hasPrefix "rediss://" $r.url)) }}
{{- fail "redis.tlsCASecret needs TLS: a standalone redis.url that starts with rediss://" }}
{{- end }}
{{- else }}
{{- if not $r.addrs }}
{{- fail (printf "redis.mode=%s needs redis.addrs (host:port of the %s)" $mode (ternary "sentinels" "cluster's nodes" (eq $mode "sentinel"))) }}
{{- end }}
{{- if $r.url }}
{{- fail (printf "redis.url is for redis.mode=standalone; redis.mode=%s takes redis.addrs" $mode) }}
{{- end }}
{{- if and (eq $mode "sentinel") (not $r.masterName) }}
{{- fail "redis.mode=sentinel needs redis.masterName (the name the sentinels know the primary by)" }}
{{- end }}
{{- if and (eq $mode "cluster") $r.masterName }}
{{- fail "redis.masterName is for redis.mode=sentinel" }}
{{- end }}
{{- if and $r.tlsCASecret (not $r.tls) }}
{{- fail (printf "redis.tlsCASecret needs redis.tls=true with redis.mode=%s" $mode) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
modelgate.redis.inlineSecret is "true" when the chart renders the Secret of redis.url and the passwords.
*/}}
{{- define "modelgate.redis.inlineSecret" -}}
{{- $r := .Values.redis }}
{{- if and (eq .Values.store.type "redis") (not $r.existingSecret) (or $r.url $r.password $r.sentinelPassword) }}true{{ end }}
{{- end }}

{{/*
The OTEL_* variables of a component with tracing.enabled (docs/operations.md "Traces"); nothing otherwise, which is
tracing off. The argument is (list $ "service-name").
*/}}
{{- define "modelgate.tracingEnv" -}}
{{- $root := index . 0 }}
{{- with $root.Values.tracing }}
{{- if .enabled }}
- name: OTEL_TRACES_EXPORTER
  value: otlp
- name: OTEL_SERVICE_NAME
  value: {{ index $ 1 | quote }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .endpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ .protocol | quote }}
- name: OTEL_TRACES_SAMPLER
  value: parentbased_traceidratio
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ .samplerRatio | quote }}
{{- end }}
{{- end }}
{{- end }}
