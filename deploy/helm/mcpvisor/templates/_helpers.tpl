{{/*
The chart's names. fullname is the StatefulSet's name, so a pod is
FULLNAME-ORDINAL: mcpvisor reads its ordinal from that trailing -N
(POD_NAME).
*/}}
{{- define "mcpvisor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcpvisor.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The headless Service that gives each pod its stable peer name. */}}
{{- define "mcpvisor.peersName" -}}
{{- printf "%s-peers" (include "mcpvisor.fullname" .) }}
{{- end }}

{{/* The Secret holding the shared peer key. */}}
{{- define "mcpvisor.keySecretName" -}}
{{- .Values.peerKey.existingSecret | default (printf "%s-peer-key" (include "mcpvisor.fullname" .)) }}
{{- end }}

{{- define "mcpvisor.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcpvisor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcpvisor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mcpvisor.labels" -}}
helm.sh/chart: {{ include "mcpvisor.chart" . }}
{{ include "mcpvisor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "mcpvisor.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mcpvisor.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "mcpvisor.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
The replica count the config states, after checking the values it comes
from: replicaCount, or with the HPA on, its maxReplicas (every ordinal the
HPA may start has a peer address).
*/}}
{{- define "mcpvisor.count" -}}
{{- $n := .Values.replicaCount }}
{{- if or (not (include "mcpvisor.isWhole" $n)) (lt (float64 $n) 1.0) }}
{{- fail (printf "replicaCount must be a whole number of at least 1 (it is %v): mcpvisor's replicas are the ordinals 0..replicaCount-1" $n) }}
{{- end }}
{{- if .Values.autoscaling.enabled }}
{{- $min := .Values.autoscaling.minReplicas | default $n }}
{{- $max := .Values.autoscaling.maxReplicas }}
{{- if or (not (include "mcpvisor.isWhole" $min)) (not (include "mcpvisor.isWhole" $max)) (lt (float64 $min) 1.0) (lt (float64 $max) (float64 $min)) }}
{{- fail (printf "autoscaling: minReplicas (%v) must be a whole number of at least 1, and maxReplicas (%v) one of at least minReplicas" $min $max) }}
{{- end }}
{{- int $max }}
{{- else }}
{{- int $n }}
{{- end }}
{{- end }}

{{/* "true" when the value is a whole number (from a values file: a float64; from --set: an int64), else "". */}}
{{- define "mcpvisor.isWhole" -}}
{{- if or (kindIs "int64" .) (kindIs "int" .) }}true
{{- else if and (kindIs "float64" .) (eq (float64 .) (floor .)) }}true
{{- end }}
{{- end }}

{{/*
config.json: the values' config, with listen and the replicas block that
the chart computes. The chart owns those: setting them in config is an
error rather than a setting that the chart would silently replace.
*/}}
{{- define "mcpvisor.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) }}
{{- if hasKey $cfg "listen" }}
{{- fail "config.listen is set by the chart (0.0.0.0 and ports.http): the probes and Services use that port; leave it out of config" }}
{{- end }}
{{- $replicas := deepCopy (get $cfg "replicas" | default dict) }}
{{- range $k := list "count" "peerAddress" "peers" "peerListen" "keyDir" "drainTimeout" }}
{{- if hasKey $replicas $k }}
{{- fail (printf "config.replicas.%s is set by the chart (from replicaCount, the peer Service, ports.peer, peerKey.mountPath and drainSeconds): leave it out of config" $k) }}
{{- end }}
{{- end }}
{{- range $name, $server := ($cfg.mcpServers | default dict) }}
{{- if and (kindIs "map" $server) (hasKey $server "placement") (not (has $server.placement (list "every" "one"))) }}
{{- fail (printf "config.mcpServers.%s.placement is %v: it is \"every\" (each replica runs it, the default) or \"one\" (one replica does, the others forward)" $name $server.placement) }}
{{- end }}
{{- end }}
{{- $peerAddress := printf "%s-{ordinal}.%s.%s.svc.%s:%d" (include "mcpvisor.fullname" .) (include "mcpvisor.peersName" .) .Release.Namespace .Values.clusterDomain (int .Values.ports.peer) }}
{{- $_ := set $replicas "count" (include "mcpvisor.count" . | atoi) }}
{{- $_ := set $replicas "peerAddress" $peerAddress }}
{{- $_ := set $replicas "peerListen" (printf "%s:%d" .Values.listenHost (int .Values.ports.peer)) }}
{{- $_ := set $replicas "keyDir" .Values.peerKey.mountPath }}
{{- $_ := set $replicas "drainTimeout" (printf "%ds" (int .Values.drainSeconds)) }}
{{- $_ := set $cfg "replicas" $replicas }}
{{- $_ := set $cfg "listen" (printf "%s:%d" .Values.listenHost (int .Values.ports.http)) }}
{{- toPrettyJson $cfg }}
{{- end }}

{{/* An emptyDir's spec, with the size limit given ("" for none), on one line. */}}
{{- define "mcpvisor.emptyDir" -}}
{{- if . }}{{ dict "sizeLimit" . | toJson }}{{ else }}{}{{ end }}
{{- end }}
