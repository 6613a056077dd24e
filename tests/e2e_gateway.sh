#!/usr/bin/env bash
# End-to-end test of `aicloud gateway` in front of a real `aicloud engine` (a tiny random-weight
# model): keys, RBAC, a dead replica next to a live one, unary and streaming calls with usage,
# the rpm limit, /v1/models, /metrics, usage records, a clean stop. Then, when nginx is installed
# and the benchmark binary is given, a one-second smoke run of bench/gateway_bench (gateway vs
# nginx) — skipped with a message when nginx is absent.
# Usage: tests/e2e_gateway.sh path/to/aicloud [path/to/gateway_bench]   (from the repo root)
# Needs curl and jq. Prints PASS/FAIL/SKIP per check and exits 1 when any failed.
set -u
bin=$(realpath "${1:?usage: tests/e2e_gateway.sh path/to/aicloud [gateway_bench]}")
bench=${2:-}
for tool in curl jq; do
  command -v "$tool" >/dev/null || { echo "FAIL prerequisites: $tool not found"; exit 1; }
done
tmp=$(mktemp -d /tmp/aicloud-gateway-e2e.XXXXXX)
engine_pid= gw_pid=
cleanup() {
  [ -n "$gw_pid" ] && kill -KILL "$gw_pid" 2>/dev/null
  [ -n "$engine_pid" ] && kill -KILL "$engine_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
failed=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; failed=1; }

c=engine-start
"$bin" model init --arch llama --hidden 64 --layers 2 --heads 4 --kv-heads 2 --intermediate 128 \
  --vocab-from data/tokenizers/gpt2/tokenizer.json --out "$tmp/tiny" --dtype f16 --seed 3 >"$tmp/init.log" 2>&1 ||
  { fail $c "$(cat "$tmp/init.log")"; exit 1; }
"$bin" engine --model "$tmp/tiny" --port 0 --kv-cache-gib 0.05 >"$tmp/engine.log" 2>&1 &
engine_pid=$!
for _ in $(seq 200); do grep -q "listening on" "$tmp/engine.log" && break; sleep 0.1; done
engine=$(grep -o '127\.0\.0\.1:[0-9]*' "$tmp/engine.log" | head -1)
[ -n "$engine" ] && pass "$c ($engine)" || { fail $c "$(cat "$tmp/engine.log")"; exit 1; }

# A port nothing listens on: the gateway must retry the live replica.
dead=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$tmp/upstreams.yaml" <<YAML
models:
  - model: tiny
    tenant: nlp
    replicas:
      - {id: dead, url: 127.0.0.1:$dead}
      - {id: live, url: $engine}
  - model: vision
    base_model: tiny
    tenant: cv
    replicas: [$engine]
tenants:
  nlp: {budget: {tokens: 100000, period: 1d}}
keys:
  - {key: sk-nlp, id: nlp-key, tenant: nlp, rpm: 8}
  - {key: sk-cv, id: cv-key, tenant: cv}
YAML

c=gateway-start
"$bin" gateway --upstreams "$tmp/upstreams.yaml" --listen 127.0.0.1:0 --policy round-robin \
  --usage-log "$tmp/usage.jsonl" >"$tmp/gw.log" 2>&1 &
