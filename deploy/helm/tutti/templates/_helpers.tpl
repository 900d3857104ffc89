{{/* Names. */}}
{{- define "tutti.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tutti.fullname" -}}
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

{{- define "tutti.redisName" -}}
{{- printf "%s-redis" (include "tutti.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tutti.secretName" -}}
{{- default (include "tutti.fullname" .) .Values.existingSecret -}}
{{- end -}}

{{/* The keys of the token secret and of the Redis password in that Secret. */}}
{{- define "tutti.authSecretKey" -}}
{{- if .Values.existingSecret }}{{ .Values.existingSecretKeys.authSecret }}{{ else }}auth-secret{{ end -}}
{{- end -}}
{{- define "tutti.clusterSecretKey" -}}
{{- if .Values.existingSecret }}{{ .Values.existingSecretKeys.clusterSecret }}{{ else }}cluster-secret{{ end -}}
{{- end -}}
{{- define "tutti.redisPasswordKey" -}}
{{- if .Values.existingSecret }}{{ .Values.existingSecretKeys.redisPassword }}{{ else }}redis-password{{ end -}}
{{- end -}}

{{/*
The chart's Secret's data (base64 values): each secret from its value, else
from the Secret the release already has (lookup, on an upgrade), else the
render fails. Nothing is generated: `helm template` cannot look up, so a
generated secret would change on every render (every token void after each
GitOps sync) while nothing said so.
*/}}
{{- define "tutti.secretData" -}}
{{- $v := .Values -}}
{{- $name := include "tutti.fullname" . -}}
{{- $old := (lookup "v1" "Secret" .Release.Namespace $name).data | default dict -}}
{{- $how := printf "or existingSecret (a Secret of yours); on an upgrade the release's Secret %s keeps it" $name -}}
{{- $auth := $v.auth.secret | b64enc | default (index $old "auth-secret") -}}
{{- if not $auth -}}
{{- fail (printf "auth.secret is required: the token secret, at least 32 bytes (--set auth.secret=$(openssl rand -hex 32)), %s. The chart makes none up: a render-only tool would make a new one on every render" $how) -}}
{{- end }}
auth-secret: {{ $auth | quote }}
{{- if $v.cluster.enabled -}}
{{- $cluster := $v.cluster.secret | b64enc | default (index $old "cluster-secret") -}}
{{- if not $cluster -}}
{{- fail (printf "cluster.secret is required in cluster mode: the cluster's own secret, at least 32 bytes and not the token secret (--set cluster.secret=$(openssl rand -hex 32)), %s" $how) -}}
{{- end }}
cluster-secret: {{ $cluster | quote }}
{{- end -}}
{{- $redis := $v.cluster.redisPassword | default $v.redis.password | b64enc | default (index $old "redis-password") -}}
{{- if and $v.cluster.enabled $v.redis.enabled (not $redis) -}}
{{- fail (printf "redis.password is required with the bundled Redis (--set redis.password=$(openssl rand -hex 32)), %s" $how) -}}
{{- end -}}
{{- if $redis }}
redis-password: {{ $redis | quote }}
{{- end -}}
{{- end -}}

{{/* The API URL pattern other nodes must have: apiUrl with each $(VAR) as `*`. */}}
{{- define "tutti.allowedApiUrl" -}}
{{- regexReplaceAll "[$][(][A-Za-z_][A-Za-z0-9_]*[)]" .Values.cluster.apiUrl "*" -}}
{{- end -}}

{{/* Labels: pass (dict "ctx" $ "component" "server"). */}}
{{- define "tutti.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tutti.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tutti.labels" -}}
{{ include "tutti.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Pods: 1 on a single node, 2 in a cluster, unless given. */}}
{{- define "tutti.replicas" -}}
{{- if kindIs "invalid" .Values.replicas -}}
{{- ternary 2 1 .Values.cluster.enabled -}}
{{- else -}}
{{- int .Values.replicas -}}
{{- end -}}
{{- end -}}

{{/* The drain's pieces, with tutti's own defaults when config leaves them out. */}}
{{- define "tutti.gracePeriod" -}}
{{- $drain := ternary .Values.config.drain_seconds 30 (hasKey .Values.config "drain_seconds") -}}
{{- $shutdown := ternary .Values.config.shutdown_timeout_seconds 5 (hasKey .Values.config "shutdown_timeout_seconds") -}}
{{- add (int .Values.preStopSeconds) (ceil $drain) (ceil $shutdown) 5 -}}
{{- end -}}

{{- define "tutti.mediaTcp" -}}
{{- if and (hasKey .Values.config "media_tcp") (not .Values.config.media_tcp) }}false{{ else }}true{{ end -}}
{{- end -}}

{{/* Refusals: values that cannot work, with what to do instead. */}}
{{- define "tutti.validate" -}}
{{- $v := .Values -}}
{{- $replicas := int (include "tutti.replicas" .) -}}
{{- if $v.cluster.enabled -}}
{{- if not (or $v.cluster.redisUrl $v.redis.enabled) -}}
{{- fail "cluster.enabled needs Redis: set cluster.redisUrl to yours (redis://host:6379/0 or rediss://…), or redis.enabled=true for the bundled one" -}}
{{- end -}}
{{- if and $v.cluster.redisUrl $v.redis.enabled -}}
{{- fail "cluster.redisUrl and redis.enabled both set: use one Redis (empty cluster.redisUrl = the bundled one)" -}}
{{- end -}}
{{- if not $v.cluster.apiUrl -}}
{{- fail "cluster.apiUrl is required in cluster mode: the https URL each node is reached at behind your TLS proxy, with $(NODE_NAME), $(NODE_IP) or $(POD_NAME) in it (e.g. https://$(NODE_NAME).tutti.example.org). Clients are redirected there with a ticket and their ?token= in the URL, so the chart sends none to plain http://<node address>" -}}
{{- end -}}
{{- if not (regexMatch "[$][(][A-Za-z_][A-Za-z0-9_]*[)]" $v.cluster.apiUrl) -}}
{{- fail (printf "cluster.apiUrl %q names no node: put $(NODE_NAME), $(NODE_IP) or $(POD_NAME) in it, so that each node has its own URL (a redirect to a shared URL may land on any node)" $v.cluster.apiUrl) -}}
{{- end -}}
{{- if and (not (hasPrefix "https://" $v.cluster.apiUrl)) (not $v.cluster.plainHttpApiUrl) -}}
{{- fail (printf "cluster.apiUrl %q is not https://: redirects carry a ticket and the client's ?token= in the URL, readable on the path; serve each node over TLS, or set cluster.plainHttpApiUrl=true in a lab" $v.cluster.apiUrl) -}}
{{- end -}}
{{- if and $v.cluster.secret (lt (len $v.cluster.secret) 32) -}}
{{- fail "cluster.secret: at least 32 bytes" -}}
{{- end -}}
{{- if lt $replicas 2 -}}
{{- fail (printf "cluster.enabled with replicas=%d: a cluster needs 2 pods at least, so that a draining pod can hand its rooms to another" $replicas) -}}
{{- end -}}
{{- else -}}
{{- if gt $replicas 1 -}}
{{- fail (printf "replicas=%d without cluster.enabled: a room lives on one server, and without the cluster's directory (Redis) the Service would send one room's joins to several; set cluster.enabled=true" $replicas) -}}
{{- end -}}
{{- if $v.redis.enabled -}}
{{- fail "redis.enabled without cluster.enabled: only cluster mode uses Redis" -}}
{{- end -}}
{{- end -}}
{{- if and $v.redis.enabled $v.redis.networkPolicy.enabled (not $v.redis.networkPolicy.allowedCidrs) -}}
{{- fail "redis.networkPolicy.allowedCidrs is empty: tutti runs on the host network, so its connections to Redis come from the nodes' addresses; list their range (kubectl get nodes -o wide), e.g. --set redis.networkPolicy.allowedCidrs={10.0.0.0/16}, or set redis.networkPolicy.enabled=false" -}}
{{- end -}}
{{- if and $v.auth.secret (lt (len $v.auth.secret) 32) -}}
{{- fail "auth.secret: at least 32 bytes" -}}
{{- end -}}
{{- if and $v.existingSecret (or $v.auth.secret $v.cluster.secret $v.cluster.redisPassword $v.redis.password) -}}
{{- fail "existingSecret is set: put the token secret, the cluster secret and the Redis password in that Secret, not in auth.secret, cluster.secret, cluster.redisPassword or redis.password" -}}
{{- end -}}
{{- if and $v.serviceMonitor.enabled (not $v.listen.metrics) -}}
{{- fail "serviceMonitor.enabled with listen.metrics empty: there is no /metrics to scrape" -}}
{{- end -}}
{{- range $key, $instead := dict "http" "ports.http and listen.http" "media" "ports.media" "metrics" "ports.metrics and listen.metrics" "advertise" "advertise" -}}
{{- if hasKey $v.config $key -}}
{{- fail (printf "config.%s is set by the chart: use %s" $key $instead) -}}
{{- end -}}
{{- end -}}
{{- if and (hasKey $v.config "auth") (hasKey (default dict $v.config.auth) "secret") -}}
{{- fail "config.auth.secret would sit in a ConfigMap: use auth.secret or existingSecret" -}}
{{- end -}}
{{- if hasKey $v.config "cluster" -}}
{{- range $key, $instead := dict "redis_url" "cluster.redisUrl" "redis_password" "cluster.redisPassword (or existingSecret)" "secret" "cluster.secret (or existingSecret)" "previous_secrets" "extraEnv: TUTTI_CLUSTER_PREVIOUS_SECRETS from a Secret" "api_url" "cluster.apiUrl" "media_addr" "cluster.mediaAddr" "node_id" "nothing: each pod is named after itself" -}}
{{- if hasKey (default dict $v.config.cluster) $key -}}
{{- fail (printf "config.cluster.%s is set by the chart: use %s" $key $instead) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
tutti.toml from a map: scalars and arrays first, then [tables] and
[[arrays of tables]], recursively. Helm reads every YAML number as a float:
a whole number is written as an integer (tutti takes integers for its float
keys, not floats for its integer ones).
*/}}
{{- define "tutti.toml.key" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . }}{{ . }}{{ else }}{{ toJson . }}{{ end -}}
{{- end -}}

{{- define "tutti.toml.value" -}}
{{- $k := kindOf . -}}
{{- if eq $k "string" -}}{{ toJson . }}
{{- else if eq $k "bool" -}}{{ . }}
{{- else if or (eq $k "float64") (eq $k "float32") -}}
{{- if eq (float64 (int64 .)) (float64 .) }}{{ int64 . }}{{ else }}{{ . }}{{ end -}}
{{- else if has $k (list "int" "int8" "int16" "int32" "int64" "uint" "uint8" "uint16" "uint32" "uint64") -}}{{ . }}
{{- else if eq $k "slice" -}}[{{ range $i, $e := . }}{{ if $i }}, {{ end }}{{ include "tutti.toml.value" $e }}{{ end }}]
{{- else if eq $k "map" -}}{ {{- range $i, $key := keys . | sortAlpha }}{{ if $i }}, {{ end }}{{ include "tutti.toml.key" $key }} = {{ include "tutti.toml.value" (get $ $key) }}{{ end -}} }
{{- else -}}{{ fail (printf "config: cannot write %v (%s) in TOML" . $k) }}
{{- end -}}
{{- end -}}

{{- define "tutti.toml.isTable" -}}
{{- if or (kindIs "map" .) (and (kindIs "slice" .) (gt (len .) 0) (kindIs "map" (first .))) }}true{{ end -}}
{{- end -}}

{{- define "tutti.toml.table" -}}
{{- $path := .path -}}
{{- range $key, $value := .table -}}
{{- if and (not (kindIs "invalid" $value)) (not (include "tutti.toml.isTable" $value)) }}
{{ include "tutti.toml.key" $key }} = {{ include "tutti.toml.value" $value }}
{{- end -}}
{{- end -}}
{{- range $key, $value := .table -}}
{{- $p := include "tutti.toml.key" $key -}}
{{- if $path }}{{ $p = printf "%s.%s" $path $p }}{{ end -}}
{{- if kindIs "map" $value }}

[{{ $p }}]
{{- include "tutti.toml.table" (dict "path" $p "table" $value) -}}
{{- else if include "tutti.toml.isTable" $value -}}
{{- range $e := $value }}

[[{{ $p }}]]
{{- include "tutti.toml.table" (dict "path" $p "table" $e) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The whole file: the media address and, in cluster mode, the API URLs other
nodes may have, over the config value. The API's and /metrics' addresses
name the node's address ($(NODE_IP)), which only the environment expands:
the Deployment sets them (TUTTI_HTTP, TUTTI_METRICS).
*/}}
{{- define "tutti.toml" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $_ := set $cfg "media" (printf "0.0.0.0:%d" (int .Values.ports.media)) -}}
{{- if .Values.cluster.enabled -}}
{{- $cluster := get $cfg "cluster" | default dict -}}
{{- if not (hasKey $cluster "allowed_api_urls") -}}
{{- $_ = set $cluster "allowed_api_urls" (list (include "tutti.allowedApiUrl" .)) -}}
{{- end -}}
{{- $_ = set $cfg "cluster" $cluster -}}
{{- end -}}
{{- include "tutti.toml.table" (dict "path" "" "table" $cfg) -}}
{{- end -}}
