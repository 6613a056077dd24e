# Helpers shared by the end-to-end scripts (source it; it sets `failed=0`):
#   pass NAME [DETAIL]       prints "PASS NAME"
#   fail NAME WHY            prints "FAIL NAME: WHY" and marks the run failed
#   wait_until SECONDS CMD   runs CMD every 0.2 s until it succeeds (0) or SECONDS pass (1)
failed=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; failed=1; }
wait_until() {
  local end=$((SECONDS + $1)); shift
  while :; do "$@" && return 0; [ $SECONDS -ge $end ] && return 1; sleep 0.2; done
}
