#!/usr/bin/env bash
# End-to-end test of standalone gateways serving a server's Deployments: `aicloud up` (server +
# one simulated node whose jobs are real processes), a small random-weight model, and two
# `aicloud gateway --server URL` processes with a key of the gateway role, as an operator runs
# several behind a load balancer.
# Usage: tests/e2e_gateway_link.sh path/to/aicloud   (run from the repository root by ctest)
# Checks: a gateway refuses to start with a bad key or a key without the gateway role, naming the
# reason; a chat request through a gateway with a tenant key is held while a replica starts (the
# gateway's signal scales the deployment from zero) and streams back; a key sees its tenant's
# models only and another tenant's key gets 403, an unknown key 401; concurrent requests through
# both gateways never spend past a tenant's token budget (shared through the server) and add up
# in its serving usage (`aicloud usage`); a key revoked on the server is refused by a gateway
# within seconds; sparse requests through the gateways keep a deployment warm, and idleness
# scales it back to zero; a gateway keeps its last state while the server is stopped.
# Needs curl, jq, xargs. Prints PASS/FAIL lines; exits 1 when a check failed.
set -u
bin=$(realpath "${1:?usage: tests/e2e_gateway_link.sh path/to/aicloud}")
for tool in curl jq xargs; do
  command -v "$tool" >/dev/null || { echo "FAIL prerequisites: $tool not found"; exit 1; }
