#!/usr/bin/env bash
# End-to-end test of serving a Deployment through the server's OpenAI front door: `aicloud up`
# (server + one simulated node whose jobs are real processes), a small random-weight model, a
# Deployment with min 0 replicas, tenant API keys.
# Usage: tests/e2e_deploy.sh path/to/aicloud   (run from the repository root by ctest)
# Checks: a chat request with a tenant key is held while a replica starts (scale from zero) and
# its answer streams back; /v1/models shows a key only its tenant's models; another tenant's key
# gets 403 (an unknown key 401); a canary revision gets its weight's share of requests and
# `aicloud rollout undo` retires it; a burst scales replicas up and status.observed reports what
# the replicas served; a tenant over its token budget gets 429 and concurrent requests never
# spend past the budget, and its serving usage adds up on the server; idleness scales the
# deployment to zero.
# Needs curl, jq, xargs. Prints PASS/FAIL lines; exits 1 when a check failed.
set -u
bin=$(realpath "${1:?usage: tests/e2e_deploy.sh path/to/aicloud}")
for tool in curl jq xargs; do
  command -v "$tool" >/dev/null || { echo "FAIL prerequisites: $tool not found"; exit 1; }
done
tmp=$(mktemp -d /tmp/aicloud-deploy.XXXXXX)
# Agents run jobs and replicas as sandbox uids (not root): they must pass through $tmp.
chmod 755 "$tmp"
up_pid=
cleanup() {
  [ -n "$up_pid" ] && kill -TERM "$up_pid" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$up_pid" 2>/dev/null || break; sleep 0.1; done
  [ -n "$up_pid" ] && kill -KILL "$up_pid" 2>/dev/null
  pkill -KILL -f "engine --model $tmp/tiny" 2>/dev/null
  wait 2>/dev/null
  if [ "${E2E_KEEP:-0}" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap 'cleanup 2>/dev/null' EXIT
trap 'exit 1' INT TERM
export AICLOUD_CONFIG=$tmp/admin.json
. "$(dirname "$0")/e2e_lib.sh"  # pass, fail, wait_until; failed=0

tiny_model "$tmp/tiny" --dtype f16 --seed 3 || { fail model-init "$(cat "$tmp/tiny.log")"; exit 1; }

"$bin" up --data-dir "$tmp/up" --port 0 --sim-nodes 1 >"$tmp/up.log" 2>&1 &
up_pid=$!
wait_until 30 grep -qs "aicloud up: ready" "$tmp/up.log" || { fail up "$(tail -5 "$tmp/up.log")"; exit 1; }
url=$(jq -r .server "$AICLOUD_CONFIG")
pass "up ($url)"

cat >"$tmp/setup.yaml" <<EOF
apiVersion: aicloud/v1
kind: Tenant
metadata: {name: acme}
spec: {displayName: Acme}
---
apiVersion: aicloud/v1
kind: Tenant
metadata: {name: other}
---
apiVersion: aicloud/v1
kind: Tenant
metadata: {name: lean}
spec: {serving: {budgetTokens: 400}}
---
apiVersion: aicloud/v1
kind: Deployment
metadata: {name: chat, tenant: acme}
spec:
  model: $tmp/tiny
  replicas: {min: 0, max: 2}
  profile: latency
  scaleToZeroSeconds: 15
  autoscaler: {policy: kpa}
  resources: {cpu: "1", memory: 1Gi}
  engine: {threads: 1, kvCacheGiB: 0.05}
---
apiVersion: aicloud/v1
kind: Deployment
metadata: {name: mini, tenant: lean}
spec:
  model: $tmp/tiny
  replicas: {min: 1, max: 1}
  resources: {cpu: "1", memory: 1Gi}
  engine: {threads: 1, kvCacheGiB: 0.05}
EOF
"$bin" apply -f "$tmp/setup.yaml" >"$tmp/apply.log" 2>&1 || { fail apply "$(cat "$tmp/apply.log")"; exit 1; }
acme=$("$bin" key create --user admin -t acme 2>/dev/null)
other=$("$bin" key create --user admin -t other 2>/dev/null)
lean=$("$bin" key create --user admin -t lean 2>/dev/null)
[ -n "$acme" ] && [ -n "$other" ] && [ -n "$lean" ] && pass keys || { fail keys "key create failed"; exit 1; }

dep_field() { "$bin" get deployment "$1" -t "$2" -o json 2>/dev/null | jq -r "$3"; }
# A deployment is routable once the controller has seen it (status written, within a tick) and
# the front door has read its route (every 100 ms): /v1/models lists it.
wait_until 20 sh -c "[ \"\$('$bin' get deployment chat -t acme -o json 2>/dev/null | jq -r .status.revision)\" != null ] &&
                     curl -sS '$url/v1/models' -H 'Authorization: Bearer $acme' | jq -e '.data[] | select(.id == \"chat\")' >/dev/null" \
  || { fail routable "$("$bin" get deployment chat -t acme -o json 2>&1 | head -c 300)"; exit 1; }
chat() {  # chat KEY MODEL MAX_TOKENS [stream]
  curl -sS -m 120 -w '\n%{http_code}' "$url/v1/chat/completions" -H "Authorization: Bearer $1" \
    -H 'Content-Type: application/json' \
    -d "{\"model\":\"$2\",\"max_tokens\":$3,\"stream\":${4:-false},\"messages\":[{\"role\":\"user\",\"content\":\"hello there\"}]}"
}

# 1. Scale from zero: no replica yet; the request is held, a replica starts, the answer streams.
c=scale-from-zero
[ "$(dep_field chat acme '.status.replicas // 0')" = 0 ] || fail $c "replicas before the first request: $(dep_field chat acme .status)"
t0=$SECONDS
out=$(chat "$acme" chat 16 true)
code=$(tail -1 <<<"$out")
chunks=$(grep -c '^data: {' <<<"$out")
if [ "$code" = 200 ] && [ "$chunks" -ge 2 ] && grep -q '^data: \[DONE\]' <<<"$out"; then
  pass "$c (held $((SECONDS - t0)) s, $chunks SSE chunks)"
else
  fail $c "HTTP $code, $chunks chunks: $(head -c 400 <<<"$out")"
fi
[ "$(dep_field chat acme .status.readyReplicas)" -ge 1 ] 2>/dev/null && pass replica-ready || fail replica-ready "$(dep_field chat acme .status)"

# 2. RBAC: models listed per tenant; another tenant's key is refused.
c=models-per-tenant
m_acme=$(curl -sS "$url/v1/models" -H "Authorization: Bearer $acme" | jq -r '[.data[].id] | join(",")')
m_other=$(curl -sS "$url/v1/models" -H "Authorization: Bearer $other" | jq -r '[.data[].id] | join(",")')
[ "$m_acme" = chat ] && [ -z "$m_other" ] && pass $c || fail $c "acme sees '$m_acme', other sees '$m_other'"
c=other-tenant-403
code=$(chat "$other" chat 4 | tail -1)
[ "$code" = 403 ] && pass $c || fail $c "HTTP $code"
c=bad-key-401
code=$(chat "aic_000000000000_deadbeef" chat 4 | tail -1)
[ "$code" = 401 ] && pass $c || fail $c "HTTP $code"

# 2b. No way around the gateway: the replica's own port answers nothing without its secret
# (/health and /metrics included; a tenant's API key is not it), the secret is in no Job the API
# shows, and the engine listens on the node's address only.
c=replica-demands-its-secret
rep_url=$(dep_field chat acme '.status.endpoints[0].url')
codes=""
for p in /health /metrics /v1/models; do codes+="$(curl -sS -o /dev/null -w '%{http_code}' "$rep_url$p") "; done
for auth in "X-None: 1" "Authorization: Bearer $acme"; do
  codes+="$(curl -sS -o /dev/null -w '%{http_code}' "$rep_url/v1/chat/completions" -H "$auth" -H 'Content-Type: application/json' \
    -d '{"model":"chat","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}') "
done
codes+="$(curl -sS -o /dev/null -w '%{http_code}' "$rep_url/v1/load_lora_adapter" -H 'Content-Type: application/json' \
  -d '{"lora_name":"x","lora_path":"/etc"}')"
[ "$codes" = "401 401 401 401 401 401" ] && pass "$c ($rep_url)" || fail $c "$rep_url answered: $codes"
c=replica-secret-not-shown
if "$bin" get jobs -t acme -o json >"$tmp/jobs.json" 2>&1 && ! grep -q AICLOUD_REPLICA_SECRET "$tmp/jobs.json"; then
  pass $c
else
  fail $c "$(grep -o '.\{40\}AICLOUD_REPLICA_SECRET.\{20\}' "$tmp/jobs.json" | head -1)"
fi
c=replica-binds-node-address
port_hex=$(printf '%04X' "${rep_url##*:}")
listen=$(awk -v p=":$port_hex" '$4 == "0A" && substr($2, length($2) - 4) == p {print $2}' /proc/net/tcp | head -1)
[ "$listen" = "0100007F:$port_hex" ] && pass "$c (127.0.0.1)" || fail $c "listening as '$listen' (want 0100007F:$port_hex)"

# 3. Canary: a new revision of chat at weight 50 runs beside the stable one and gets every
# second request; `aicloud rollout undo` retires it. Requests keep chat from idling meanwhile.
c=canary
stable=$(dep_field chat acme .status.revision)
cat >"$tmp/canary.yaml" <<EOF
apiVersion: aicloud/v1
kind: Deployment
metadata: {name: chat, tenant: acme}
spec:
  model: $tmp/tiny
  replicas: {min: 0, max: 2}
  profile: latency
  scaleToZeroSeconds: 15
  autoscaler: {policy: kpa}
  resources: {cpu: "1", memory: 1Gi}
  engine: {threads: 1, kvCacheGiB: 0.06}
  strategy: {type: Canary, canaryWeight: 50}
EOF
"$bin" apply -f "$tmp/canary.yaml" >"$tmp/apply-canary.log" 2>&1 || fail $c "apply: $(cat "$tmp/apply-canary.log")"
warm_and() {  # warm_and JQ_TEST: one request to chat, then the status test
  chat "$acme" chat 2 >/dev/null
  [ "$(dep_field chat acme "$1")" = true ]
}
if wait_until 90 warm_and '(.status.canary.readyReplicas // 0) >= 1 and .status.readyReplicas >= 2'; then
  canary_rev=$(dep_field chat acme .status.canary.revision)
  sleep 1  # the front door refreshes its routes every 100 ms
  : >"$tmp/canary-replicas.txt"
  for i in $(seq 10); do
    curl -sS -m 60 -o /dev/null -D - "$url/v1/chat/completions" -H "Authorization: Bearer $acme" \
      -H 'Content-Type: application/json' -d '{"model":"chat","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}' \
      | tr -d '\r' | awk -F': ' 'tolower($1)=="x-aicloud-replica"{print $2}' >>"$tmp/canary-replicas.txt"
  done
  to_canary=$(grep -c -- "-$canary_rev-" "$tmp/canary-replicas.txt")
  to_stable=$(grep -c -- "-$stable-" "$tmp/canary-replicas.txt")
  if [ "$to_canary" = 5 ] && [ "$to_stable" = 5 ]; then
    pass "$c (revision $canary_rev beside $stable: $to_canary and $to_stable of 10 requests)"
  else
    fail $c "canary $canary_rev got $to_canary, stable $stable got $to_stable: $(sort "$tmp/canary-replicas.txt" | uniq -c | tr '\n' ' ')"
  fi
  c=rollout-undo
  out=$("$bin" rollout undo chat -t acme 2>&1)
  if grep -q "rolled back to revision $stable" <<<"$out" &&
     wait_until 60 warm_and "(.status.canary == null) and .status.revision == \"$stable\" and ([.status.endpoints[].revision] | all(. == \"$stable\"))"; then
    pass "$c ($out; canary replicas retired)"
  else
    fail $c "$out; status: $(dep_field chat acme '.status | del(.history)')"
  fi
  out=$("$bin" rollout undo chat -t acme --to-revision 00000000 2>&1); rc=$?
  [ $rc != 0 ] && grep -q "revision 00000000 is not in deployment/chat's history" <<<"$out" \
    && pass rollout-undo-unknown-revision || fail rollout-undo-unknown-revision "exit $rc: $out"
  out=$("$bin" rollout undo nosuch -t acme 2>&1); rc=$?
  [ $rc != 0 ] && grep -qi "not found" <<<"$out" && pass rollout-undo-unknown-deployment \
    || fail rollout-undo-unknown-deployment "exit $rc: $out"
  "$bin" rollout history chat -t acme >"$tmp/history.txt" 2>&1
  grep -q "$canary_rev" "$tmp/history.txt" && grep -q "$stable.*current" "$tmp/history.txt" && pass rollout-history \
    || fail rollout-history "$(cat "$tmp/history.txt")"
else
  fail $c "the canary never became ready: $(dep_field chat acme '.status | del(.history)')"
fi

# 3b. Burst: 48 concurrent long answers to chat (latency profile: 4 sequences a step, so most
# wait): the autoscaler reads the queue from the replica's /metrics and a second replica starts.
c=burst-scale-up
before=$(dep_field chat acme .status.replicas)
seq 48 | xargs -P 48 -I{} curl -sS -m 300 -o /dev/null -w '%{http_code}\n' "$url/v1/chat/completions" \
  -H "Authorization: Bearer $acme" -H 'Content-Type: application/json' \
  -d '{"model":"chat","max_tokens":512,"ignore_eos":true,"messages":[{"role":"user","content":"burst {}"}]}' \
  >"$tmp/burst.txt" 2>&1 &
burst_pid=$!
if wait_until 120 sh -c "'$bin' get deployment chat -t acme -o json 2>/dev/null | jq -e '.status.desiredReplicas >= 2 and .status.readyReplicas >= 2' >/dev/null"; then
  pass "$c ($before -> $(dep_field chat acme .status.readyReplicas) ready replicas: $(dep_field chat acme .status.lastScale.reason))"
else
  fail $c "$(dep_field chat acme '.status | del(.history)')"
fi
# While the burst runs, status.observed reports what the replicas served (from their /metrics).
c=observed
if wait_until 60 sh -c "'$bin' get deployment chat -t acme -o json 2>/dev/null | jq -e '(.status.observed.requests // 0) >= 1 and .status.observed.generationTokensPerS > 0 and .status.observed.ttftP99Ms > 0' >/dev/null"; then
  pass "$c ($(dep_field chat acme '.status.observed | tostring'))"
  # `get deployments` shows the TTFT p99 in its table.
  row=$("$bin" get deployments -t acme 2>&1 | grep '^chat ')
  echo "$row" | grep -qE ' [0-9]+ms ' && pass "observed-in-table ($(echo "$row" | tr -s ' '))" || fail observed-in-table "$row"
else
  fail $c "$(dep_field chat acme '.status | del(.history)')"
fi
wait $burst_pid
ok=$(grep -c '^200$' "$tmp/burst.txt")
[ "$ok" = 48 ] && pass "burst-answered (48 of 48)" || fail burst-answered "$(sort "$tmp/burst.txt" | uniq -c | tr '\n' ' ')"

# 4. Budget: tenant lean may spend 400 tokens; 60 concurrent requests of up to 30 tokens each.
c=budget-concurrent
wait_until 60 sh -c "[ \"\$('$bin' get deployment mini -t lean -o json 2>/dev/null | jq -r .status.readyReplicas)\" = 1 ]" \
  || fail $c "mini never became ready"
seq 60 | xargs -P 60 -I{} sh -c "curl -sS -m 120 -o $tmp/b{}.json -w '%{http_code}\n' '$url/v1/chat/completions' -H 'Authorization: Bearer $lean' -H 'Content-Type: application/json' -d '{\"model\":\"mini\",\"max_tokens\":30,\"messages\":[{\"role\":\"user\",\"content\":\"x {}\"}]}'" >"$tmp/codes.txt"
ok=$(grep -c '^200$' "$tmp/codes.txt")
limited=$(grep -c '^429$' "$tmp/codes.txt")
spent=$(cat "$tmp"/b*.json 2>/dev/null | jq -s '[.[] | select(.usage) | .usage.total_tokens] | add // 0')
if [ "$ok" -ge 1 ] && [ "$limited" -ge 1 ] && [ "$spent" -le 400 ]; then
  pass "$c ($ok answered, $limited refused with 429, $spent of 400 tokens spent)"
else
  fail $c "$ok answered, $limited limited, $spent tokens spent; codes: $(sort "$tmp/codes.txt" | uniq -c | tr '\n' ' ')"
fi
msg=$(cat "$tmp"/b*.json | jq -r 'select(.error) | .error.message' | head -1)
grep -qi budget <<<"$msg" && pass budget-message || fail budget-message "'$msg'"

# Its usage records add up in the tenant's serving usage (summed into the store every 5 s).
c=serving-usage
admin_token=$(jq -r .token "$AICLOUD_CONFIG")
if wait_until 20 sh -c "[ \"\$(curl -sS '$url/api/v1/usage?tenant=lean&since=1d' -H 'Authorization: Bearer $admin_token' | jq '.tenants.lean.serving | (.promptTokens + .completionTokens), .requests' | tr '\n' ' ')\" = '$spent 60 ' ]"; then
  pass "$c (tenant lean: 60 requests, $spent tokens)"
else
  fail $c "expected $spent tokens in 60 requests: $(curl -sS "$url/api/v1/usage?tenant=lean&since=1d" -H "Authorization: Bearer $admin_token" | jq -c .tenants.lean)"
fi

# The front door answers unary requests on its I/O thread (the gateway's fast path), and its
# metrics are in the server's /metrics: the 60 budget requests alone are unary.
c=front-door-fast-path
fast=$(curl -sS "$url/metrics" | awk '$1 == "aicloud_gateway_handled_total{path=\"fast\"}" {print $2}')
[ "${fast%.*}" -ge 60 ] 2>/dev/null && pass "$c ($fast requests on the I/O thread)" \
  || fail $c "aicloud_gateway_handled_total{path=\"fast\"} is '$fast'"

# 5. Idle: back to zero after scaleToZeroSeconds without requests.
c=idle-to-zero
if wait_until 90 sh -c "[ \"\$('$bin' get deployment chat -t acme -o json 2>/dev/null | jq -r .status.replicas)\" = 0 ]"; then
  pass "$c ($(dep_field chat acme .status.lastScale.reason))"
else
  fail $c "$(dep_field chat acme .status)"
fi

[ $failed = 0 ] && echo "e2e_deploy: all checks passed" || { echo "e2e_deploy: FAILED"; tail -30 "$tmp/up.log"; }
exit $failed
