#!/usr/bin/env bash
# User-space instructions per proxied request, counted by valgrind's callgrind: the gateway's I/O
# thread, the stub upstream's thread, and an nginx reverse proxy doing the same proxying. Unlike CPU
# time on a shared machine, the counts repeat to within ~3% (the gateway's timers and pollers fall
# into the counted interval differently), so a change to the request path can be measured on any
# host; repeat a run to tell changes of a few percent apart. Each target runs twice under callgrind (1 s and
# 3 s of 200 requests/s after a 1 s warm-up) and the difference is divided by the 400 extra
# requests, which cancels start-up. Kernel work (loopback TCP, epoll) is not counted: it is the
# same for the gateway and nginx (RESULTS.md 8.7). Results: bench/RESULTS.md sections 8.9 and 8.10.
# Usage: bench/gateway_instructions.sh path/to/gateway_bench [path/to/nginx [gateway_bench flags...]]
# (the flags go to every run, e.g. --stub-usage body: the stub then answers nginx the same way).
set -u
bench=$(realpath "${1:?usage: bench/gateway_instructions.sh path/to/gateway_bench [path/to/nginx [gateway_bench flags...]]}")
nginx=${2:-/usr/sbin/nginx}
shift $(( $# < 2 ? $# : 2 ))
extra=("$@")
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
tmp=$(mktemp -d /tmp/aicloud-instr.XXXXXX)
chmod 755 "$tmp"  # nginx runs as nobody when started by root, and writes its counts in here
trap 'rm -rf "$tmp"' EXIT

# Instructions of each thread of one run: "thread total" lines.
run() {  # run DIR SECONDS ARGS...
  local dir=$1 secs=$2
  shift 2
  mkdir -p "$dir"
  (cd "$dir" && valgrind --tool=callgrind --separate-threads=yes "$bench" --rate 200 --seconds "$secs" \
     --warmup 1 --rounds 1 "$@" >run.log 2>&1) || { echo "run failed: $(tail -5 "$dir/run.log")"; exit 1; }
  for f in "$dir"/callgrind.out.*-*; do
    echo "${f##*-} $(grep -m1 '^summary:' "$f" | cut -d' ' -f2)"
  done
}

# The gateway (and the stub) under callgrind.
run "$tmp/g1" 1 --only gateway ${extra[@]+"${extra[@]}"} >"$tmp/g1.txt"
run "$tmp/g3" 3 --only gateway ${extra[@]+"${extra[@]}"} >"$tmp/g3.txt"
# nginx under callgrind (the load generator and the stub run natively).
if [ -x "$nginx" ]; then
  mkdir -p "$tmp/n" && chmod 777 "$tmp/n"
  cat >"$tmp/nginx-cg" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind --callgrind-out-file=$tmp/n/out.%p "$nginx" "\$@"
EOF
  chmod 755 "$tmp/nginx-cg"
  for secs in 1 3; do
    "$bench" --rate 200 --seconds "$secs" --warmup 1 --rounds 1 --only nginx --nginx "$tmp/nginx-cg" ${extra[@]+"${extra[@]}"} >"$tmp/n$secs.log" 2>&1
    grep -m1 '^summary:' "$tmp"/n/out.* | cut -d' ' -f2 >"$tmp/n$secs.txt"
    rm -f "$tmp"/n/out.*
  done
fi

python3 - "$tmp" <<'PY'
import os, sys
tmp = sys.argv[1]
def threads(name):
    out = {}
    for line in open(os.path.join(tmp, name)):
        t, n = line.split()
        out[int(t)] = int(n)
    return out
a, b = threads("g1.txt"), threads("g3.txt")
# Thread 1 is the load generator; the busiest other thread is the gateway's I/O thread, the next
# the stub's (which answers both the direct and the gateway requests: 800 of the extra 400 x 2).
per = sorted(((b[t] - a.get(t, 0)) / 400.0, t) for t in b if t != 1)[::-1]
print(f"gateway I/O thread: {per[0][0]:,.0f} instructions per request (thread {per[0][1]})")
print(f"stub I/O thread:    {per[1][0] / 2:,.0f} instructions per request it answers (thread {per[1][1]})")
for v, t in per[2:4]:
    print(f"other thread {t}:    {v:,.0f} per gateway request")
n1, n3 = os.path.join(tmp, "n1.txt"), os.path.join(tmp, "n3.txt")
if os.path.exists(n1) and os.path.exists(n3) and open(n1).read().strip() and open(n3).read().strip():
    n = (int(open(n3).read()) - int(open(n1).read())) / 400.0
    print(f"nginx (whole process): {n:,.0f} instructions per request")
    print(f"gateway I/O thread / nginx: {per[0][0] / n:.2f}")
elif os.path.exists(n1):
    print("nginx: no counts (see the nginx runs' logs)")
PY
