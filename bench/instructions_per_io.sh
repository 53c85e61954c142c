#!/usr/bin/env bash
# Data-plane cost per I/O with 1, 2 and 4 paths: nvmeof-bench (one reactor, 4 KiB random reads
# at queue depth 16, no verification) against nvmeof-target in a separate process (not
# measured). The figure is the reactor thread's CPU time per I/O: perf's per-thread task-clock
# over a window in the middle of the run, divided by the I/Os of that window (the run's IOPS x
# the window). Instructions would be the better unit, but neither of the tools for them works on
# these machines: perf reports the hardware counters as <not supported>, and the io_uring data
# plane stalls under valgrind (keep-alives and completions stop), so callgrind measures nothing.
# A benchmark, not a test: nothing is asserted.
#   bench/instructions_per_io.sh [build-dir] [seconds] [paths...]
set -euo pipefail
build=${1:-build}
secs=${2:-6}
shift $(( $# > 2 ? 2 : $# )) || true
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1 2 4)
command -v perf >/dev/null || { echo "instructions_per_io: perf is not installed" >&2; exit 77; }
out=$(mktemp -d)
tpid=
cleanup() { [ -z "$tpid" ] || kill "$tpid" 2>/dev/null || true; rm -rf "$out"; }
trap cleanup EXIT

base=$((20000 + RANDOM % 20000))
listen=()
for i in 0 1 2 3; do listen+=(--listen "127.0.0.1:$((base + i))"); done
"$build/tools/nvmeof-target" "${listen[@]}" --size 256M >"$out/target.log" 2>&1 &
tpid=$!
sleep 1

window=$((secs / 2))
first=
for n in "${counts[@]}"; do
  targets=()
  for ((i = 0; i < n; i++)); do targets+=(--target "127.0.0.1:$((base + i))"); done
  "$build/tools/nvmeof-bench" "${targets[@]}" --nqn nqn.2024-01.io.nvmeof:target \
    --reactors 1 --rw randread --bs 4k --iodepth 16 --runtime "${secs}s" --no-verify \
    --json >"$out/bench.json" 2>"$out/bench.err" &
  bpid=$!
  sleep $((secs / 4 + 1))
  perf stat --per-thread -e task-clock -p "$bpid" -x, -- sleep "$window" 2>"$out/perf.csv" || true
  wait "$bpid" || true
  # The reactor is the busiest thread of the bench (the others sleep or wait on sockets).
  ms=$(sort -t, -k2 -g -r "$out/perf.csv" | head -n 1 | cut -d, -f2)
  iops=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["total"]["iops"])' "$out/bench.json")
  python3 - "$n" "$ms" "$iops" "$window" "${first:-0}" <<'PY' | tee "$out/line"
import sys
n, ms, iops, window, first = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
ns = ms * 1e6 / (iops * window)
print(f"paths {n}: {iops:.0f} IOPS, reactor thread {ns:.0f} ns CPU per I/O"
      + (f" ({ns / first:.3f} x 1 path)" if first else " (1.000 x 1 path)"))
PY
  [ -n "$first" ] || first=$(python3 -c 'import sys; print(float(sys.argv[1]) * 1e6 / (float(sys.argv[2]) * float(sys.argv[3])))' "$ms" "$iops" "$window")
done
