#!/usr/bin/env bash
# Durability of acknowledged submissions: the real `aicloud server` is killed with SIGKILL while
# 1,000 job submissions arrive on 32 concurrent connections, then restarted on the same data dir.
# Every submission the server acknowledged (HTTP 201) must be there after the restart, exactly
# once, with the uid it was acknowledged with; the audit chain must still verify; the restarted
# server must accept more work.
# Usage: tests/e2e_durability.sh path/to/aicloud   (run from the repository root by ctest)
# Needs curl, jq, xargs. Prints PASS/FAIL lines and a summary; exits 1 when a check failed.
set -u
bin=$(realpath "${1:?usage: tests/e2e_durability.sh path/to/aicloud}")
total=${E2E_SUBMISSIONS:-1000}
parallel=${E2E_PARALLEL:-32}
kill_after=${E2E_KILL_AFTER:-$((total / 3))}  # acknowledgements seen before the kill
for tool in curl jq xargs; do
  command -v "$tool" >/dev/null || { echo "FAIL prerequisites: $tool not found"; exit 1; }
done

tmp=$(mktemp -d /tmp/aicloud-durability.XXXXXX)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null
  wait 2>/dev/null
  if [ "${E2E_KEEP:-0}" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

failed=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; failed=1; }

wait_until() {  # wait_until SECONDS CMD...
  local end=$((SECONDS + $1)); shift
  until "$@"; do
    [ $SECONDS -ge $end ] && return 1
    sleep 0.05
  done
}

start_server() {  # start_server LOGFILE [PORT]: sets server_pid and url
  : >"$1"
  "$bin" server --data-dir "$tmp/data" --host 127.0.0.1 --port "${2:-0}" >"$1" 2>&1 &
  server_pid=$!
  wait_until 20 grep -q "aicloud server listening on" "$1" || return 1
  url=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$1" | head -1)
}

if ! start_server "$tmp/server1.log"; then
  fail start "server did not start: $(cat "$tmp/server1.log")"
  exit 1
fi
token=$(awk '/bootstrap admin token/ { getline; print $1; exit }' "$tmp/server1.log")
auth="Authorization: Bearer $token"
code=$(curl -s -o "$tmp/resp" -w '%{http_code}' -H "$auth" -H 'Content-Type: application/json' \
  -X POST "$url/api/v1/tenants" --data-binary '{"metadata":{"name":"d"},"spec":{}}')
[ "$code" = 201 ] || { fail setup "create tenant: HTTP $code $(cat "$tmp/resp")"; exit 1; }

# One line per submission: "<name> <http status> <uid or ->". Lines are short, so the appends
# of concurrent curls do not interleave.
export url auth
submit() {
  local name=$1 body code uid
  body=$(curl -s --max-time 30 -w '\n%{http_code}' -H "$auth" -H 'Content-Type: application/json' \
    -X POST "$url/api/v1/tenants/d/jobs" \
    --data-binary "{\"metadata\":{\"name\":\"$name\"},\"spec\":{\"command\":\"true\"}}" 2>/dev/null)
  code=${body##*$'\n'}
  uid=$(jq -r '.metadata.uid // "-"' <<<"${body%$'\n'*}" 2>/dev/null)
  echo "$name ${code:-000} ${uid:--}"
}
export -f submit
: >"$tmp/acks"

seq -f 'job-%05g' 1 "$total" |
  xargs -P "$parallel" -I{} bash -c 'submit {} >>"$0"' "$tmp/acks" &
load_pid=$!
acked() { [ "$(grep -c ' 201 ' "$tmp/acks")" -ge "$kill_after" ]; }
if ! wait_until 60 acked; then
  fail load "fewer than $kill_after submissions acknowledged in 60 s"
  exit 1
fi
kill -KILL "$server_pid"
wait "$server_pid" 2>/dev/null
server_pid=
at_kill=$(grep -c ' 201 ' "$tmp/acks")
wait "$load_pid"
lines=$(wc -l <"$tmp/acks")
acks=$(grep -c ' 201 ' "$tmp/acks")
echo "killed the server after $at_kill acknowledgements; $acks of $lines submissions acknowledged in all"
[ "$lines" = "$total" ] || fail load "$lines result lines for $total submissions"
if [ "$acks" -ge "$total" ]; then
  fail load "every submission was acknowledged: the kill came too late to test anything"
fi

# Restart on the same data dir (the old port may still be in TIME_WAIT; any port will do).
if ! start_server "$tmp/server2.log"; then
  fail restart "server did not restart: $(cat "$tmp/server2.log")"
  exit 1
fi

# Every job in the tenant, through pagination.
: >"$tmp/stored"
cont=
while :; do
  curl -s -H "$auth" "$url/api/v1/tenants/d/jobs?limit=250${cont:+&continue=$cont}" >"$tmp/page" ||
    { fail list "list failed"; break; }
  jq -r '.items[] | "\(.metadata.name) \(.metadata.uid)"' "$tmp/page" >>"$tmp/stored"
  cont=$(jq -r '.metadata.continue // ""' "$tmp/page")
  [ -z "$cont" ] && break
done
stored=$(wc -l <"$tmp/stored")
echo "after restart: $stored jobs stored"

c=acknowledged-present
missing=0
while read -r name code uid; do
  [ "$code" = 201 ] || continue
  got=$(awk -v n="$name" '$1 == n { print $2 }' "$tmp/stored")
  if [ -z "$got" ]; then
    missing=$((missing + 1)); [ $missing -le 5 ] && echo "  lost: $name (uid $uid)"
  elif [ "$got" != "$uid" ]; then
    missing=$((missing + 1)); [ $missing -le 5 ] && echo "  $name: uid $got, acknowledged as $uid"
  fi
done <"$tmp/acks"
[ $missing = 0 ] && pass "$c ($acks acknowledged, all present with their uid)" ||
  fail $c "$missing acknowledged submissions lost or changed"

c=no-duplicates
dup_names=$(cut -d' ' -f1 "$tmp/stored" | sort | uniq -d | wc -l)
dup_uids=$(cut -d' ' -f2 "$tmp/stored" | sort | uniq -d | wc -l)
unknown=$(cut -d' ' -f1 "$tmp/stored" | grep -cv '^job-[0-9]\{5\}$')
if [ "$dup_names" = 0 ] && [ "$dup_uids" = 0 ] && [ "$unknown" = 0 ] && [ "$stored" -le "$total" ]; then
  pass "$c ($stored stored: $acks acknowledged + $((stored - acks)) committed before the kill but not answered)"
else
  fail $c "$dup_names duplicate names, $dup_uids duplicate uids, $unknown unknown jobs, $stored stored"
fi

c=audit-chain
verify=$(curl -s -H "$auth" "$url/api/v1/audit/verify")
if jq -e '.ok == true' <<<"$verify" >/dev/null 2>&1; then
  pass "$c ($(jq -r .records <<<"$verify") records verify)"
else
  fail $c "$verify"
fi

c=serves-after-restart
code=$(curl -s -o "$tmp/resp" -w '%{http_code}' -H "$auth" -H 'Content-Type: application/json' \
  -X POST "$url/api/v1/tenants/d/jobs" --data-binary '{"metadata":{"name":"after"},"spec":{"command":"true"}}')
[ "$code" = 201 ] && pass $c || fail $c "HTTP $code $(cat "$tmp/resp")"

echo "---"
[ $failed = 0 ] && echo "all durability checks passed" || echo "durability checks FAILED"
exit $failed
