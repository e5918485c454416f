{{/* Names, labels and the computed endpoints shared by every template. */}}

{{- define "streamgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "streamgate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "streamgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "streamgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: include with (dict "root" $ "component" "gateway"). */}}
{{- define "streamgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "streamgate.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "streamgate.componentLabels" -}}
{{ include "streamgate.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "streamgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "streamgate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "streamgate.secretName" -}}
{{- default (include "streamgate.fullname" .) .Values.auth.existingSecret -}}
{{- end -}}

{{- define "streamgate.redis.fullname" -}}
{{- printf "%s-redis" (include "streamgate.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "streamgate.redis.headless" -}}
{{- printf "%s-redis-headless" (include "streamgate.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "streamgate.redis.nodeCount" -}}
{{- mul .Values.redis.primaries (add1 .Values.redis.replicasPerPrimary) -}}
{{- end -}}

{{/* Stable DNS name of Redis pod $i: include with (dict "root" $ "index" $i). */}}
{{- define "streamgate.redis.podHost" -}}
{{- printf "%s-%d.%s.%s.svc.%s" (include "streamgate.redis.fullname" .root) (int .index) (include "streamgate.redis.headless" .root) .root.Release.Namespace .root.Values.clusterDomain -}}
{{- end -}}

{{- define "streamgate.etcd.fullname" -}}
{{- printf "%s-etcd" (include "streamgate.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "streamgate.etcd.headless" -}}
{{- printf "%s-etcd-headless" (include "streamgate.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "streamgate.etcd.podHost" -}}
{{- printf "%s-%d.%s.%s.svc.%s" (include "streamgate.etcd.fullname" .root) (int .index) (include "streamgate.etcd.headless" .root) .root.Release.Namespace .root.Values.clusterDomain -}}
{{- end -}}

{{/* etcd --initial-cluster: every member's name and peer URL, from the StatefulSet's pod DNS names. */}}
{{- define "streamgate.etcd.initialCluster" -}}
{{- $members := list -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $members = append $members (printf "%s-%d=http://%s:2380" (include "streamgate.etcd.fullname" $) $i (include "streamgate.etcd.podHost" (dict "root" $ "index" $i))) -}}
{{- end -}}
{{- join "," $members -}}
{{- end -}}

{{/* STREAMGATE_REDIS_NODES: every in-chart pod, or externalRedis.nodes. */}}
{{- define "streamgate.redisNodes" -}}
{{- if .Values.redis.enabled -}}
{{- $nodes := list -}}
{{- range $i := until (int (include "streamgate.redis.nodeCount" .)) -}}
{{- $nodes = append $nodes (printf "%s:6379" (include "streamgate.redis.podHost" (dict "root" $ "index" $i))) -}}
{{- end -}}
{{- join "," $nodes -}}
{{- else -}}
{{- if not .Values.externalRedis.nodes -}}
{{- fail "redis.enabled=false needs externalRedis.nodes (host:port of some Redis Cluster nodes)" -}}
{{- end -}}
{{- join "," .Values.externalRedis.nodes -}}
{{- end -}}
{{- end -}}

{{/* STREAMGATE_ETCD_ENDPOINTS: every in-chart member (the gateway uses the first that answers), or externalEtcd. */}}
{{- define "streamgate.etcdEndpoints" -}}
{{- if .Values.etcd.enabled -}}
{{- $endpoints := list -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $endpoints = append $endpoints (printf "%s:2379" (include "streamgate.etcd.podHost" (dict "root" $ "index" $i))) -}}
{{- end -}}
{{- join "," $endpoints -}}
{{- else -}}
{{- if not .Values.externalEtcd.endpoints -}}
{{- fail "etcd.enabled=false needs externalEtcd.endpoints (host:port of the etcd members)" -}}
{{- end -}}
{{- join "," .Values.externalEtcd.endpoints -}}
{{- end -}}
{{- end -}}

{{/* A setting as the environment variable's text: lists comma-joined, whole numbers without an exponent. */}}
{{- define "streamgate.settingText" -}}
{{- if kindIs "slice" . -}}
{{- join "," . -}}
{{- else if and (kindIs "float64" .) (eq (floor .) .) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/* HTTPS when the gateway's listener has TLS (probes and scrapes must follow). */}}
{{- define "streamgate.scheme" -}}
{{- if .Values.gateway.settings.tls_cert_path -}}HTTPS{{- else -}}HTTP{{- end -}}
{{- end -}}

{{/* Pod anti-affinity by topology key: include with (dict "root" $ "component" "redis" "mode" "preferred"). */}}
{{- define "streamgate.antiAffinity" -}}
{{- if eq .mode "preferred" }}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "streamgate.selectorLabels" (dict "root" .root "component" .component) | nindent 12 }}
{{- else if eq .mode "required" }}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "streamgate.selectorLabels" (dict "root" .root "component" .component) | nindent 10 }}
{{- end }}
{{- end -}}

{{- define "streamgate.image" -}}
{{- printf "%s:%s" .repository (toString .tag) -}}
{{- end -}}

{{/* Every container: no privilege escalation, read-only root, no capabilities. */}}
{{- define "streamgate.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The Redis password: auth.redisPassword; for the in-chart Redis without one, a generated password that
upgrades keep (read back from the release's Secret; `helm template` has no cluster and generates anew). */}}
{{- define "streamgate.redisPassword" -}}
{{- if .Values.auth.redisPassword -}}
{{- .Values.auth.redisPassword -}}
{{- else if .Values.redis.enabled -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "streamgate.fullname" .) -}}
{{- if and $existing (index ($existing.data | default dict) "redis-password") -}}
{{- index $existing.data "redis-password" | b64dec -}}
{{- else -}}
{{- randAlphaNum 32 -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The pull receipt key: auth.receiptSecret, else a generated one that upgrades keep (read back from the
release's Secret), so every gateway pod accepts the receipts of the others. */}}
{{- define "streamgate.receiptSecret" -}}
{{- if .Values.auth.receiptSecret -}}
{{- .Values.auth.receiptSecret -}}
{{- else -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "streamgate.fullname" .) -}}
{{- if and $existing (index ($existing.data | default dict) "receipt-secret") -}}
{{- index $existing.data "receipt-secret" | b64dec -}}
{{- else -}}
{{- randAlphaNum 48 -}}
{{- end -}}
{{- end -}}
{{- end -}}
