#!/usr/bin/env bash
# The failover benchmark: nvmeof-bench against the embedded target on two paths, a fault on
# path 0 midway, repeated N times per fault kind and workload. Prints the distribution of the
# time from the fault to path 0's failure (its detection: the failover budget of a silent path
# is measured here, the tests only check what failed it), of the longest I/O stall (the longest
# single I/O after the fault) and of the longest completion gap, plus errors and mismatches
# summed over the runs, with Cross-Controller Reset on and off.
# A benchmark, not a test: nothing is asserted.
#   bench/failover_runs.sh [build-dir] [runs] [kinds...]     (default kinds: reset blackhole partition)
#   RW="randread randwrite" CCR="on off" bench/failover_runs.sh ...
#   HOG=2 bench/failover_runs.sh ...   (a loaded host: that many busy loops beside the bench and
#                                       its embedded target, on the same cores, for every run)
# "healthy failed" counts the failovers of a path that was not faulted (path 1) or of path 0
# before its fault: a false failover. It must stay 0, loaded host or not.
set -euo pipefail
build=${1:-build}
runs=${2:-20}
shift $(( $# > 2 ? 2 : $# )) || true
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(reset blackhole partition)
read -r -a rws <<<"${RW:-randread randwrite}"
read -r -a ccrs <<<"${CCR:-on off}"
bench=$build/tools/nvmeof-bench
out=$(mktemp -d)
hogs=()
stop_hogs() { [ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null || true; }
trap 'stop_hogs; rm -rf "$out"' EXIT
for _ in $(seq 1 "${HOG:-0}"); do
  ( while :; do :; done ) &
  hogs+=($!)
done
[ ${#hogs[@]} -eq 0 ] || echo "loaded host: ${#hogs[@]} busy loops beside every run"

for ccr in "${ccrs[@]}"; do
for kind in "${kinds[@]}"; do
  for rw in "${rws[@]}"; do
    for i in $(seq 1 "$runs"); do
      "$bench" --embedded --paths 2 --rw "$rw" --bs 4k --iodepth 32 --runtime 2s \
        --fail-path 0 --fail-at 1s --fail-kind "$kind" --ccr "$ccr" --seed "$i" --json \
        >"$out/$ccr-$kind-$rw-$i.json" 2>/dev/null || true
    done
    python3 - "$out" "$kind" "$rw" "$runs" "$ccr" <<'PY'
import json, sys, glob, statistics
d, kind, rw, runs, ccr = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
io, gap, det, err, mis, ok, healthy = [], [], [], 0, 0, 0, 0
rules = {}
for f in glob.glob(f"{d}/{ccr}-{kind}-{rw}-*.json"):
    try:
        j = json.load(open(f))
    except Exception:
        continue
    ok += 1
    io.append(j["fault"]["longest_io_ms"]); gap.append(j["fault"]["longest_gap_ms"])
    err += j["errors"]; mis += j["mismatches"]
    first = [e["detect_ms"] for e in j["fault"].get("timeline", []) if e.get("path") == 0 and e.get("detect_ms") is not None]
    if first: det.append(min(first))
    for e in j["fault"].get("timeline", []):
        if e.get("fence_rule"): rules[e["fence_rule"]] = rules.get(e["fence_rule"], 0) + 1
        if e.get("path") != 0 or (e.get("detect_ms") is not None and e["detect_ms"] < 0): healthy += 1
def q(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(round(p * (len(v) - 1))))] if v else float("nan")
print(f"ccr {ccr:3s} {kind:10s} {rw:10s} runs {ok}/{runs}  detected ms p50 {q(det,.5):6.2f} max {max(det) if det else float('nan'):6.2f}"
      f"  longest I/O ms p50 {q(io,.5):6.2f} max {max(io) if io else float('nan'):6.2f}"
      f"  longest gap ms p50 {q(gap,.5):6.2f} max {max(gap) if gap else float('nan'):6.2f}  errors {err} mismatches {mis}"
      f"  healthy failed {healthy}  fenced by {rules}")
PY
  done
done
done
