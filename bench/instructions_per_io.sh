#!/usr/bin/env bash
# Data-plane cost per I/O with 1, 2 and 4 paths: nvmeof-bench (one reactor, 4 KiB random reads
# at queue depth 16, no verification) against nvmeof-target in a separate process (not
# measured). The figure is the reactor thread's CPU time per I/O: perf's per-thread task-clock
# over a window in the middle of the run, divided by the I/Os of that window (the run's IOPS x
# the window), split into user time (our code: selector, retry table, queue pairs, liburing) and
# system time (the kernel's TCP and io_uring) from /proc. Instructions would be the better unit, but neither of the tools for them works on
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
  # The reactor's user time is our data plane (selector, retry table, queue pairs, liburing);
  # its system time is the kernel's TCP and io_uring work. Both from /proc (clock ticks) over
  # the window, next to perf's task-clock of the same thread.
  python3 - "$bpid" "$window" >"$out/proc.txt" <<'PY' &
import os, sys, time
pid, window = sys.argv[1], float(sys.argv[2])
def sample():
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:  # the bench is gone; its own exit status tells why
        print(0, 0)
        sys.exit(0)
    for tid in tids:
        try:
            f = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
            out[tid] = (int(f[11]), int(f[12]))  # utime, stime
        except OSError:
            pass
    return out
a = sample(); time.sleep(window); b = sample()
tid = max(b, key=lambda t: sum(b[t]) - sum(a.get(t, (0, 0))))
hz = os.sysconf("SC_CLK_TCK")
print((b[tid][0] - a[tid][0]) / hz, (b[tid][1] - a[tid][1]) / hz)
PY
  ppid=$!
  perf stat --per-thread -e task-clock -p "$bpid" -x, -- sleep "$window" 2>"$out/perf.csv" || true
  wait "$ppid" || true
  if ! wait "$bpid"; then
    echo "instructions_per_io: nvmeof-bench with $n paths failed:" >&2
    cat "$out/bench.err" >&2
    exit 1
  fi
  # The reactor is the busiest thread of the bench (the others sleep or wait on sockets).
  ms=$(sort -t, -k2 -g -r "$out/perf.csv" | head -n 1 | cut -d, -f2)
  iops=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["total"]["iops"])' "$out/bench.json")
  read -r user_s sys_s <"$out/proc.txt"
  python3 - "$n" "$ms" "$iops" "$window" "${first:-0}" "$user_s" "$sys_s" "${first_user:-0}" <<'PY' | tee "$out/line"
import sys
n, ms, iops, window, first = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
user_s, sys_s, first_user = float(sys.argv[6]), float(sys.argv[7]), float(sys.argv[8])
ios = iops * window
ns = ms * 1e6 / ios
user_ns = user_s * 1e9 / ios
print(f"paths {n}: {iops:.0f} IOPS, reactor thread {ns:.0f} ns CPU per I/O"
      + (f" ({ns / first:.3f} x 1 path)" if first else " (1.000 x 1 path)")
      + f"; user {user_ns:.0f} ns" + (f" ({user_ns / first_user:.3f} x)" if first_user else " (1.000 x)")
      + f", kernel {sys_s * 1e9 / ios:.0f} ns")
PY
  [ -n "$first" ] || first=$(python3 -c 'import sys; print(float(sys.argv[1]) * 1e6 / (float(sys.argv[2]) * float(sys.argv[3])))' "$ms" "$iops" "$window")
  [ -n "${first_user:-}" ] || first_user=$(python3 -c 'import sys; print(float(sys.argv[1]) * 1e9 / (float(sys.argv[2]) * float(sys.argv[3])))' "$user_s" "$iops" "$window")
done
