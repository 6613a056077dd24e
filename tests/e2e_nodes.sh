#!/usr/bin/env bash
# End-to-end test of the cluster autoscaler: `aicloud up` with one simulated 2-GPU node and a
# node pool of 2 (nodes register 2 s after power-on). A gang job of 2 workers x 2 GPUs cannot be
# placed on the one node: one node is powered on (the other worker fits on the first), the job
# runs and succeeds, and the added node is cordoned and powered off once it stayed empty for
# --node-unneeded. Then consolidation: a 1-GPU job labelled aicloud/safe-to-evict lands on a new
# node while sim-0 is full; once sim-0 has room, the added node (half used, under
# --node-consolidate-below 0.6) is drained, the job requeued onto sim-0, and the node powered off.
# Last, the same with a Deployment's replica (a real engine): its successor starts on sim-0 and
# is ready before it goes, the deployment never without a ready replica, and the node powered off.
# Usage: tests/e2e_nodes.sh path/to/aicloud   (run from the repository root by ctest)
# Needs jq. Prints PASS/FAIL lines; exits 1 when a check failed.
set -u
bin=$(realpath "${1:?usage: tests/e2e_nodes.sh path/to/aicloud}")
for tool in jq curl; do
  command -v "$tool" >/dev/null || { echo "FAIL prerequisites: $tool not found"; exit 1; }
done
tmp=$(mktemp -d /tmp/aicloud-nodes.XXXXXX)
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
nodes() { "$bin" get nodes -o json 2>/dev/null | jq -c "$1"; }

# A share out of range is refused with the flag's name, before anything starts.
out=$(timeout 20 "$bin" up --data-dir "$tmp/bad" --port 0 --sim-nodes 1 --node-pool 1 --node-consolidate-below 2 2>&1)
if [ $? != 0 ] && grep -q -- "--node-consolidate-below: must be a share between 0 and 1" <<<"$out"; then
  pass bad-consolidate-share
else
  fail bad-consolidate-share "$out"
fi

"$bin" up --data-dir "$tmp/up" --port 0 --sim-nodes 1 --gpus-per-node 2 --node-pool 2 \
  --node-provision-delay 2s --node-pending 2s --node-unneeded 6s --node-consolidate-below 0.6 >"$tmp/up.log" 2>&1 &
up_pid=$!
wait_until 30 grep -qs "aicloud up: ready" "$tmp/up.log" || { fail up "$(tail -5 "$tmp/up.log")"; exit 1; }
grep -q "cluster autoscaler on: up to 2" "$tmp/up.log" && pass up || fail up "$(head -8 "$tmp/up.log")"

cat >"$tmp/job.yaml" <<YAML
apiVersion: aicloud/v1
kind: Job
metadata: {name: wide, tenant: demo}
spec:
  workers: 2
  command: "echo worker \$AICLOUD_WORKER on \$(hostname); sleep 2"
  resources: {cpu: "1", memory: 1Gi, gpu: {count: 2}}
YAML
"$bin" apply -f "$tmp/job.yaml" >/dev/null 2>&1 || fail apply "$("$bin" apply -f "$tmp/job.yaml" 2>&1)"
job() { "$bin" get job wide -o json 2>/dev/null | jq -r "$1"; }

c=unschedulable-first
wait_until 10 sh -c "[ \"\$('$bin' get job wide -o json 2>/dev/null | jq -r .status.reason)\" = Unschedulable ]" \
  && pass $c || fail $c "$(job .status)"

c=nodes-added
t0=$SECONDS
if wait_until 60 sh -c "'$bin' get nodes -o json 2>/dev/null | jq -e '[.items[] | select(.metadata.name | startswith(\"auto-\")) | select(.status.phase == \"Ready\")] | length >= 1' >/dev/null"; then
  pass "$c ($(nodes '[.items[] | select(.metadata.name | startswith("auto-")) | .metadata.name]') Ready after $((SECONDS - t0)) s)"
else
  fail $c "$(nodes '[.items[] | {n: .metadata.name, p: .status.phase}]'); $(grep 'node autoscaler' "$tmp/up.log" | tail -3)"
fi

