#!/usr/bin/env bash
# End-to-end test of the control plane: the real `aicloud` binary as server, two agents with
# declared GPUs (tests/data/e2e/inventory.yaml) and the CLI, all on loopback.
# Usage: tests/e2e_control.sh path/to/aicloud   (run from the repository root by ctest)
# Needs curl, jq, sqlite3 and pgrep. Prints one PASS/FAIL line per check and a summary; exits 1
# when any check failed.
set -u
bin=$(realpath "${1:?usage: tests/e2e_control.sh path/to/aicloud}")
here=$(cd "$(dirname "$0")" && pwd)
data=$here/data/e2e
for tool in curl jq sqlite3 pgrep; do
  command -v "$tool" >/dev/null || { echo "FAIL prerequisites: $tool not found"; exit 1; }
done

tmp=$(mktemp -d /tmp/aicloud-e2e.XXXXXX)
# Agents run jobs and replicas as sandbox uids (not root): they must pass through $tmp.
chmod 755 "$tmp"
tag=$((RANDOM % 90000 + 10000))   # makes this run's sleep processes unique: sleep 6N.<tag>
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 50); do  # up to 5 s for a clean stop, then SIGKILL
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  # Work the agents started (an agent killed with -9 leaves its attempt behind).
  for p in $(pgrep -f "sleep 6[0-9]\.$tag" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [ "${E2E_KEEP:-0}" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap 'cleanup 2>/dev/null' EXIT
trap 'exit 1' INT TERM

export AICLOUD_CONFIG=$tmp/admin.json
results=()
failed=0
pass() { echo "PASS $1"; results+=("PASS $1"); }
fail() { echo "FAIL $1: $2"; results+=("FAIL $1"); failed=1; }
note() { echo "     $*"; }

# wait_until SECONDS CMD...: polls CMD every 0.2 s; 0 as soon as it succeeds.
wait_until() {
  local limit=$1; shift
  local end=$((SECONDS + limit))
  while :; do
    "$@" && return 0
    [ $SECONDS -ge $end ] && return 1
    sleep 0.2
  done
}

ac() { "$bin" "$@"; }                                    # admin (saved login)
as() { local t=$1; shift; "$bin" "$@" --server "$url" --token "$t"; }  # as TOKEN VERB...
job_json() { ac get job "$1" -t "${2:-a}" -o json 2>/dev/null; }       # job_json NAME [TENANT]
job_field() { job_json "$1" "${3:-a}" | jq -r "$2" 2>/dev/null; }     # job_field NAME FILTER [TENANT]
phase_is() { [ "$(job_field "$1" .status.phase "${3:-a}")" = "$2" ]; }
node_phase() { ac get node "$1" -o json 2>/dev/null | jq -r '.status.phase // "Unknown"'; }
render() {  # render FILE NAME SECS > manifest
  sed -e "s|@NAME@|${2-}|" -e "s|@SECS@|${3-}|" -e "s|@SHARED@|$tmp/shared|" "$1"
}

start_server() {  # start_server LOGFILE: sets server_pid and url
  : >"$1"
  "$bin" server --data-dir "$tmp/data" --host 127.0.0.1 --port "${port:-0}" --node-grace 3s >"$1" 2>&1 &
  server_pid=$!
  pids+=("$server_pid")
  wait_until 20 grep -q "aicloud server listening on" "$1" || return 1
  url=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$1" | head -1)
  port=${url##*:}
}

start_agent() {  # start_agent INDEX TOKEN: sets agent_pid[INDEX]
  local i=$1
  mkdir -p "$tmp/agent$i"
  "$bin" agent --server "$url" --token "$2" --inventory "$data/inventory.yaml" --node "e2e-node-$i" \
    --work-dir "$tmp/agent$i" --heartbeat 1s >"$tmp/agent$i.log" 2>&1 &
  agent_pid[$i]=$!
  pids+=("${agent_pid[$i]}")
}

# ---------------------------------------------------------------------------------------------
# 1. server + two agents; both nodes Ready.
c=1-cluster-up
mkdir -p "$tmp/shared"
chmod 1777 "$tmp/shared"  # shared storage the tenants' sandbox uids write to
if ! start_server "$tmp/server1.log"; then
  fail $c "server did not start: $(cat "$tmp/server1.log")"
  exit 1
fi
admin_token=$(awk '/bootstrap admin token/ { getline; print $1; exit }' "$tmp/server1.log")
if [ -z "$admin_token" ]; then fail $c "no bootstrap admin token in the server output"; exit 1; fi
ac login --server "$url" --token "$admin_token" >/dev/null || { fail $c "admin login failed"; exit 1; }
ac apply -f "$data/agents.yaml" >/dev/null || { fail $c "apply agents.yaml failed"; exit 1; }
agent_token=$(ac key create --user agent-1 2>/dev/null)
start_agent 0 "$agent_token"
start_agent 1 "$agent_token"
both_ready() {
  local out
  out=$(ac get nodes 2>/dev/null) || return 1
  grep -qE '^e2e-node-0 +Ready ' <<<"$out" && grep -qE '^e2e-node-1 +Ready ' <<<"$out"
}
if wait_until 20 both_ready; then
  pass $c
else
  fail $c "both nodes not Ready in 20 s: $(ac get nodes 2>&1)"
  cat "$tmp/agent0.log"
  exit 1
fi

# ---------------------------------------------------------------------------------------------
# 2. tenants, users and keys; alice's 2-worker GPU job succeeds; logs; usage.
c=2-job-lifecycle
ok=1
ac apply -f "$data/tenants.yaml" >"$tmp/apply.out" 2>&1 || { ok=0; note "apply tenants: $(cat "$tmp/apply.out")"; }
alice=$(ac key create --user alice -t a 2>/dev/null)
bob=$(ac key create --user bob -t b 2>/dev/null)
[ -n "$alice" ] && [ -n "$bob" ] || { ok=0; note "key create for alice/bob failed"; }
as "$alice" apply -f "$data/job-hello.yaml" -t a >/dev/null 2>"$tmp/err" || { ok=0; note "alice apply: $(cat "$tmp/err")"; }
if ! wait_until 30 phase_is hello Succeeded; then
  ok=0; note "hello not Succeeded in 30 s: $(job_json hello | jq -c .status)"
fi
for w in 0 1; do
  out=$(as "$alice" logs hello -w $w -t a 2>&1)
  grep -q "hello worker=$w gpus=[01]" <<<"$out" || { ok=0; note "logs -w $w: $out"; }
done
out=$(timeout 15 "$bin" logs hello -f -t a --server "$url" --token "$alice" 2>&1); rc=$?
{ [ $rc -eq 0 ] && grep -q "bye worker=0" <<<"$out"; } || { ok=0; note "logs -f rc=$rc: $out"; }
out=$(as "$alice" usage -t a 2>&1)
gpu_hours=$(awk '$1 == "a" && $2 == "*" { print $4 }' <<<"$out")
awk -v v="${gpu_hours:-0}" 'BEGIN { exit !(v > 0) }' || { ok=0; note "usage -t a: $out"; }
[ $ok = 1 ] && pass $c || fail $c "see above"

# ---------------------------------------------------------------------------------------------
# 3. isolation between tenants.
c=3-isolation
ok=1
err=$(as "$bob" get job hello -t a 2>&1); rc=$?
{ [ $rc -ne 0 ] && grep -qiE "permission|forbidden|not found|403|404" <<<"$err"; } || { ok=0; note "bob get a/hello rc=$rc: $err"; }
err=$(as "$bob" get job hello -t b 2>&1); rc=$?
{ [ $rc -ne 0 ] && grep -qiE "not found|404" <<<"$err"; } || { ok=0; note "bob get b/hello rc=$rc: $err"; }
out=$(as "$bob" get jobs -A -o json 2>&1); rc=$?
n=$(jq '[.items[] | select(.metadata.tenant == "a")] | length' <<<"$out" 2>/dev/null)
{ [ $rc -eq 0 ] && [ "$n" = 0 ]; } || { ok=0; note "bob get jobs -A rc=$rc lists a's jobs: $out"; }
err=$(as "$bob" get jobs -t a 2>&1); rc=$?
{ [ $rc -ne 0 ] && grep -qiE "permission|forbidden|403" <<<"$err"; } || { ok=0; note "bob list a's jobs rc=$rc: $err"; }
err=$(as "$bob" key create -t a 2>&1); rc=$?
{ [ $rc -ne 0 ] && grep -qiE "permission|forbidden|403" <<<"$err"; } || { ok=0; note "bob key create -t a rc=$rc: $err"; }
bob_a=$(ac key create --user bob -t a 2>/dev/null)   # bob has no binding in a: the key grants nothing
err=$(as "$bob_a" get jobs -t a 2>&1); rc=$?
{ [ $rc -ne 0 ] && grep -qiE "permission|forbidden|403" <<<"$err"; } || { ok=0; note "bob's a-key get jobs -t a rc=$rc: $err"; }
[ $ok = 1 ] && pass $c || fail $c "see above"

# ---------------------------------------------------------------------------------------------
# 4. OnFailure: the first attempt exits 3, the second succeeds.
c=4-retry-on-failure
render "$data/job-retry.yaml" | as "$alice" apply -f - -t a >/dev/null 2>"$tmp/err"
if ! wait_until 30 phase_is retry Succeeded; then
  fail $c "retry not Succeeded in 30 s: $(job_json retry | jq -c .status)"
elif [ "$(job_field retry .status.attempt)" != 2 ]; then
  fail $c "status.attempt is $(job_field retry .status.attempt), want 2"
else
  pass $c
fi

# ---------------------------------------------------------------------------------------------
# 6. cancel a running job: Failed/Cancelled and its processes gone.
c=6-cancel
ok=1
render "$data/job-sleep.yaml" sleeper "61.$tag" | as "$alice" apply -f - -t a >/dev/null
wait_until 20 phase_is sleeper Running || { ok=0; note "sleeper not Running: $(job_json sleeper | jq -c .status)"; }
wait_until 5 pgrep -f "sleep 61\.$tag" >/dev/null || { ok=0; note "no sleep 61.$tag process seen"; }
as "$alice" cancel sleeper -t a >/dev/null 2>"$tmp/err" || { ok=0; note "cancel: $(cat "$tmp/err")"; }
cancelled() { phase_is sleeper Failed && [ "$(job_field sleeper .status.reason)" = Cancelled ]; }
wait_until 10 cancelled || { ok=0; note "after cancel: $(job_json sleeper | jq -c '.status | {phase, reason, message}')"; }
wait_until 15 bash -c "! pgrep -f 'sleep 61\.$tag' >/dev/null" || { ok=0; note "sleep 61.$tag still running 15 s after cancel"; }
[ $ok = 1 ] && pass $c || fail $c "see above"

# ---------------------------------------------------------------------------------------------
# 7. cordon / uncordon / drain as admin; a developer may not cordon.
c=7-cordon-drain
ok=1
disabled() { ac get nodes 2>/dev/null | grep -qE "^$1 +[A-Za-z]+,SchedulingDisabled"; }
err=$(as "$alice" cordon e2e-node-0 2>&1); rc=$?
{ [ $rc -ne 0 ] && grep -qiE "permission|forbidden|403" <<<"$err"; } || { ok=0; note "alice cordon rc=$rc: $err"; }
ac cordon e2e-node-0 >/dev/null || ok=0
wait_until 5 disabled e2e-node-0 || { ok=0; note "e2e-node-0 not cordoned: $(ac get nodes 2>&1)"; }
ac uncordon e2e-node-0 >/dev/null || ok=0
wait_until 5 bash -c "! \"$bin\" get nodes 2>/dev/null | grep -q '^e2e-node-0 .*SchedulingDisabled'" ||
  { ok=0; note "e2e-node-0 still cordoned: $(ac get nodes 2>&1)"; }
# Labels: set, refused without --overwrite, replaced with it, removed; a developer may not.
node_label() { ac get nodes e2e-node-0 -o json | jq -r --arg k "$1" '.metadata.labels[$k] // ""'; }
ac label nodes e2e-node-0 aicloud/do-not-disrupt=true >/dev/null || { ok=0; note "label failed"; }
[ "$(node_label aicloud/do-not-disrupt)" = true ] || { ok=0; note "label not set: $(node_label aicloud/do-not-disrupt)"; }
err=$(ac label nodes e2e-node-0 aicloud/do-not-disrupt=false 2>&1); rc=$?
{ [ $rc -ne 0 ] && grep -q -- "--overwrite" <<<"$err"; } || { ok=0; note "relabel without --overwrite rc=$rc: $err"; }
ac label nodes e2e-node-0 aicloud/do-not-disrupt=false --overwrite >/dev/null || ok=0
[ "$(node_label aicloud/do-not-disrupt)" = false ] || { ok=0; note "label not replaced"; }
err=$(as "$alice" label nodes e2e-node-0 aicloud/do-not-disrupt- 2>&1); rc=$?
{ [ $rc -ne 0 ] && grep -qiE "permission|forbidden|403" <<<"$err"; } || { ok=0; note "alice label rc=$rc: $err"; }
ac label nodes e2e-node-0 aicloud/do-not-disrupt- >/dev/null || ok=0
[ -z "$(node_label aicloud/do-not-disrupt)" ] || { ok=0; note "label not removed"; }
err=$(ac label nodes e2e-node-0 novalue 2>&1); rc=$?
{ [ $rc -ne 0 ] && grep -q "KEY=VALUE" <<<"$err"; } || { ok=0; note "bad label argument rc=$rc: $err"; }
err=$(ac label nodes e2e-node-0 team=a team- 2>&1); rc=$?
{ [ $rc -ne 0 ] && grep -q "given twice" <<<"$err"; } || { ok=0; note "two changes of one label rc=$rc: $err"; }
err=$(ac label gizmos e2e-node-0 team=a 2>&1); rc=$?
{ [ $rc -ne 0 ] && grep -q "unknown resource type" <<<"$err"; } || { ok=0; note "unknown kind rc=$rc: $err"; }
[ -z "$(node_label team)" ] || { ok=0; note "a refused label command changed the node"; }
# Drain a node that runs a job: the job moves to the other node without using a retry.
render "$data/job-sleep.yaml" drained "63.$tag" | as "$alice" apply -f - -t a >/dev/null
wait_until 20 phase_is drained Running || { ok=0; note "drained not Running: $(job_json drained | jq -c .status)"; }
dnode=$(job_field drained '.status.workers[0].node')
ac drain "$dnode" >/dev/null 2>"$tmp/err" || { ok=0; note "drain $dnode: $(cat "$tmp/err")"; }
moved() { phase_is drained Running && [ "$(job_field drained '.status.workers[0].node')" != "$dnode" ]; }
if wait_until 15 moved; then
  [ "$(job_field drained .status.failures)" = 0 ] || { ok=0; note "drain counted as a failure: $(job_json drained | jq -c .status)"; }
else
  ok=0; note "job not moved off drained $dnode: $(job_json drained | jq -c .status)"
fi
wait_until 5 disabled "$dnode" || { ok=0; note "$dnode not cordoned by drain"; }
ac cancel drained -t a >/dev/null
ac uncordon "$dnode" >/dev/null || ok=0
wait_until 10 phase_is drained Failed || note "drained not ended after cancel"
[ $ok = 1 ] && pass $c || fail $c "see above"

# ---------------------------------------------------------------------------------------------
# 5. kill -9 the agent running a job: the job moves to the other node; the old attempt never
#    restarts on the survivor; the dead node goes NotReady.
c=5-node-loss
ok=1
render "$data/job-sleep.yaml" longrun "62.$tag" | as "$alice" apply -f - -t a >/dev/null
wait_until 20 phase_is longrun Running || { ok=0; note "longrun not Running: $(job_json longrun | jq -c .status)"; }
old_node=$(job_field longrun '.status.workers[0].node')
old_attempt=$(job_field longrun '.status.workers[0].attempt')
old_n=$(job_field longrun .status.attempt)
case $old_node in
  e2e-node-0) dead=0 alive=1 ;;
  e2e-node-1) dead=1 alive=0 ;;
  *) dead=""; ok=0; note "longrun has no node: $(job_json longrun | jq -c .status)" ;;
