{{/* Pieces of the NetworkPolicies (networkpolicy.yaml). */}}

{{/* An egress rule to the in-chart pods of a component: include with
(dict "root" $ "component" "redis" "ports" (list 6379)). */}}
{{- define "streamgate.networkPolicy.toComponent" -}}
- ports:
    {{- range .ports }}
    - {port: {{ . }}, protocol: TCP}
    {{- end }}
  to:
    - podSelector:
        matchLabels:
          {{- include "streamgate.selectorLabels" (dict "root" .root "component" .component) | nindent 10 }}
{{- end -}}

{{/* An egress rule to addresses outside the chart: (dict "cidrs" (list ...) "ports" (list ...));
no CIDRs: any address (IPv4 and IPv6) on those ports. */}}
{{- define "streamgate.networkPolicy.toAddresses" -}}
- ports:
    {{- range .ports }}
    - {port: {{ . }}, protocol: TCP}
    {{- end }}
  to:
    {{- range (.cidrs | default (list "0.0.0.0/0" "::/0")) }}
    - ipBlock: {cidr: {{ . | quote }}}
    {{- end }}
{{- end -}}

{{/* The distinct ports of host:port addresses, as a JSON list (for fromJsonArray). */}}
{{- define "streamgate.networkPolicy.ports" -}}
{{- $ports := list -}}
{{- range . -}}
{{- $port := regexFind "[0-9]+$" . -}}
{{- if not $port -}}
{{- fail (printf "%q has no port: external Redis nodes and etcd endpoints are host:port" .) -}}
{{- end -}}
{{- $ports = append $ports (int $port) -}}
{{- end -}}
{{- $ports | uniq | toJson -}}
{{- end -}}

{{/* The archive's S3 ports: networkPolicy.archivePorts, else the endpoint's, else by scheme. */}}
{{- define "streamgate.networkPolicy.archivePorts" -}}
{{- $s3 := .Values.archive.s3 -}}
{{- if .Values.networkPolicy.archivePorts -}}
{{- .Values.networkPolicy.archivePorts | toJson -}}
{{- else if regexMatch ":[0-9]+$" $s3.endpoint -}}
{{- list (int (regexFind "[0-9]+$" $s3.endpoint)) | toJson -}}
{{- else -}}
{{- list (ternary 80 443 (eq $s3.scheme "http")) | toJson -}}
{{- end -}}
{{- end -}}

{{/* The policy of an in-chart datastore: its client port from the gateway and the chart's Job, every
port in peerPorts from its own pods. Include with (dict "root" $ "component" "redis" "clientPort" 6379
"peerPorts" (list 6379 16379) "job" "redis-cluster-create"). */}}
{{- define "streamgate.networkPolicy.datastore" }}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ printf "%s-%s" (include "streamgate.fullname" .root) .component | trunc 63 | trimSuffix "-" }}
  labels:
    {{- include "streamgate.componentLabels" (dict "root" .root "component" .component) | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "streamgate.selectorLabels" (dict "root" .root "component" .component) | nindent 6 }}
  policyTypes: [Ingress]
  ingress:
    - ports:
        - {port: {{ .clientPort }}, protocol: TCP}
      from:
        {{- range (list "gateway" .job) }}
        - podSelector:
            matchLabels:
              {{- include "streamgate.selectorLabels" (dict "root" $.root "component" .) | nindent 14 }}
        {{- end }}
    - ports:
        {{- range .peerPorts }}
        - {port: {{ . }}, protocol: TCP}
        {{- end }}
      from:
        - podSelector:
            matchLabels:
              {{- include "streamgate.selectorLabels" (dict "root" .root "component" .component) | nindent 14 }}
{{- end }}
