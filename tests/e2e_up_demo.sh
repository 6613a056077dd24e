#!/usr/bin/env bash
# End-to-end test of Quick start's main job, `aicloud up --demo --exit-after-demo`: the 2-worker
# GPU job runs, then the serving demo deploys a random-weight model with min 0 replicas, a
# streaming chat request is held while a replica starts and streams back, another tenant's key
# gets 403, and the deployment scales back to zero. Run twice on one data directory (the second
# run reuses the model and the deployment), then with a missing tokenizer (a clear error, exit 1).
# Last, the README's "Serving a model" commands with examples/deployment.yaml.
# Usage: tests/e2e_up_demo.sh path/to/aicloud   (run from the repository root by ctest)
# Needs curl and jq.
set -u
bin=$(realpath "${1:?usage: tests/e2e_up_demo.sh path/to/aicloud}")
for tool in curl jq; do
  command -v "$tool" >/dev/null || { echo "FAIL prerequisites: $tool not found"; exit 1; }
done
tmp=$(mktemp -d /tmp/aicloud-updemo.XXXXXX)
# Agents run jobs and replicas as sandbox uids (not root): they must pass through $tmp.
chmod 755 "$tmp"
up_pid=
cleanup() {
  [ -n "$up_pid" ] && kill -TERM "$up_pid" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$up_pid" 2>/dev/null || break; sleep 0.1; done
  [ -n "$up_pid" ] && kill -KILL "$up_pid" 2>/dev/null
  pkill -KILL -f "engine --model $tmp/" 2>/dev/null
  wait 2>/dev/null
  if [ "${E2E_KEEP:-0}" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap 'cleanup 2>/dev/null' EXIT
trap 'exit 1' INT TERM
export AICLOUD_CONFIG=$tmp/admin.json
. "$(dirname "$0")/e2e_lib.sh"  # pass, fail, wait_until; failed=0

demo() {  # demo NAME [flags...]: runs the demo, output in $tmp/NAME.out, exit code in $rc
  local name=$1; shift
  timeout 240 "$bin" up --data-dir "$tmp/up" --port 0 --sim-nodes 1 --demo --exit-after-demo "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err"
  rc=$?
}
has() { grep -qE "$2" "$tmp/$1.out"; }

for run in first again; do
  demo $run
  if [ $rc = 0 ]; then pass "$run: exit 0"; else fail "$run: exit" "$rc: $(tail -5 "$tmp/$run.err")"; fi
  has $run 'job hello-[0-9]+: Succeeded' && has $run '^worker 1 of 2 on GPUs' && pass "$run: job" \
    || fail "$run: job" "$(grep -m3 'job hello' "$tmp/$run.out")"
  has $run 'lists chat; replicas now: 0' && pass "$run: starts at zero" \
    || fail "$run: starts at zero" "$(grep -m1 'GET /v1/models' "$tmp/$run.out")"
  line=$(grep -m1 -E '^  [0-9]+ tokens in' "$tmp/$run.out")
  if has $run 'first token after [0-9.]+ s' && [[ "$line" =~ ^\ \ 24\ tokens\ in.*now\ has\ [12]\ replica.*held\ at\ the\ gateway ]]; then
    pass "$run: held, replica started, streamed ($line)"
  else
    fail "$run: streamed" "'$line'; $(tail -3 "$tmp/$run.err")"
  fi
  has $run "tenant other's key: HTTP 403, \".*may not use model \`chat\`\"" && pass "$run: other tenant 403" \
    || fail "$run: other tenant 403" "$(grep -m1 'tenant other' "$tmp/$run.out")"
  has $run "tenant other's key revoked" && pass "$run: other's key revoked" \
    || fail "$run: other's key revoked" "$(grep -m1 'could not revoke' "$tmp/$run.err")"
  has $run 'the same request with the revoked key: HTTP 401, "key revoked"' && pass "$run: revoked key 401" \
    || fail "$run: revoked key 401" "$(grep -m1 -E 'revoked key' "$tmp/$run.out" "$tmp/$run.err")"
  has $run 'deployment chat: 0 replicas after [0-9.]+ s \("no requests for' && pass "$run: scaled to zero" \
    || fail "$run: scaled to zero" "$(tail -3 "$tmp/$run.out")"
done
has first 'written to .*/models/demo-chat' && has again 'demo-chat \(written by an earlier demo\)' \
  && has again 'deployment demo/chat: exists' && pass "again: model and deployment reused" \
  || fail "again: reused" "$(grep -E 'model:|deployment demo' "$tmp/again.out" | head -2)"

# A tokenizer that is not there: the serving demo stops at once with the reason, exit 1.
rm -rf "$tmp/up/models"
demo notok --demo-tokenizer "$tmp/nope/tokenizer.json"
if [ $rc = 1 ] && grep -q "serving demo failed: the demo model's vocabulary comes from $tmp/nope/tokenizer.json, which does not exist" "$tmp/notok.err" \
   && grep -q -- '--demo-tokenizer FILE' "$tmp/notok.err"; then
  pass "missing tokenizer: exit 1 with the reason"
else
  fail "missing tokenizer" "exit $rc: $(tail -3 "$tmp/notok.err")"
fi

# The README's "Serving a model": up, model init, apply examples/deployment.yaml, a key, curl.
"$bin" up --data-dir "$tmp/up2" --port 0 --sim-nodes 1 >"$tmp/up2.log" 2>&1 &
up_pid=$!
c=readme-serving
if ! wait_until 30 grep -qs "aicloud up: ready" "$tmp/up2.log"; then
  fail $c "up: $(tail -5 "$tmp/up2.log")"
else
  tiny_model "$tmp/tiny" || fail $c "model init: $(cat "$tmp/tiny.log")"
  sed "s|model: /tmp/tiny |model: $tmp/tiny |" examples/deployment.yaml >"$tmp/deployment.yaml"
  grep -q "model: $tmp/tiny " "$tmp/deployment.yaml" || fail $c "examples/deployment.yaml no longer names /tmp/tiny"
  "$bin" apply -f "$tmp/deployment.yaml" >"$tmp/apply.log" 2>&1 || fail $c "apply: $(cat "$tmp/apply.log")"
  KEY=$("$bin" key create --user admin -t demo 2>"$tmp/key.err") || fail $c "key create: $(cat "$tmp/key.err")"
  url=$(jq -r .server "$AICLOUD_CONFIG")
  wait_until 30 sh -c "curl -sS '$url/v1/models' -H 'Authorization: Bearer $KEY' | jq -e '.data[] | select(.id == \"chat\")' >/dev/null" \
    || fail $c "chat never listed by /v1/models"
  out=$(curl -sS -N -m 120 -w '\n%{http_code}' "$url/v1/chat/completions" -H "Authorization: Bearer $KEY" \
    -d '{"model":"chat","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"Hi"}]}')
  chunks=$(grep -c '^data: {' <<<"$out")
  if [ "$(tail -1 <<<"$out")" = 200 ] && [ "$chunks" -ge 2 ] && grep -q '^data: \[DONE\]' <<<"$out" &&
     "$bin" get deployments 2>&1 | grep -qE '^chat +demo +1/'; then
    pass "$c ($chunks SSE chunks; $("$bin" get deployments 2>&1 | grep '^chat' | tr -s ' '))"
  else
    fail $c "HTTP $(tail -1 <<<"$out"), $chunks chunks; $("$bin" get deployments 2>&1)"
  fi
fi

[ $failed = 0 ] && echo "e2e_up_demo: all checks passed" || { echo "e2e_up_demo: FAILED"; tail -n 20 "$tmp"/*.err; }
exit $failed