gw_pid=$!
for _ in $(seq 100); do grep -q "listening on" "$tmp/gw.log" && break; sleep 0.1; done
url=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$tmp/gw.log" | head -1)
if [ -n "$url" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" = 200 ]; then
  pass "$c ($(head -1 "$tmp/gw.log"))"
else
  fail $c "$(cat "$tmp/gw.log")"; exit 1
fi

c=bad-upstreams-file
printf 'models:\n  - {model: m}\n' >"$tmp/bad.yaml"
out=$("$bin" gateway --upstreams "$tmp/bad.yaml" 2>&1)
[ $? -ne 0 ] && grep -q 'models\[0\].tenant: required' <<<"$out" && pass $c || fail $c "$out"

chat='{"model":"tiny","messages":[{"role":"user","content":"Hi"}],"max_tokens":5,"temperature":0,"ignore_eos":true}'
post() {  # post KEY BODY -> writes body to $tmp/out, prints status
  curl -s -o "$tmp/out" -D "$tmp/headers" -w '%{http_code}' "$url/v1/chat/completions" \
    -H "Authorization: Bearer $1" -H 'Content-Type: application/json' -d "$2"
}

c=unauthenticated
[ "$(post wrong "$chat")" = 401 ] && jq -e '.error.type == "authentication_error"' "$tmp/out" >/dev/null &&
  pass $c || fail $c "$(cat "$tmp/out")"

c=forbidden-other-tenant
[ "$(post sk-cv "$chat")" = 403 ] && jq -e '.error.type == "permission_denied_error"' "$tmp/out" >/dev/null &&
  pass $c || fail $c "$(cat "$tmp/out")"

c=models-per-key
m1=$(curl -s "$url/v1/models" -H 'Authorization: Bearer sk-nlp' | jq -c '[.data[].id]')
m2=$(curl -s "$url/v1/models" -H 'Authorization: Bearer sk-cv' | jq -c '[.data[].id]')
[ "$m1" = '["tiny"]' ] && [ "$m2" = '["vision"]' ] && pass $c || fail $c "$m1 / $m2"

c=unary-with-retry
ok=1
for i in 1 2 3; do
  s=$(post sk-nlp "$chat")
  if [ "$s" != 200 ] || ! jq -e '.usage.completion_tokens == 5' "$tmp/out" >/dev/null ||
     ! grep -qi '^x-aicloud-replica: live' "$tmp/headers"; then
    ok=0; echo "  request $i: HTTP $s $(head -c 300 "$tmp/out")"
  fi
done
[ $ok = 1 ] && pass $c || fail $c "see above"

c=alias-to-engine-name
[ "$(post sk-cv "${chat/\"tiny\"/\"vision\"}")" = 200 ] && pass $c || fail $c "$(cat "$tmp/out")"

c=streaming
curl -sN "$url/v1/chat/completions" -H 'Authorization: Bearer sk-nlp' -H 'Content-Type: application/json' \
  -d '{"model":"tiny","messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"temperature":0,"ignore_eos":true,"stream":true}' >"$tmp/sse"
# The role chunk, then content (tokens generated while the client was not reading arrive
# together in one chunk on a busy machine, so count content, not chunks).
chunks=$(grep -c '^data: {' "$tmp/sse")
content=$(grep '^data: {' "$tmp/sse" | sed 's/^data: //' | jq -r '.choices[0].delta.content // ""' | tr -d '\n')
if [ "$(grep '^data:' "$tmp/sse" | tail -1)" = "data: [DONE]" ] && [ "$chunks" -ge 2 ] && [ -n "$content" ] &&
   ! grep -q '"usage"' "$tmp/sse"; then
  pass "$c ($chunks chunks)"
else
  fail $c "$(cat "$tmp/sse")"
fi

c=rpm-limit
codes=""
# Stop at the first 429 so its body is the one checked (on a slow machine the window can roll
# past the first requests of this script and let a later one through).
for i in $(seq 6); do
  code=$(post sk-nlp "$chat"); codes="$codes $code"
  [ "$code" = 429 ] && break
done
if grep -q 429 <<<"$codes" && jq -e '.error.message | test("key nlp-key allows 8 requests per minute")' "$tmp/out" >/dev/null &&
   grep -qi '^retry-after: [0-9]' "$tmp/headers"; then
  pass "$c ($codes)"
else
  fail $c "$codes $(cat "$tmp/out")"
fi

c=metrics
m=$(curl -s "$url/metrics")
grep -q 'aicloud_gateway_requests_total{model="tiny",code="200"}' <<<"$m" &&
  grep -q 'aicloud_gateway_upstream_retries_total{deployment="tiny"}' <<<"$m" &&
  grep -q 'aicloud_gateway_rejected_total{reason="rate_limit"}' <<<"$m" && pass $c || fail $c "$m"

c=stop
kill -TERM "$gw_pid"
for _ in $(seq 50); do kill -0 "$gw_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$gw_pid" 2>/dev/null; then fail $c "still running 5 s after SIGTERM"; else gw_pid=; pass $c; fi

c=usage-records
n=$(grep -c '^usage {' "$tmp/usage.jsonl")
streamed=$(grep '^usage {' "$tmp/usage.jsonl" | sed 's/^usage //' | jq -s '[.[] | select(.stream and .usage_reported and .completion_tokens == 6)] | length')
[ "$n" -ge 10 ] && [ "$streamed" = 1 ] && pass "$c ($n records)" || fail $c "$n records, streamed=$streamed: $(head -3 "$tmp/usage.jsonl")"

c=bench-smoke-vs-nginx
if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
  echo "SKIP $c: nginx is not installed (scripts/setup installs nginx-light)"
elif [ -z "$bench" ]; then
  echo "SKIP $c: no gateway_bench binary given (AICLOUD_BUILD_BENCH=OFF)"
else
  out=$("$bench" --rate 300 --seconds 1 --warmup 0.2 --rounds 1 --connections 8 2>&1)
  if grep -q '^nginx ' <<<"$out" && grep -q '^gateway ' <<<"$out" &&
     awk '/^(direct|gateway|nginx) +[0-9]/ { if ($6 != 0) bad=1 } END { exit bad }' <<<"$out"; then
    pass $c
  else
    fail $c "$out"
  fi
fi

[ $failed = 0 ] && echo "e2e_gateway: all checks passed" || echo "e2e_gateway: FAILED"
exit $failed
