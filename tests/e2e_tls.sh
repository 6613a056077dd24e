#!/usr/bin/env bash
# End to end, a cluster with TLS: `aicloud up --tls-cert/--tls-key` (a self-signed certificate
# made here with openssl), its simulated node's agent and the CLI over https, and a Deployment whose
# replica serves HTTPS with the certificate the cluster's replica CA issued it. Checks: the
# replica is reached over https (unary and streamed through the front door); its port refuses
# plain HTTP and, over TLS, anything without its secret; its certificate names the node's address
# and comes from the replica CA; its key is a 0600 file of the tenant's sandbox uid; no Job shows
# a private key.
#
#   tests/e2e_tls.sh path/to/aicloud
#
# Needs curl, jq, openssl. Prints PASS/FAIL lines; exits 1 when a check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:?usage: tests/e2e_tls.sh path/to/aicloud}")
for tool in curl jq openssl; do
  command -v "$tool" >/dev/null || { echo "FAIL prerequisites: $tool not found"; exit 1; }
done
tmp=$(mktemp -d /tmp/aicloud-tls.XXXXXX)
chmod 755 "$tmp"  # the sandboxed replica (a tenant uid) reads the model inside
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

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$tmp/key.pem" -out "$tmp/cert.pem" \
  -days 2 -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1" >"$tmp/openssl.log" 2>&1 ||
  { fail certificate "$(cat "$tmp/openssl.log")"; exit 1; }
tiny_model "$tmp/tiny" --dtype f16 --seed 3 || { fail model-init "$(cat "$tmp/tiny.log")"; exit 1; }

"$bin" up --data-dir "$tmp/up" --port 0 --sim-nodes 1 --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem" \
  >"$tmp/up.log" 2>&1 &
up_pid=$!
wait_until 30 grep -qs "aicloud up: ready" "$tmp/up.log" || { fail up "$(tail -5 "$tmp/up.log")"; exit 1; }
url=$(jq -r .server "$AICLOUD_CONFIG")
[[ "$url" == https://* ]] && pass "up over https ($url)" || fail up-https "server $url"

cat >"$tmp/chat.yaml" <<YAML
apiVersion: aicloud/v1
kind: Deployment
metadata: {name: chat, tenant: demo}
spec:
  model: $tmp/tiny
  replicas: {min: 1, max: 1}
  resources: {cpu: "1", memory: 1Gi}
  engine: {threads: 1, kvCacheGiB: 0.05}
YAML
"$bin" apply -f "$tmp/chat.yaml" >"$tmp/apply.log" 2>&1 && pass "cli over https" || { fail apply "$(cat "$tmp/apply.log")"; exit 1; }
key=$("$bin" key create --user admin -t demo 2>/dev/null)
ready() { [ "$("$bin" get deployment chat -t demo -o json 2>/dev/null | jq -r '.status.readyReplicas // 0')" = 1 ]; }
wait_until 60 ready || { fail replica-ready "$("$bin" get deployment chat -t demo -o json 2>&1 | jq -c .status)"; exit 1; }
rep_url=$("$bin" get deployment chat -t demo -o json | jq -r '.status.endpoints[0].url')
[[ "$rep_url" == https://127.0.0.1:* ]] && pass "replica ready at $rep_url" || fail replica-https "endpoint $rep_url"

c=front-door-to-tls-replica
body='{"model":"chat","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}'
unary=$(curl -sS --cacert "$tmp/cert.pem" -w '\n%{http_code}' "$url/v1/chat/completions" -H "Authorization: Bearer $key" \
  -H 'Content-Type: application/json' -d "$body")
stream=$(curl -sS -N --cacert "$tmp/cert.pem" -w '\n%{http_code}' "$url/v1/chat/completions" -H "Authorization: Bearer $key" \
  -H 'Content-Type: application/json' -d "${body%\}},\"stream\":true}")
if [ "$(tail -1 <<<"$unary")" = 200 ] && [ "$(tail -1 <<<"$stream")" = 200 ] && grep -q '^data: \[DONE\]' <<<"$stream"; then
  pass $c
else
  fail $c "unary: $(head -c 200 <<<"$unary"); stream: $(head -c 200 <<<"$stream")"
fi

c=replica-refuses-plain-http-and-callers-without-its-secret
hostport=${rep_url#https://}
plain=$(curl -sS -m 5 -o /dev/null -w '%{http_code}' "http://$hostport/health" 2>/dev/null)
tls=$(curl -sS -m 5 -k -o /dev/null -w '%{http_code}' "https://$hostport/health" -H "Authorization: Bearer $key")
[ "$plain" != 200 ] && [ "$plain" != 401 ] && [ "$tls" = 401 ] && pass $c || fail $c "plain http: $plain, https with a tenant key: $tls"

c=replica-certificate
openssl s_client -connect "$hostport" -servername 127.0.0.1 </dev/null 2>/dev/null | openssl x509 -noout -issuer -ext subjectAltName \
  >"$tmp/peer.txt" 2>&1
if grep -q "IP Address:127.0.0.1" "$tmp/peer.txt" && grep -qi "replica" "$tmp/peer.txt"; then
  pass "$c ($(grep -i issuer "$tmp/peer.txt"))"
else
  fail $c "$(cat "$tmp/peer.txt")"
fi

c=replica-key-file
keyfile=$(find "$tmp/up/agents" -name tls-key.pem 2>/dev/null | head -1)
perm=$( [ -n "$keyfile" ] && stat -c '%a %u' "$keyfile")
[ -n "$keyfile" ] && [ "${perm%% *}" = 600 ] && [ "${perm##* }" != 0 ] && pass "$c ($perm)" || fail $c "'$keyfile': '$perm'"

c=no-private-key-in-jobs
"$bin" get jobs -t demo -o json >"$tmp/jobs.json" 2>&1
grep -q "PRIVATE KEY\|AICLOUD_REPLICA_SECRET" "$tmp/jobs.json" && fail $c "a Job shows a key or the replica secret" || pass $c

[ $failed = 0 ] && echo "e2e_tls: all checks passed" || { echo "e2e_tls: FAILED"; tail -30 "$tmp/up.log"; }
exit $failed