added=$(nodes '[.items[] | select(.metadata.name | startswith("auto-")) | .metadata.name] | length')
[ "$added" = 1 ] && pass "one-node-enough (the other worker fits on sim-0)" || fail one-node-enough "$added nodes added: $(grep 'node autoscaler' "$tmp/up.log" | head -3)"

c=job-ran-on-added-node
if wait_until 60 sh -c "[ \"\$('$bin' get job wide -o json 2>/dev/null | jq -r .status.phase)\" = Succeeded ]"; then
  on=$(job '[.status.workers[].node] | join(",")')
  grep -q auto- <<<"$on" && pass "$c (workers on $on)" || fail $c "workers on $on"
else
  fail $c "$(job .status)"
fi

c=idle-nodes-powered-off
if wait_until 60 sh -c "'$bin' get nodes -o json 2>/dev/null | jq -e '[.items[] | select(.metadata.name | startswith(\"auto-\")) | select(.spec.unschedulable != true)] | length == 0' >/dev/null"; then
  pass "$c (cordoned: $(nodes '[.items[] | select(.metadata.name | startswith("auto-")) | .metadata.name] | join(",")'))"
else
  fail $c "$(nodes '[.items[] | {n: .metadata.name, p: .status.phase, u: .spec.unschedulable}]')"
fi
c=powered-off-agents-gone
wait_until 30 sh -c "'$bin' get nodes -o json 2>/dev/null | jq -e '[.items[] | select(.metadata.name | startswith(\"auto-\")) | select(.status.phase == \"Ready\")] | length == 0' >/dev/null" \
  && pass $c || fail $c "$(nodes '[.items[] | {n: .metadata.name, p: .status.phase}]')"
grep -q "sim-0" <<<"$(nodes '[.items[] | select(.spec.unschedulable != true) | .metadata.name]')" \
  && pass own-node-kept || fail own-node-kept "$(nodes '[.items[] | {n: .metadata.name, u: .spec.unschedulable}]')"

# Consolidation. sim-0 is filled for 10 s; the evictable job goes to a new node meanwhile.
cat >"$tmp/hold.yaml" <<YAML
apiVersion: aicloud/v1
kind: Job
metadata: {name: hold, tenant: demo}
spec:
  command: "sleep 10"
  resources: {cpu: "1", memory: 1Gi, gpu: {count: 2}}
YAML
cat >"$tmp/small.yaml" <<YAML
apiVersion: aicloud/v1
kind: Job
metadata: {name: small, tenant: demo, labels: {aicloud/safe-to-evict: "true"}}
spec:
  command: "echo started on \$(hostname); sleep 300"
  restartPolicy: OnFailure
  resources: {cpu: "1", memory: 1Gi, gpu: {count: 1}}
YAML
"$bin" apply -f "$tmp/hold.yaml" >/dev/null 2>&1 || fail apply-hold "$("$bin" apply -f "$tmp/hold.yaml" 2>&1)"
wait_until 10 sh -c "[ \"\$('$bin' get job hold -o json 2>/dev/null | jq -r .status.phase)\" = Running ]" || fail hold "not running"
"$bin" apply -f "$tmp/small.yaml" >/dev/null 2>&1 || fail apply-small "$("$bin" apply -f "$tmp/small.yaml" 2>&1)"
small() { "$bin" get job small -o json 2>/dev/null | jq -r "$1"; }
c=evictable-job-on-added-node
if wait_until 60 sh -c "'$bin' get job small -o json 2>/dev/null | jq -e '.status.phase == \"Running\" and (.status.workers[0].node | startswith(\"auto-\"))' >/dev/null"; then
  first=$(small '.status.workers[0].node')
  pass "$c ($first)"
else
  first=
  fail $c "$(small .status); $(grep 'node autoscaler' "$tmp/up.log" | tail -3)"
fi
c=consolidated-onto-sim-0
if [ -n "$first" ] && wait_until 90 sh -c "'$bin' get job small -o json 2>/dev/null | jq -e '.status.phase == \"Running\" and .status.workers[0].node == \"sim-0\"' >/dev/null"; then
  pass "$c ($(grep -o "consolidating $first ([^)]*)" "$tmp/up.log" | head -1))"
