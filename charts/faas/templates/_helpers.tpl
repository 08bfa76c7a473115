{{/* Names, labels and the pieces every Deployment shares. */}}

{{- define "faas.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "faas.fullname" -}}
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

{{/* The name of one component's objects: (dict "root" $ "component" "gateway"). */}}
{{- define "faas.component" -}}
{{- printf "%s-%s" (include "faas.fullname" .root | trunc 52 | trimSuffix "-") .component -}}
{{- end -}}

{{- define "faas.selectorLabels" -}}
app.kubernetes.io/name: {{ include "faas.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The worker pods' selector as a label-selector string, for the operator. */}}
{{- define "faas.workerSelector" -}}
{{- printf "app.kubernetes.io/name=%s,app.kubernetes.io/instance=%s,app.kubernetes.io/component=worker" (include "faas.name" .) .Release.Name -}}
{{- end -}}

{{/* A duration value (300, "300s", "5m", "1h") in whole seconds, as the flags take it. */}}
{{- define "faas.seconds" -}}
{{- $text := toString . -}}
{{- $number := regexFind "^[0-9]+" $text | int64 -}}
{{- if hasSuffix "h" $text -}}
{{- mul $number 3600 -}}
{{- else if hasSuffix "m" $text -}}
{{- mul $number 60 -}}
{{- else -}}
{{- $number -}}
{{- end -}}
{{- end -}}

{{- define "faas.labels" -}}
{{ include "faas.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: faas
{{- end -}}

{{/* The image of (dict "root" $ "image" .Values.images.gateway). */}}
{{- define "faas.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{- define "faas.secretName" -}}
{{- default (include "faas.fullname" .) .Values.auth.existingSecret -}}
{{- end -}}

{{- define "faas.redisSecretName" -}}
{{- if and (not .Values.redis.enabled) .Values.redis.existingSecret -}}
{{- .Values.redis.existingSecret -}}
{{- else -}}
{{- include "faas.fullname" . -}}-redis-url
{{- end -}}
{{- end -}}

{{- define "faas.redisSecretKey" -}}
{{- if and (not .Values.redis.enabled) .Values.redis.existingSecret -}}
{{- .Values.redis.existingSecretKey -}}
{{- else -}}
redis-url
{{- end -}}
{{- end -}}

{{/* Checks that Redis is configured one way. */}}
{{- define "faas.checkRedis" -}}
{{- if and .Values.redis.enabled (or .Values.redis.url .Values.redis.existingSecret) -}}
{{- fail "redis: set either redis.enabled (the bundled Redis) or redis.url / redis.existingSecret (an external one), not both" -}}
{{- end -}}
{{- if not (or .Values.redis.enabled .Values.redis.url .Values.redis.existingSecret) -}}
{{- fail "redis: the platform needs Redis; set redis.enabled=true, redis.url or redis.existingSecret" -}}
{{- end -}}
{{- if and .Values.redis.url .Values.redis.existingSecret -}}
{{- fail "redis: set redis.url or redis.existingSecret, not both" -}}
{{- end -}}
{{- end -}}

{{/*
The external Redis's port, for the workers' egress: redis.url's, 6379 when it names
none, networkPolicy.workerEgress.externalRedisPort when the URL is in a Secret.
*/}}
{{- define "faas.externalRedisPort" -}}
{{- if .Values.redis.url -}}
{{- $port := regexFind ":[0-9]+$" (urlParse .Values.redis.url).host | trimPrefix ":" -}}
{{- default "6379" $port -}}
{{- else -}}
{{- .Values.networkPolicy.workerEgress.externalRedisPort -}}
{{- end -}}
{{- end -}}

{{/* A network of worker.outboundPrivateNetworks as a CIDR (an address is its own /32 or /128), without the tenant it may be opened to. */}}
{{- define "faas.cidr" -}}
{{- $network := splitList "=" . | last -}}
{{- $cidr := $network -}}
{{- if not (contains "/" $network) -}}
{{- $cidr = printf "%s/%s" $network (ternary "128" "32" (contains ":" $network)) -}}
{{- end -}}
{{- /* The worker refuses any network holding a cloud metadata address (its
CLOUD_METADATA); so does the chart, so that the NetworkPolicy never opens one to the
worker pods: exactly for IPv4, by the plainest prefixes for IPv6. */}}
{{- $holds := false -}}
{{- if contains ":" $cidr -}}
{{- $holds = or (hasPrefix "fd00:ec2:" $cidr) (hasSuffix "/0" $cidr) -}}
{{- else -}}
{{- $parts := splitList "/" $cidr -}}
{{- $bits := atoi (last $parts) -}}
{{- $block := 1 -}}
{{- range until (sub 32 $bits | int) }}{{ $block = mul $block 2 }}{{ end -}}
{{- $address := include "faas.ipv4" (first $parts) | atoi -}}
{{- range list "169.254.169.254" "168.63.129.16" "100.100.100.200" -}}
{{- if eq (div $address $block) (div (include "faas.ipv4" . | atoi) $block) -}}
{{- $holds = true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $holds -}}
{{- fail (printf "worker.outboundPrivateNetworks: `%s` holds a cloud provider's metadata address (169.254.169.254, 168.63.129.16, 100.100.100.200, fd00:ec2::254): code it is opened to could read the node's cloud credentials; open a narrower network" .) -}}
{{- end -}}
{{- $cidr -}}
{{- end -}}

{{/*
An IPv4 address as a number (a.b.c.d is a*2^24 + b*2^16 + c*2^8 + d).
*/}}
{{- define "faas.ipv4" -}}
{{- $octets := splitList "." . -}}
{{- add (mul (atoi (index $octets 0)) 16777216) (mul (atoi (index $octets 1)) 65536) (mul (atoi (index $octets 2)) 256) (atoi (index $octets 3)) -}}
{{- end -}}

{{/*
The key of the Redis Secret holding the workers' URL: a Redis user of their own where
there is one (`files/worker-redis-acl.txt`), which reads no token and writes no record
of the platform's; a worker runs tenants' code.
*/}}
{{- define "faas.workerRedisSecretKey" -}}
{{- if .Values.redis.enabled -}}
worker-redis-url
{{- else if .Values.redis.existingSecret -}}
{{- default .Values.redis.existingSecretKey .Values.redis.existingSecretWorkerKey -}}
{{- else if .Values.redis.workerUrl -}}
worker-redis-url
{{- else -}}
redis-url
{{- end -}}
{{- end -}}

{{/* The environment every platform process gets but the workers: Redis and more. */}}
{{- define "faas.commonEnv" -}}
{{- include "faas.envWithRedis" (dict "root" . "key" (include "faas.redisSecretKey" .)) -}}
{{- end -}}

{{/* The workers' environment: their own Redis URL ("faas.workerRedisSecretKey"). */}}
{{- define "faas.workerEnv" -}}
{{- include "faas.envWithRedis" (dict "root" . "key" (include "faas.workerRedisSecretKey" .)) -}}
{{- end -}}

{{- define "faas.envWithRedis" -}}
- name: FAAS_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "faas.redisSecretName" .root }}
      key: {{ .key }}
{{- /*
A directory the process creates owner-only inside the emptyDir, which the kubelet
makes writable by all (0777, root's): faas refuses a data dir others may write to.
*/}}
- name: FAAS_DATA_DIR
  value: /var/lib/faas/data
- name: FAAS_LOG
  value: info
{{- end -}}

{{- define "faas.internalTokenEnv" -}}
- name: FAAS_INTERNAL_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "faas.secretName" . }}
      key: internal-token
{{- end -}}

{{/* Pod-level security: non-root, RuntimeDefault seccomp. */}}
{{- define "faas.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Container-level security: read-only root, no capabilities, no escalation. */}}
{{- define "faas.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop:
    - ALL
{{- end -}}

{{/* The writable directories of a read-only pod: the data dir and /tmp. */}}
{{- define "faas.volumeMounts" -}}
- name: data
  mountPath: /var/lib/faas
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* (dict "sizeLimit" "64Mi") */}}
{{- define "faas.volumes" -}}
- name: data
  emptyDir:
    sizeLimit: {{ .sizeLimit }}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end -}}

{{/* Scheduling and image pull values of one component: (dict "root" $ "values" .Values.gateway). */}}
{{- define "faas.podScheduling" -}}
{{- with .root.Values.images.pullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
