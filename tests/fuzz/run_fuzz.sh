#!/usr/bin/env bash
# Runs one libFuzzer target over its checked-in inputs (tests/fuzz/corpus/<name> and
# tests/fuzz/regressions/<name>):
#   run_fuzz.sh replay <exe> <name>            every input once; fails on any crash, leak or UB
#   run_fuzz.sh fuzz <exe> <name> <seconds>    fuzzes that long from those inputs (seed 1); new
#                                              inputs go to a scratch corpus beside the binary
# A crash leaves its input in the scratch directory and the command to replay it in the log.
set -euo pipefail
mode=$1 exe=$2 name=$3
here=$(dirname "$(readlink -f "$0")")
corpus=$here/corpus/$name
regress=$here/regressions/$name
work=$(dirname "$exe")/fuzz-work/$name
mkdir -p "$work/corpus" "$work/artifacts"
dirs=()
for d in "$corpus" "$regress"; do [ -d "$d" ] && dirs+=("$d"); done
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The target logs every protocol error it answers (one line each); that log is kept, not shown.
log=$work/$mode.log
common=(-artifact_prefix="$work/artifacts/" -rss_limit_mb=4096 -timeout=20 -print_final_stats=1)
case "$mode" in
  replay)
    if "$exe" "${common[@]}" -runs=0 "${dirs[@]}" >"$log" 2>&1; then
      echo "$name: $(grep -c . <(find "${dirs[@]}" -type f)) inputs replayed"
      grep -E '^(stat::number_of_executed_units|INITED|DONE)' "$log" | tail -3 || true
    else
      tail -60 "$log"; echo "$name: replay failed (log: $log)"; exit 1
    fi
    ;;
  fuzz)
    secs=${4:-60}
    if "$exe" "${common[@]}" -seed=1 -max_total_time="$secs" -max_len=65536 \
        "$work/corpus" "${dirs[@]}" >"$log" 2>&1; then
      grep -E '^#[0-9]+.*DONE|^stat::(number_of_executed_units|peak_rss_mb|new_units_added)' "$log" || tail -3 "$log"
    else
      tail -80 "$log"; echo "$name: fuzzing found a failure (log: $log, input in $work/artifacts)"; exit 1
    fi
    ;;
  *) echo "usage: run_fuzz.sh replay|fuzz <exe> <name> [seconds]" >&2; exit 2 ;;
esac
