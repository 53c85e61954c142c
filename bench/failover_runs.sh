#!/usr/bin/env bash
# The failover benchmark: nvmeof-bench against the embedded target on two paths, a fault on
# path 0 midway, repeated N times per fault kind and workload. Prints the distribution of the
# longest I/O stall (the longest single I/O after the fault) and of the longest completion gap,
# plus errors and mismatches summed over the runs. A benchmark, not a test: nothing is asserted.
#   bench/failover_runs.sh [build-dir] [runs] [kinds...]
set -euo pipefail
build=${1:-build}
runs=${2:-20}
shift $(( $# > 2 ? 2 : $# )) || true
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(reset blackhole)
bench=$build/tools/nvmeof-bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for kind in "${kinds[@]}"; do
  for rw in randread randwrite randrw; do
    for i in $(seq 1 "$runs"); do
      "$bench" --embedded --paths 2 --rw "$rw" --bs 4k --iodepth 32 --runtime 2s \
        --fail-path 0 --fail-at 1s --fail-kind "$kind" --seed "$i" --json \
        >"$out/$kind-$rw-$i.json" 2>/dev/null || true
    done
    python3 - "$out" "$kind" "$rw" "$runs" <<'PY'
import json, sys, glob, statistics
d, kind, rw, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
io, gap, err, mis, ok = [], [], 0, 0, 0
for f in glob.glob(f"{d}/{kind}-{rw}-*.json"):
    try:
        j = json.load(open(f))
    except Exception:
        continue
    ok += 1
    io.append(j["fault"]["longest_io_ms"]); gap.append(j["fault"]["longest_gap_ms"])
    err += j["errors"]; mis += j["mismatches"]
def q(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(round(p * (len(v) - 1))))] if v else float("nan")
print(f"{kind:10s} {rw:10s} runs {ok}/{runs}  longest I/O ms p50 {q(io,.5):6.2f} max {max(io) if io else float('nan'):6.2f}"
      f"  longest gap ms p50 {q(gap,.5):6.2f} max {max(gap) if gap else float('nan'):6.2f}  errors {err} mismatches {mis}")
PY
  done
done
