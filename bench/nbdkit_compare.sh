#!/usr/bin/env bash
# The same volume through nbdkit (fio --ioengine=nbd over nbdkit-nvmeof-plugin.so) and directly
# (nvmeof-bench linked to the library), side by side: one nvmeof-target process (two loopback
# ports, RAM namespace), one nbdkit serving it on a Unix socket, and the two initiators run in
# alternating rounds (the order flips every round) so that drift on a shared machine hits both
# alike. A third column, fio against nbdkit's memory plugin (no NVMe behind it), is what the NBD
# hop alone allows on the machine at that time. nbdkit runs 64 request threads per connection (--threads; its default, 16, would cap
# QD 32 at 16 requests in the plugin at once). Workloads: 4 KiB random read at QD 32, 128 KiB
# sequential read at QD 8 (QD128). Prints
# IOPS and MiB/s per round, the medians and the median of the per-round nbd/direct ratios.
# A benchmark, not a test: nothing is asserted but that no I/O failed.
#   bench/nbdkit_compare.sh [build-dir] [rounds]      (defaults: build 5)
#   RUNTIME=5 QD128=8 SIZE=1G bench/nbdkit_compare.sh
#   PLUGIN_ARGS="poll=sleep reactors=2" bench/nbdkit_compare.sh   (more plugin parameters)
set -euo pipefail
build=${1:-build}
rounds=${2:-5}
runtime=${RUNTIME:-5}
qd128=${QD128:-8}
size=${SIZE:-1G}
nqn=nqn.2024-01.io.nvmeof:nbdkit-compare
out=$(mktemp -d)
target_pid=
nbdkit_pid=
memory_pid=
cleanup() {
  [ -n "$memory_pid" ] && kill "$memory_pid" 2>/dev/null && wait "$memory_pid" 2>/dev/null
  [ -n "$nbdkit_pid" ] && kill "$nbdkit_pid" 2>/dev/null && wait "$nbdkit_pid" 2>/dev/null
  [ -n "$target_pid" ] && kill "$target_pid" 2>/dev/null && wait "$target_pid" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT

"$build/tools/nvmeof-target" --listen 127.0.0.1:0 --listen 127.0.0.1:0 --nqn "$nqn" \
  --size "$size" --json >"$out/target.json" 2>"$out/target.log" &
target_pid=$!
for _ in $(seq 1 200); do [ -s "$out/target.json" ] && break; sleep 0.05; done
mapfile -t paths < <(python3 -c '
import json, sys
for p in json.load(open(sys.argv[1]))["ports"]: print(p["address"])' "$out/target.json")

nbdkit --foreground --threads 64 --unix "$out/nbd.sock" --pidfile "$out/nbdkit.pid" \
  "$build/nbdkit/nbdkit-nvmeof-plugin.so" "${paths[@]/#/path=}" nqn="$nqn" ${PLUGIN_ARGS:-} \
  </dev/null >"$out/nbdkit.log" 2>&1 &
nbdkit_pid=$!
for _ in $(seq 1 200); do [ -s "$out/nbdkit.pid" ] && break; sleep 0.05; done
uri="nbd+unix:///?socket=$out/nbd.sock"
nbdkit --foreground --threads 64 --unix "$out/mem.sock" --pidfile "$out/memory.pid" \
  memory "$size" </dev/null >"$out/memory.log" 2>&1 &
memory_pid=$!
for _ in $(seq 1 200); do [ -s "$out/memory.pid" ] && break; sleep 0.05; done

direct() {  # rw bs qd file
  "$build/tools/nvmeof-bench" "${paths[@]/#/--target=}" --nqn "$nqn" --rw "$1" --bs "$2" \
    --iodepth "$3" --runtime "${runtime}s" --no-verify --no-progress --json >"$4" 2>/dev/null
}
fio_nbd() {  # uri rw bs qd file
  fio --name=nbd --ioengine=nbd --uri="$1" --rw="$2" --bs="$3" --iodepth="$4" \
    --runtime="$runtime" --time_based --output-format=json --output="$5" >/dev/null
}
nbd() { fio_nbd "$uri" "$@"; }
memory() { fio_nbd "nbd+unix:///?socket=$out/mem.sock" "$@"; }

for i in $(seq 1 "$rounds"); do
  if (( i % 2 )); then order=(direct nbd memory); else order=(memory nbd direct); fi
  for m in "${order[@]}"; do
    "$m" randread 4k 32 "$out/$m-4k-$i.json"
    "$m" read 128k "$qd128" "$out/$m-128k-$i.json"
  done
done

python3 - "$out" "$rounds" "$qd128" <<'PY'
import json, statistics, sys
out, rounds, qd = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(m, bs, i):
    j = json.load(open(f"{out}/{m}-{bs}-{i}.json"))
    if m == "direct":
        assert j["errors"] == 0, (m, bs, i)
        return j["read"]["iops"], j["read"]["mib_per_s"]
    job = j["jobs"][0]
    assert job["error"] == 0, (m, bs, i)
    return job["read"]["iops"], job["read"]["bw_bytes"] / (1 << 20)
cols = {k: [] for k in ("iops_direct", "iops_nbd", "iops_memory", "mib_direct", "mib_nbd",
                         "mib_memory")}
print(f"round  4k randread QD32 IOPS (direct / nbd / nbd-memory)   "
      f"128k read QD{qd} MiB/s (direct / nbd / nbd-memory)")
row = "%5s  %10.0f / %-10.0f / %-10.0f          %9.1f / %-9.1f / %-9.1f"
for i in range(1, rounds + 1):
    vals = tuple(load(m, "4k", i)[0] for m in ("direct", "nbd", "memory")) + \
        tuple(load(m, "128k", i)[1] for m in ("direct", "nbd", "memory"))
    for k, v in zip(cols, vals):
        cols[k].append(v)
    print(row % ((i,) + vals))
print(row % (("median",) + tuple(statistics.median(v) for v in cols.values())))
ratio = lambda a, b: statistics.median([x / y for x, y in zip(cols[a], cols[b])])
print("nbd/direct (median of per-round ratios): 4k randread QD32 IOPS x%.3f; 128k read QD%s "
      "MiB/s x%.3f" % (ratio("iops_nbd", "iops_direct"), qd, ratio("mib_nbd", "mib_direct")))
print("nbd/nbd-memory: 4k x%.3f; 128k x%.3f" % (ratio("iops_nbd", "iops_memory"),
                                               ratio("mib_nbd", "mib_memory")))
PY