esac
if [ -n "$dead" ]; then
  { kill -KILL "${agent_pid[$dead]}"; wait "${agent_pid[$dead]}"; } 2>/dev/null
  t0=$SECONDS
  rescheduled() {
    local s
    s=$(job_json longrun | jq -c .status) || return 1
    [ "$(jq -r .attempt <<<"$s")" -gt "$old_n" ] && [ "$(jq -r '.workers[0].node' <<<"$s")" = "e2e-node-$alive" ] &&
      [ "$(jq -r .phase <<<"$s")" = Running ]
  }
  if wait_until 12 rescheduled; then
    note "rescheduled on e2e-node-$alive after $((SECONDS - t0)) s"
  else
    ok=0; note "not rescheduled within 12 s: $(job_json longrun | jq -c .status)"
  fi
  [ "$(node_phase "$old_node")" = NotReady ] || { ok=0; note "$old_node is $(node_phase "$old_node"), want NotReady"; }
  sleep 2  # a late hand-over of the old attempt would show up in this window
  if grep -q "started attempt $old_attempt" "$tmp/agent$alive.log"; then
    ok=0; note "surviving agent started the old attempt $old_attempt"
  fi
  new_attempt=$(job_field longrun '.status.workers[0].attempt')
  [ "$new_attempt" != "$old_attempt" ] || { ok=0; note "attempt id reused: $new_attempt"; }
  # Nothing of the old attempt may keep running: not the job's shell, not what it forked (here
  # `sleep`), or the job would run twice.
  for p in $(pgrep -f "sleep 62\.$tag"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "AICLOUD_ATTEMPT_ID=$old_attempt"; then
      ok=0; note "attempt $old_attempt (pid $p, a child of the job's shell) still runs after its agent was killed -9"
      break
    fi
  done
fi
ac cancel longrun -t a >/dev/null
[ $ok = 1 ] && pass $c || fail $c "see above"

# ---------------------------------------------------------------------------------------------
# 9. bad input over raw HTTP: the right status, a JSON error, and the server lives on.
c=9-bad-input
ok=1
# req NAME WANT_STATUS WANT_FIELD METHOD PATH [curl args...]: checks status and error shape.
req() {
  local name=$1 want=$2 field=$3 method=$4 path=$5; shift 5
  local code body
  code=$(curl -s -o "$tmp/resp" -w '%{http_code}' -X "$method" -H 'Expect:' "$@" "$url$path")
  body=$(head -c 400 "$tmp/resp")
  if [ "$code" != "$want" ]; then ok=0; note "$name: HTTP $code, want $want: $body"; return; fi
  if ! jq -e '(.error.code | type == "string") and (.error.message | type == "string")' "$tmp/resp" >/dev/null 2>&1; then
    ok=0; note "$name: not a JSON error: $body"; return
  fi
  if [ -n "$field" ] && [ "$(jq -r '.error.field // ""' "$tmp/resp")" != "$field" ]; then
    ok=0; note "$name: error.field $(jq -r '.error.field' "$tmp/resp"), want $field: $body"
  fi
}
auth=(-H "Authorization: Bearer $admin_token")
jsonct=(-H 'Content-Type: application/json')
job='{"apiVersion":"aicloud/v1","kind":"Job","metadata":{"name":"bad"},"spec":{"command":"true"%s}}'
req malformed-json 400 "" POST /api/v1/tenants/a/jobs "${auth[@]}" "${jsonct[@]}" --data-binary '{"apiVersion": "aicloud/v1", "kind": '
req unknown-kind 404 "" GET /api/v1/pods "${auth[@]}"
# shellcheck disable=SC2059
req wrong-type 400 spec.workers POST /api/v1/tenants/a/jobs "${auth[@]}" "${jsonct[@]}" --data-binary "$(printf "$job" ',"workers":"two"')"
# shellcheck disable=SC2059
req unknown-field 400 "" POST /api/v1/tenants/a/jobs "${auth[@]}" "${jsonct[@]}" --data-binary "$(printf "$job" ',"wrokers":2')"
head -c $((8 * 1024 * 1024 + 1024)) /dev/zero | tr '\0' ' ' >"$tmp/big.json"
req too-large 413 "" POST /api/v1/tenants/a/jobs "${auth[@]}" "${jsonct[@]}" --data-binary @"$tmp/big.json"
req no-token 401 "" GET /api/v1/jobs
req bad-token 401 "" GET /api/v1/jobs -H "Authorization: Bearer aic_000000000000_deadbeef"
req yaml-syntax 400 "" POST /api/v1/tenants/a/jobs "${auth[@]}" -H 'Content-Type: application/yaml' \
  --data-binary $'apiVersion: aicloud/v1\nkind: Job\nmetadata: {name: y\nspec: [1, 2\n'
# shellcheck disable=SC2059
req no-such-tenant 404 "" POST /api/v1/tenants/nope/jobs "${auth[@]}" "${jsonct[@]}" --data-binary "$(printf "$job" '')"
code=$(curl -s -o /dev/null -w '%{http_code}' "$url/healthz")
[ "$code" = 200 ] || { ok=0; note "/healthz answers $code after the bad requests"; }
[ $ok = 1 ] && pass $c || fail $c "see above"

# ---------------------------------------------------------------------------------------------
# 8. audit: verify passes; a record edited in the store while the server is down fails it.
c=8-audit
ok=1
out=$(ac audit verify 2>&1) || { ok=0; note "audit verify before the edit: $out"; }
kill -TERM "$server_pid"
wait "$server_pid" 2>/dev/null
db=$tmp/data/state.db
[ -f "$db" ] || db=$(find "$tmp/data" -name '*.db' | head -1)
# Objects are rows of JSON text; find the table and column that hold them.
table=$(sqlite3 "$db" "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%kind%' LIMIT 1;")
col=$(sqlite3 "$db" "SELECT name FROM pragma_table_info('$table') WHERE lower(type) IN ('text', 'blob', '') AND name NOT IN ('kind', 'tenant', 'name');" |
  while read -r cand; do
    if [ "$(sqlite3 "$db" "SELECT count(*) FROM \"$table\" WHERE kind = 'AuditRecord' AND json_valid(\"$cand\") AND json_extract(\"$cand\", '\$.spec.user') IS NOT NULL;")" != 0 ]; then
      echo "$cand"; break
    fi
  done)
if [ -z "$table" ] || [ -z "$col" ]; then
  ok=0; note "cannot find the audit records in $db: $(sqlite3 "$db" .schema)"
else
  target=$(sqlite3 "$db" "SELECT name FROM \"$table\" WHERE kind = 'AuditRecord' AND json_extract(\"$col\", '\$.spec.user') = 'alice' ORDER BY name LIMIT 1;")
  seq=$((10#$target))
  sqlite3 "$db" "UPDATE \"$table\" SET \"$col\" = json_set(\"$col\", '\$.spec.user', 'mallory') WHERE kind = 'AuditRecord' AND name = '$target';"
  [ "$(sqlite3 "$db" "SELECT json_extract(\"$col\", '\$.spec.user') FROM \"$table\" WHERE kind = 'AuditRecord' AND name = '$target';")" = mallory ] ||
    { ok=0; note "the edit of record $target did not stick"; }
fi
if ! start_server "$tmp/server2.log"; then
  port=0
  start_server "$tmp/server2.log" || { fail $c "server did not restart: $(cat "$tmp/server2.log")"; exit 1; }
fi
ac login --server "$url" --token "$admin_token" >/dev/null 2>&1 || { ok=0; note "the admin key no longer works after the restart"; }
if grep -q "bootstrap admin token" "$tmp/server2.log"; then ok=0; note "a second bootstrap token was printed"; fi
as "$alice" get jobs -t a >/dev/null 2>"$tmp/err" || { ok=0; note "alice's key after restart: $(cat "$tmp/err")"; }
err=$(ac audit verify 2>&1); rc=$?
if [ $rc -eq 0 ]; then
  ok=0; note "audit verify passes after record $seq was edited: $err"
elif [ -n "${seq:-}" ] && ! grep -qE "record $seq\b" <<<"$err"; then
  ok=0; note "audit verify does not name record $seq: $err"
else
  note "audit verify after the edit (rc=$rc): $err"
fi
[ $ok = 1 ] && pass $c || fail $c "see above"

# ---------------------------------------------------------------------------------------------
echo "---"
printf '%s\n' "${results[@]}" | sort -k2,2n
if [ $failed = 0 ]; then echo "e2e_control: all checks passed"; else echo "e2e_control: FAILED"; fi
exit $failed