done
tmp=$(mktemp -d /tmp/aicloud-gwlink.XXXXXX)
# Agents run jobs and replicas as sandbox uids (not root): they must pass through $tmp.
chmod 755 "$tmp"
up_pid=
gw_pids=()
stop_pid() {
  [ -n "$1" ] || return 0
  kill -TERM "$1" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null
}
cleanup() {
  for p in "${gw_pids[@]}"; do stop_pid "$p"; done
  stop_pid "$up_pid"
  pkill -KILL -f "engine --model $tmp/tiny" 2>/dev/null
  wait 2>/dev/null
  if [ "${E2E_KEEP:-0}" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap 'cleanup 2>/dev/null' EXIT
trap 'exit 1' INT TERM
export AICLOUD_CONFIG=$tmp/admin.json
. "$(dirname "$0")/e2e_lib.sh"  # pass, fail, wait_until; failed=0

tiny_model "$tmp/tiny" --dtype f16 --seed 5 || { fail model-init "$(cat "$tmp/tiny.log")"; exit 1; }

"$bin" up --data-dir "$tmp/up" --port 0 --sim-nodes 1 >"$tmp/up.log" 2>&1 &
up_pid=$!
wait_until 30 grep -qs "aicloud up: ready" "$tmp/up.log" || { fail up "$(tail -5 "$tmp/up.log")"; exit 1; }
url=$(jq -r .server "$AICLOUD_CONFIG")
pass "up ($url)"

cat >"$tmp/setup.yaml" <<EOF
apiVersion: aicloud/v1
kind: Tenant
metadata: {name: acme}
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
kind: User
metadata: {name: edge}
---
apiVersion: aicloud/v1
kind: User
metadata: {name: plain}
---
apiVersion: aicloud/v1
kind: RoleBinding
metadata: {name: edge-gateway}
spec: {role: gateway, subjects: [edge]}
---
apiVersion: aicloud/v1
kind: Deployment
metadata: {name: chat, tenant: acme}
spec:
  model: $tmp/tiny
  replicas: {min: 0, max: 2}
  profile: latency
  scaleToZeroSeconds: 10
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
edge=$("$bin" key create --user edge 2>/dev/null)
plain=$("$bin" key create --user plain 2>/dev/null)
[ -n "$acme" ] && [ -n "$other" ] && [ -n "$lean" ] && [ -n "$edge" ] && pass keys || { fail keys "key create failed"; exit 1; }

# 1. A gateway will not start on a key the server refuses, and says why.
c=refuses-bad-key
out=$("$bin" gateway --server "$url" --token aic_000000000000_$(printf '0%.0s' $(seq 64)) --listen 127.0.0.1:0 2>&1); rc=$?
[ $rc != 0 ] && grep -q "unknown key" <<<"$out" && pass $c || fail $c "exit $rc: $out"
c=refuses-key-without-gateway-role
out=$("$bin" gateway --server "$url" --token "$plain" --listen 127.0.0.1:0 2>&1); rc=$?
[ $rc != 0 ] && grep -q "user plain has no role granting get on gateway" <<<"$out" && pass $c || fail $c "exit $rc: $out"
c=refuses-tenant-key
out=$("$bin" gateway --server "$url" --token "$acme" --listen 127.0.0.1:0 2>&1); rc=$?
[ $rc != 0 ] && grep -q "restricted to tenant acme and cannot get on gateway" <<<"$out" && pass $c || fail $c "exit $rc: $out"

# 2. Two gateways on the server's state.
start_gateway() {  # start_gateway N: starts one, sets gw_url_N
  "$bin" gateway --server "$url" --token "$edge" --listen 127.0.0.1:0 --usage-log "$tmp/usage$1.jsonl" \
    >"$tmp/gw$1.log" 2>&1 &
  gw_pids+=($!)
  wait_until 20 grep -qs "listening on" "$tmp/gw$1.log" || { fail "gateway-$1" "$(cat "$tmp/gw$1.log")"; exit 1; }
  eval "gw_url_$1=\$(sed -n 's/.*listening on //p' \"\$tmp/gw\$1.log\")"
}
start_gateway 1
start_gateway 2
pass "gateways ($gw_url_1, $gw_url_2: $(head -1 "$tmp/gw1.log"))"

chat() {  # chat GATEWAY_URL KEY MODEL MAX_TOKENS [stream]
  curl -sS -m 120 -w '\n%{http_code}' "$1/v1/chat/completions" -H "Authorization: Bearer $2" \
    -H 'Content-Type: application/json' \
    -d "{\"model\":\"$3\",\"max_tokens\":$4,\"stream\":${5:-false},\"messages\":[{\"role\":\"user\",\"content\":\"hello there\"}]}"
}
dep_field() { "$bin" get deployment "$1" -t "$2" -o json 2>/dev/null | jq -r "$3"; }
wait_until 20 sh -c "curl -sS '$gw_url_1/v1/models' -H 'Authorization: Bearer $acme' | jq -e '.data[] | select(.id == \"chat\")' >/dev/null" \
  || { fail routable "$(curl -sS "$gw_url_1/v1/models" -H "Authorization: Bearer $acme")"; exit 1; }

# 3. Scale from zero through a standalone gateway.
c=scale-from-zero
[ "$(dep_field chat acme '.status.replicas // 0')" = 0 ] || fail $c "replicas before the first request: $(dep_field chat acme .status)"
t0=$SECONDS
out=$(chat "$gw_url_1" "$acme" chat 16 true)
code=$(tail -1 <<<"$out")
chunks=$(grep -c '^data: {' <<<"$out")
if [ "$code" = 200 ] && [ "$chunks" -ge 2 ] && grep -q '^data: \[DONE\]' <<<"$out"; then
  pass "$c (held $((SECONDS - t0)) s, $chunks SSE chunks)"
else
  fail $c "HTTP $code, $chunks chunks: $(head -c 400 <<<"$out")"
fi
code=$(chat "$gw_url_2" "$acme" chat 4 | tail -1)
[ "$code" = 200 ] && pass second-gateway-routes || fail second-gateway-routes "HTTP $code"

curl -sS "$gw_url_2/metrics" | grep -q '^aicloud_gateway_link_connected 1' && pass link-metrics \
  || fail link-metrics "$(curl -sS "$gw_url_2/metrics" | grep aicloud_gateway_link)"

# 4. RBAC from the server's keys.
c=models-per-tenant
m_acme=$(curl -sS "$gw_url_2/v1/models" -H "Authorization: Bearer $acme" | jq -r '[.data[].id] | join(",")')
m_other=$(curl -sS "$gw_url_2/v1/models" -H "Authorization: Bearer $other" | jq -r '[.data[].id] | join(",")')
[ "$m_acme" = chat ] && [ -z "$m_other" ] && pass $c || fail $c "acme sees '$m_acme', other sees '$m_other'"
code=$(chat "$gw_url_2" "$other" chat 4 | tail -1)
[ "$code" = 403 ] && pass other-tenant-403 || fail other-tenant-403 "HTTP $code"
code=$(chat "$gw_url_2" "aic_000000000000_$(printf 'a%.0s' $(seq 64))" chat 4 | tail -1)
[ "$code" = 401 ] && pass unknown-key-401 || fail unknown-key-401 "HTTP $code"

# 5. One budget across both gateways: lean may spend 400 tokens; 60 concurrent requests of up to
# 30 tokens each, every other one through the other gateway.
c=budget-across-gateways
wait_until 60 sh -c "[ \"\$('$bin' get deployment mini -t lean -o json 2>/dev/null | jq -r .status.readyReplicas)\" = 1 ]" \
  || fail $c "mini never became ready"
wait_until 20 sh -c "curl -sS '$gw_url_2/v1/models' -H 'Authorization: Bearer $lean' | jq -e '.data[] | select(.id == \"mini\")' >/dev/null"
seq 60 | xargs -P 60 -I{} sh -c "g=\$(( {} % 2 )); u=\$( [ \$g = 0 ] && echo '$gw_url_1' || echo '$gw_url_2'); curl -sS -m 120 -o $tmp/b{}.json -w '%{http_code}\n' \"\$u/v1/chat/completions\" -H 'Authorization: Bearer $lean' -H 'Content-Type: application/json' -d '{\"model\":\"mini\",\"max_tokens\":30,\"messages\":[{\"role\":\"user\",\"content\":\"x {}\"}]}'" >"$tmp/codes.txt"
ok=$(grep -c '^200$' "$tmp/codes.txt")
limited=$(grep -c '^429$' "$tmp/codes.txt")
spent=$(cat "$tmp"/b*.json 2>/dev/null | jq -s '[.[] | select(.usage) | .usage.total_tokens] | add // 0')
answered_by() { sed 's/^usage //' "$tmp/usage$1.jsonl" | jq -s '[.[] | select(.tenant == "lean" and .status == 200)] | length'; }
sleep 0.5  # the usage logs are written every 100 ms
by_gw="$(answered_by 1) and $(answered_by 2)"
if [ "$ok" -ge 2 ] && [ "$limited" -ge 1 ] && [ "$spent" -le 400 ]; then
  pass "$c ($ok answered, $limited refused with 429, $spent of 400 tokens spent; answered by gateway 1 and 2: $by_gw)"
else
  fail $c "$ok answered, $limited limited, $spent tokens spent; codes: $(sort "$tmp/codes.txt" | uniq -c | tr '\n' ' ')"
fi
msg=$(cat "$tmp"/b*.json | jq -r 'select(.error) | .error.message' | head -1)
grep -qi budget <<<"$msg" && pass budget-message || fail budget-message "'$msg'"
c=budget-on-server
stored=$(curl -sS "$url/api/v1/gateway/objects/GatewayBudget?tenant=lean" -H "Authorization: Bearer $(jq -r .token "$AICLOUD_CONFIG")" \
  | jq '[.items[] | select(.spec.scope == "tenant lean") | .status.spentTokens] | add // 0')
wait_until 10 sh -c "[ \$(curl -sS '$url/api/v1/gateway/objects/GatewayBudget?tenant=lean' -H 'Authorization: Bearer $(jq -r .token "$AICLOUD_CONFIG")' | jq '[.items[] | select(.spec.scope == \"tenant lean\") | .status.spentTokens] | add // 0') = $spent ]" \
  && pass "$c (GatewayBudget of tenant lean: $spent tokens spent)" || fail $c "stored $stored, answered $spent"

# Both gateways' usage records add up in the tenant's serving usage on the server (summed every
# 5 s): the tokens the answers reported, and every request, refusals included.
c=usage-on-server
served() { curl -sS "$url/api/v1/usage?tenant=lean&since=1d" -H "Authorization: Bearer $(jq -r .token "$AICLOUD_CONFIG")" \
  | jq -c '.tenants.lean.serving // {}'; }
if wait_until 20 sh -c "[ \"\$(curl -sS '$url/api/v1/usage?tenant=lean&since=1d' -H 'Authorization: Bearer $(jq -r .token "$AICLOUD_CONFIG")' | jq '.tenants.lean.serving | (.promptTokens + .completionTokens), .requests' | tr '\n' ' ')\" = '$spent 60 ' ]"; then
  pass "$c ($(served))"
else
  fail $c "expected $spent tokens in 60 requests: $(served)"
fi
"$bin" usage --since 1d -A >"$tmp/usage.txt" 2>&1
grep -qE '^lean +mini +60 ' "$tmp/usage.txt" && pass usage-table || fail usage-table "$(cat "$tmp/usage.txt")"

# 6. A key revoked on the server stops working at the gateways.
c=revoked-key
acme_id=$(cut -d_ -f2 <<<"$acme")
"$bin" key revoke "$acme_id" >/dev/null 2>&1 || fail $c "revoke failed"
if wait_until 10 sh -c "[ \"\$(curl -sS -o /dev/null -w '%{http_code}' '$gw_url_1/v1/models' -H 'Authorization: Bearer $acme')\" = 401 ]"; then
  pass $c
else
  fail $c "gateway 1 still answers $(curl -sS -o /dev/null -w '%{http_code}' "$gw_url_1/v1/models" -H "Authorization: Bearer $acme")"
fi
acme=$("$bin" key create --user admin -t acme 2>/dev/null)
# Both gateways learn the new key (each on its own watch of the server); the next step uses both.
accepts() { [ "$(curl -sS -o /dev/null -w '%{http_code}' "$1/v1/models" -H "Authorization: Bearer $acme")" = 200 ]; }
wait_until 10 accepts "$gw_url_1" && wait_until 10 accepts "$gw_url_2" \
  && pass new-key-accepted || fail new-key-accepted "a gateway refuses the new key"

# 7. The gateways' requests count as activity: a request every 2 s, through either gateway, for
# longer than scaleToZeroSeconds (10 s) keeps the replica (the engine is busy only a moment of
# each, so its own metrics would not).
c=activity-keeps-warm
for i in $(seq 8); do
  g=$([ $((i % 2)) = 0 ] && echo "$gw_url_1" || echo "$gw_url_2")
  code=$(chat "$g" "$acme" chat 2 | tail -1)
  [ "$code" = 200 ] || { fail $c "request $i: HTTP $code"; break; }
  sleep 2
done
[ "$(dep_field chat acme .status.replicas)" = 1 ] && pass "$c (16 s of sparse requests, still 1 replica)" \
  || fail $c "$(dep_field chat acme '.status | del(.history)')"

# 8. Idle: without requests the deployment goes to zero.
c=idle-to-zero
if wait_until 90 sh -c "[ \"\$('$bin' get deployment chat -t acme -o json 2>/dev/null | jq -r .status.replicas)\" = 0 ]"; then
  pass "$c ($(dep_field chat acme .status.lastScale.reason))"
else
  fail $c "$(dep_field chat acme .status)"
fi

# 9. The server stops: the gateways keep their last state (the replicas went with `aicloud up`'s
# node, so what is left to show is the routes and keys still in force) and say they lost it.
c=serves-without-server
stop_pid "$up_pid"
up_pid=
m=$(curl -sS -m 10 "$gw_url_1/v1/models" -H "Authorization: Bearer $lean" | jq -r '[.data[].id] | join(",")')
[ "$m" = mini ] && pass "$c (/v1/models: $m)" || fail $c "/v1/models: '$m'"
wait_until 10 grep -q "retrying" "$tmp/gw1.log" && pass "server-loss-logged ($(grep retrying "$tmp/gw1.log" | head -1))" \
  || fail server-loss-logged "$(tail -3 "$tmp/gw1.log")"

[ $failed = 0 ] && echo "e2e_gateway_link: all checks passed" || { echo "e2e_gateway_link: FAILED"; tail -20 "$tmp/up.log"; tail -5 "$tmp/gw1.log"; }
exit $failed
