{{/* The archive tier: where it writes (a path on a shared volume, or S3), the settings it renders and the
checks that refuse values it could not run with. */}}

{{/* "s3" or "path" when the archive is on; "" when off. */}}
{{- define "streamgate.archive.kind" -}}
{{- if .Values.archive.enabled -}}
{{- if hasPrefix "s3://" .Values.archive.url -}}s3{{- else -}}path{{- end -}}
{{- end -}}
{{- end -}}

{{- define "streamgate.archive.claimName" -}}
{{- default (printf "%s-archive" (include "streamgate.fullname" .)) .Values.archive.persistence.existingClaim -}}
{{- end -}}

{{/* The Secret holding the S3 keys: archive.s3.existingSecret, else the chart's (or auth.existingSecret). */}}
{{- define "streamgate.archive.secretName" -}}
{{- default (include "streamgate.secretName" .) .Values.archive.s3.existingSecret -}}
{{- end -}}

{{/* S3 keys the chart's own Secret holds: given inline, with no other Secret named for them. */}}
{{- define "streamgate.archive.inlineKeys" -}}
{{- $s3 := .Values.archive.s3 -}}
{{- if and (eq (include "streamgate.archive.kind" .) "s3") (or $s3.accessKey $s3.secretKey) -}}true{{- end -}}
{{- end -}}

{{/* Refuse what the archive could not run with, before any manifest is applied. */}}
{{- define "streamgate.archive.check" -}}
{{- $kind := include "streamgate.archive.kind" . -}}
{{- $archive := .Values.archive -}}
{{- $s3 := $archive.s3 -}}
{{- if $kind -}}
{{- if ge (float64 $archive.memoryWatermark) (float64 .Values.gateway.settings.publish_memory_watermark) -}}
{{- fail "archive.memoryWatermark must be below gateway.settings.publish_memory_watermark: entries must leave Redis before publishes are refused for memory" -}}
{{- end -}}
{{- end -}}
{{- if and (eq $kind "path") (not $archive.persistence.existingClaim) (not (has "ReadWriteMany" $archive.persistence.accessModes)) (or .Values.gateway.hpa.enabled (gt (int .Values.gateway.replicas) 1)) -}}
{{- fail "a path archive is written by every gateway pod: archive.persistence.accessModes needs ReadWriteMany (or use an s3:// archive.url)" -}}
{{- end -}}
{{- if eq $kind "s3" -}}
{{- if and (or $s3.accessKey $s3.secretKey) (not (and $s3.accessKey $s3.secretKey)) -}}
{{- fail "archive.s3.accessKey and archive.s3.secretKey go together" -}}
{{- end -}}
{{- if and (include "streamgate.archive.inlineKeys" .) (or $s3.existingSecret .Values.auth.existingSecret $s3.credentialsChain) -}}
{{- fail "archive.s3.accessKey/secretKey are rendered into the chart's Secret: with archive.s3.existingSecret or auth.existingSecret put them in that Secret, with credentialsChain leave them out" -}}
{{- end -}}
{{- if not (or $s3.credentialsChain $s3.existingSecret .Values.auth.existingSecret (include "streamgate.archive.inlineKeys" .)) -}}
{{- fail "an s3:// archive needs credentials: archive.s3.existingSecret, archive.s3.accessKey and secretKey, or archive.s3.credentialsChain" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The archive's lines of the gateway ConfigMap (its keys never: they come from a Secret). */}}
{{- define "streamgate.archive.config" -}}
{{- $kind := include "streamgate.archive.kind" . -}}
{{- $archive := .Values.archive -}}
{{- $s3 := $archive.s3 -}}
{{- if not $kind }}
STREAMGATE_ARCHIVE_URL: "none"
{{- else }}
STREAMGATE_ARCHIVE_URL: {{ ternary $archive.url (printf "file://%s" $archive.url) (eq $kind "s3") | quote }}
STREAMGATE_HOT_RETENTION_MS: {{ include "streamgate.settingText" $archive.hotRetentionMs | quote }}
STREAMGATE_ARCHIVE_MEMORY_WATERMARK: {{ include "streamgate.settingText" $archive.memoryWatermark | quote }}
{{- end }}
{{- if eq $kind "s3" }}
STREAMGATE_ARCHIVE_S3_SCHEME: {{ $s3.scheme | quote }}
STREAMGATE_ARCHIVE_S3_CREDENTIALS_CHAIN: {{ ternary "true" "false" $s3.credentialsChain | quote }}
{{- with $s3.endpoint }}
STREAMGATE_ARCHIVE_S3_ENDPOINT: {{ . | quote }}
{{- end }}
{{- with $s3.region }}
STREAMGATE_ARCHIVE_S3_REGION: {{ . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The gateway container's S3 key variables, from the Secret. */}}
{{- define "streamgate.archive.env" -}}
{{- if and (eq (include "streamgate.archive.kind" .) "s3") (not .Values.archive.s3.credentialsChain) }}
- name: STREAMGATE_ARCHIVE_S3_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "streamgate.archive.secretName" . }}
      key: {{ .Values.archive.s3.accessKeyKey }}
- name: STREAMGATE_ARCHIVE_S3_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "streamgate.archive.secretName" . }}
      key: {{ .Values.archive.s3.secretKeyKey }}
{{- end }}
{{- end -}}
