#!/usr/bin/env bash
# Load test of `aicloud engine`: N concurrent streaming clients (default 64) for D seconds
# (default 300), each sending chat completions back to back with streaming on. Reports requests,
# errors (non-200, no [DONE], or a missing usage chunk), tokens/s, and the engine's RSS sampled
# every 10 s (stable memory = no growth after warm-up). Results: bench/RESULTS.md section 6.
# Usage: bench/engine_load.sh path/to/aicloud MODEL_DIR [clients] [seconds] [engine flags...]
set -u
bin=$(realpath "${1:?usage: bench/engine_load.sh path/to/aicloud MODEL_DIR [clients] [seconds]}")
model=${2:?model dir}
clients=${3:-64}
secs=${4:-300}
shift 4 2>/dev/null || shift $#
tmp=$(mktemp -d /tmp/aicloud-load.XXXXXX)
"$bin" engine --model "$model" --port 0 --max-num-seqs "$clients" --max-waiting 1024 "$@" >"$tmp/engine.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 600); do grep -q "listening on" "$tmp/engine.log" && break; sleep 0.1; done
url=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$tmp/engine.log" | head -1)
[ -n "$url" ] || { echo "engine did not start: $(cat "$tmp/engine.log")"; exit 1; }
name=$(basename "$model")
echo "engine: $(head -1 "$tmp/engine.log")"
echo "load: $clients streaming clients for $secs s"
end=$((SECONDS + secs))
client() {
  local i=$1 n=0 err=0 toks=0 out code
  while [ $SECONDS -lt $end ]; do
    out=$(curl -sN --max-time 600 -w '\n%{http_code}' "$url/v1/chat/completions" -H 'Content-Type: application/json' \
      -d "{\"model\":\"$name\",\"messages\":[{\"role\":\"user\",\"content\":\"Tell story $i.$n\"}],\"max_tokens\":$((16 + (i * 7 + n) % 48)),\"temperature\":0.8,\"seed\":$n,\"stream\":true,\"stream_options\":{\"include_usage\":true}}")
    code=${out##*$'\n'}
    n=$((n + 1))
    if [ "$code" != 200 ] || ! grep -q '^data: \[DONE\]' <<<"$out"; then err=$((err + 1)); continue; fi
    toks=$((toks + $(grep -o '"completion_tokens":[0-9]*' <<<"$out" | tail -1 | cut -d: -f2)))
  done
  echo "$n $err $toks" >"$tmp/client.$i"
}
for i in $(seq "$clients"); do client "$i" & done
t0=$SECONDS
while [ $SECONDS -lt $end ]; do
  sleep 10
  echo "  t=$((SECONDS - t0))s rss=$(awk '/VmRSS/ {print $2 / 1024 " MiB"}' /proc/$pid/status) $(curl -s "$url/metrics" | grep -E '^vllm:num_requests_(running|waiting)' | awk '{printf "%s=%s ", $1, $2}')"
done
wait $(jobs -p | grep -v "^$pid$") 2>/dev/null
cat "$tmp"/client.* | awk -v s="$secs" '{n += $1; e += $2; t += $3} END {printf "requests %d, errors %d, completion tokens %d (%.1f tokens/s)\n", n, e, t, t / s}'
echo "engine healthy: $(curl -s -o /dev/null -w '%{http_code}' "$url/health")"
