#!/usr/bin/env bash
# Black-box tests of the `aicloud` binary: exit codes, error messages and output shapes.
# Usage: tests/cli_test.sh path/to/aicloud   (run from the repository root by ctest)
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {  # check NAME CONDITION...
  local name=$1; shift
  if "$@"; then echo "ok   $name"; else echo "FAIL $name"; fail=1; fi
}
nodes=data/traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv
pods=data/traces/alibaba-gpu-v2023/openb_pod_list_default.csv

# inventory check: good YAML, good CSV, bad YAML with file:line: field.
out=$("$bin" inventory check examples/inventory.yaml); rc=$?
check "inventory yaml exit 0" test $rc -eq 0
check "inventory yaml summary" grep -q "23 nodes (2 CPU-only, 0 cordoned), 96 GPUs" <<<"$out"
out=$("$bin" inventory check "$nodes"); rc=$?
check "inventory csv summary" grep -q "1213 nodes (0 CPU-only, 0 cordoned), 6212 GPUs" <<<"$out"
printf 'apiVersion: aicloud/v1\nkind: Inventory\nnodes:\n  - name: a\n    cpu: -3\n    memory: 1Gi\n' >"$tmp/bad.yaml"
err=$("$bin" inventory check "$tmp/bad.yaml" 2>&1 >/dev/null); rc=$?
check "inventory bad exit 2" test $rc -eq 2
check "inventory bad names file:line: field" grep -q "bad.yaml:5: nodes\[0\].cpu: must be positive" <<<"$err"

# simulate fgd: JSON has the documented fields; a seed repeats exactly.
json=$("$bin" simulate fgd --nodes "$nodes" --pods "$pods" --policy fgd --seed 42 --format json --quiet); rc=$?
check "simulate json exit 0" test $rc -eq 0
for field in '"policy":"fgd"' '"seed":42' '"workload":"default"' '"final_allocation_pct":' '"curve":[[0,'; do
  check "simulate json has $field" grep -qF "$field" <<<"$json"
done
again=$("$bin" simulate fgd --nodes "$nodes" --pods "$pods" --policy fgd --seed 42 --format json --quiet)
check "simulate same seed same curve" test "$(sed 's/"schedule_seconds":[^,}]*//' <<<"$json")" = "$(sed 's/"schedule_seconds":[^,}]*//' <<<"$again")"
final=$(grep -o '"final_allocation_pct":[0-9.]*' <<<"$json" | cut -d: -f2)
check "fgd seed 42 allocates over 94%" awk -v v="$final" 'BEGIN { exit !(v > 94 && v <= 100) }'

# simulate fgd: bad input is an error naming the problem, never a crash.
printf 'name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,1024,2,500\n' >"$tmp/pods.csv"
err=$("$bin" simulate fgd --nodes "$nodes" --pods "$tmp/pods.csv" 2>&1 >/dev/null); rc=$?
check "bad pods exit 2" test $rc -eq 2
check "bad pods names line and column" grep -q "pods.csv:2: gpu_milli: a fractional share (< 1000) is only valid with num_gpu 1" <<<"$err"
err=$("$bin" simulate fgd --policy nope 2>&1 >/dev/null); rc=$?
check "unknown policy exit 2" test $rc -eq 2
check "unknown policy lists the known ones" grep -q "unknown policy 'nope' (known: fgd, fgd_tiered" <<<"$err"
err=$("$bin" simulate fgd --nodes "$nodes" --pods "$pods" --seeds 9-3 2>&1 >/dev/null); rc=$?
check "bad seed range exit 2" test $rc -eq 2

# plot: an SVG with one line per policy.
"$bin" simulate fgd --nodes "$nodes" --pods "$pods" --policy fgd,bestfit --seed 1 --quiet --plot "$tmp/p.svg" >/dev/null
check "plot written" test -s "$tmp/p.svg"
check "plot has two lines" test "$(grep -o '<polyline' "$tmp/p.svg" | wc -l)" -eq 2

# simulate events on a compressed trace places every pod.
out=$("$bin" simulate events --nodes "$nodes" --pods "$pods" --policy fgd --time-scale 0.00001 --format json 2>/dev/null); rc=$?
check "events exit 0" test $rc -eq 0
check "events places all 8152 pods" grep -qE '"placed": ?8152' <<<"$out"
exit $fail
