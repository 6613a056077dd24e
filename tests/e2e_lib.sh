# Helpers shared by the end-to-end scripts (source it; it sets `failed=0`):
#   pass NAME [DETAIL]       prints "PASS NAME"
#   fail NAME WHY            prints "FAIL NAME: WHY" and marks the run failed
#   wait_until SECONDS CMD   runs CMD every 0.2 s until it succeeds (0) or SECONDS pass (1)
#   tiny_model DIR [FLAGS]   writes the scripts' small random-weight llama (GPT-2 vocabulary) to
#                            DIR with `$bin model init`; its output goes to DIR.log
failed=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; failed=1; }
wait_until() {
  local end=$((SECONDS + $1)); shift
  while :; do "$@" && return 0; [ $SECONDS -ge $end ] && return 1; sleep 0.2; done
}
tiny_model() {
  local out=$1; shift
  "$bin" model init --arch llama --hidden 64 --layers 2 --heads 4 --kv-heads 2 --intermediate 128 \
    --vocab-from data/tokenizers/gpt2/tokenizer.json --out "$out" "$@" >"$out.log" 2>&1
}
