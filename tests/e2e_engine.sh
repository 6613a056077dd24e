#!/usr/bin/env bash
# End-to-end test of the serving engine: `aicloud model init` writes a small random-weight
# checkpoint with GPT-2's tokenizer, `aicloud engine` serves it on loopback, and curl talks the
# OpenAI API to it. Also `aicloud engine generate` against the server's own greedy answer.
# Usage: tests/e2e_engine.sh path/to/aicloud   (run from the repository root by ctest)
# Needs curl and jq. Prints PASS/FAIL per check and exits 1 when any failed.
set -u
bin=$(realpath "${1:?usage: tests/e2e_engine.sh path/to/aicloud}")
for tool in curl jq; do
  command -v "$tool" >/dev/null || { echo "FAIL prerequisites: $tool not found"; exit 1; }
done
tmp=$(mktemp -d /tmp/aicloud-engine-e2e.XXXXXX)
engine_pid=
cleanup() {
  [ -n "$engine_pid" ] && kill -KILL "$engine_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
failed=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; failed=1; }

c=model-init
if "$bin" model init --arch llama --hidden 64 --layers 2 --heads 4 --kv-heads 2 --intermediate 128 \
    --vocab-from data/tokenizers/gpt2/tokenizer.json --out "$tmp/tiny" --dtype f16 --seed 3 >"$tmp/init.log" 2>&1; then
  pass $c
else
  fail $c "$(cat "$tmp/init.log")"; exit 1
fi

c=engine-start
"$bin" engine --model "$tmp/tiny" --port 0 --kv-cache-gib 0.05 --max-waiting 64 >"$tmp/engine.log" 2>&1 &
engine_pid=$!
for _ in $(seq 200); do grep -q "listening on" "$tmp/engine.log" && break; sleep 0.1; done
url=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$tmp/engine.log" | head -1)
if [ -n "$url" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" = 200 ]; then
  pass "$c ($(head -1 "$tmp/engine.log"))"
else
  fail $c "$(cat "$tmp/engine.log")"; exit 1
fi

c=models
[ "$(curl -s "$url/v1/models" | jq -r '.data[0].id')" = tiny ] && pass $c || fail $c "$(curl -s "$url/v1/models")"

c=completion-vs-generate
body='{"model":"tiny","prompt":[15496,11,995],"max_tokens":8,"temperature":0,"ignore_eos":true,"logprobs":0}'
resp=$(curl -s "$url/v1/completions" -H 'Content-Type: application/json' -d "$body")
text=$(jq -r '.choices[0].text' <<<"$resp")
ids=$(curl -s "$url/tokenize" -d "$(jq -n --arg p "$text" '{prompt: $p, add_special_tokens: false}')" | jq -r '.tokens | join(",")')
gen=$("$bin" engine generate --model "$tmp/tiny" --prompt-ids 15496,11,995 --max-tokens 8 --greedy 2>"$tmp/gen.err")
gen_text=$(curl -s "$url/detokenize" -d "{\"tokens\":[$gen]}" | jq -r .prompt)
if [ "$(jq -r '.usage.completion_tokens' <<<"$resp")" = 8 ] && [ "$gen_text" = "$text" ] &&
   [ "$(jq '.choices[0].logprobs.token_logprobs | length' <<<"$resp")" = 8 ]; then
  pass "$c (generate: $gen)"
else
  fail $c "server: $resp / generate: $gen ($(cat "$tmp/gen.err")) -> '$gen_text' / retokenized '$ids'"
fi

c=streaming
curl -sN "$url/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model":"tiny","messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' >"$tmp/sse"
chunks=$(grep -c '^data: {' "$tmp/sse")
if [ "$(tail -n 2 "$tmp/sse" | head -1)" = "data: [DONE]" ] && [ "$chunks" -ge 3 ] &&
   grep '^data: {' "$tmp/sse" | tail -1 | sed 's/^data: //' | jq -e '.usage.completion_tokens == 6' >/dev/null; then
  pass "$c ($chunks chunks)"
else
  fail $c "$(cat "$tmp/sse")"
fi

c=bad-input
ok=1
check() {  # check WANT_STATUS BODY [PATH]
  local got
  got=$(curl -s -o "$tmp/err" -w '%{http_code}' "$url${3:-/v1/completions}" -H 'Content-Type: application/json' -d "$2")
  if [ "$got" != "$1" ] || ! jq -e '.error.message | type == "string"' "$tmp/err" >/dev/null 2>&1; then
    ok=0; echo "  $2 -> HTTP $got $(head -c 300 "$tmp/err")"
  fi
}
check 400 '{"model":"tiny","prompt":"x","top_p":7}'
check 400 '{"model":"tiny"'
check 404 '{"model":"gpt-4","prompt":"x"}'
check 400 '{"model":"tiny","prompt":"x","n":17}'
check 400 '{"model":"tiny","prompt":"x","guided_json":{"type":"object","not":{}}}'
check 400 '{"model":"tiny","messages":"hi"}' /v1/chat/completions
[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" = 200 ] || { ok=0; echo "  not healthy after bad input"; }
[ $ok = 1 ] && pass $c || fail $c "see above"

c=metrics
m=$(curl -s "$url/metrics")
ok=1
for name in vllm:num_requests_running vllm:kv_cache_usage_perc vllm:time_to_first_token_seconds_count \
            vllm:generation_tokens_total vllm:request_success_total; do
  grep -q "^$name" <<<"$m" || { ok=0; echo "  missing $name"; }
done
[ $ok = 1 ] && pass $c || fail $c "see above"

c=graceful-stop
kill -TERM "$engine_pid"
for _ in $(seq 50); do kill -0 "$engine_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$engine_pid" 2>/dev/null; then fail $c "still running 5 s after SIGTERM"; else pass $c; fi
wait "$engine_pid" 2>/dev/null
engine_pid=

echo "---"
[ $failed = 0 ] && echo "all engine checks passed" || echo "engine checks FAILED"
exit $failed