else
  fail $c "$(small '.status | {phase, reason, message, node: .workers[0].node}'); $(grep 'node autoscaler' "$tmp/up.log" | tail -4)"
fi
c=consolidated-node-powered-off
if [ -n "$first" ] && wait_until 30 grep -qs "powering off $first (consolidated)" "$tmp/up.log"; then
  pass "$c ($first)"
else
  fail $c "$(grep 'node autoscaler' "$tmp/up.log" | tail -4)"
fi
"$bin" delete job small >/dev/null 2>&1

# A replica moved the same way: sim-0 filled for 15 s, the replica lands on a new node.
tiny_model "$tmp/tiny" || fail model-init "$(cat "$tmp/tiny.log")"
sed -e 's/name: hold,/name: hold2,/' -e 's/sleep 10/sleep 15/' "$tmp/hold.yaml" >"$tmp/hold2.yaml"
"$bin" apply -f "$tmp/hold2.yaml" >/dev/null 2>&1 || fail apply-hold2 "$("$bin" apply -f "$tmp/hold2.yaml" 2>&1)"
wait_until 20 sh -c "[ \"\$('$bin' get job hold2 -o json 2>/dev/null | jq -r .status.phase)\" = Running ]" || fail hold2 "not running"
cat >"$tmp/packed.yaml" <<YAML
apiVersion: aicloud/v1
kind: Deployment
metadata: {name: packed, tenant: demo}
spec:
  model: $tmp/tiny
  replicas: {min: 1, max: 1}
  resources: {cpu: "1", memory: 1Gi, gpu: {count: 1}}
  engine: {threads: 1, kvCacheGiB: 0.05}
YAML
"$bin" apply -f "$tmp/packed.yaml" >"$tmp/apply-packed.log" 2>&1 || fail apply-packed "$(cat "$tmp/apply-packed.log")"
replica() { "$bin" get jobs -o json 2>/dev/null | jq -c '[.items[] | select(.metadata.labels["aicloud/deployment"] == "packed") | {n: .metadata.name, p: .status.phase, node: (.status.workers[0].node // ""), evict: (.metadata.labels["aicloud/evict"] // "")}]'; }
ready() { "$bin" get deployment packed -o json 2>/dev/null | jq -r '.status.readyReplicas // 0'; }
c=replica-on-added-node
if wait_until 90 sh -c "[ \"\$('$bin' get deployment packed -o json 2>/dev/null | jq -r '.status.readyReplicas // 0')\" = 1 ]"; then
  first=$(replica | jq -r '.[0].node')
  [[ "$first" == auto-* ]] && pass "$c ($first)" || fail $c "$(replica)"
else
  first=
  fail $c "$(replica); $(grep 'node autoscaler' "$tmp/up.log" | tail -3)"
fi
c=replica-moved-without-a-gap
dipped=0 moved=0
seen=$(wc -l <"$tmp/up.log")  # an earlier section may have powered off a node of the same name
if [[ "$first" == auto-* ]]; then
  for _ in $(seq 300); do  # up to 150 s
    [ "$(ready)" = 1 ] || dipped=$((dipped + 1))
    if tail -n +$((seen + 1)) "$tmp/up.log" | grep -qs "powering off $first (consolidated)"; then moved=1; break; fi
    sleep 0.5
  done
fi
now=$(replica)
if [ $moved = 1 ] && [ "$(jq -r 'length' <<<"$now")" = 1 ] && [ "$(jq -r '.[0].node' <<<"$now")" = sim-0 ] && [ $dipped = 0 ]; then
  pass "$c (now $(jq -c '.[0] | {node, p}' <<<"$now"); $(grep -o "consolidating $first ([^)]*)" "$tmp/up.log" | tail -1))"
else
  fail $c "moved=$moved, not ready in $dipped polls, replicas $now; $(grep 'node autoscaler\|deployment demo/packed' "$tmp/up.log" | tail -5)"
fi
"$bin" delete deployment packed >/dev/null 2>&1

[ $failed = 0 ] && echo "e2e_nodes: all checks passed" || { echo "e2e_nodes: FAILED"; grep -v '^usage' "$tmp/up.log" | tail -30; }
exit $failed
