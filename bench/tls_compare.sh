#!/usr/bin/env bash
# NVMe/TCP with TLS 1.3 against plaintext, side by side: nvmeof-bench against its embedded
# target (one path), the same workload in plaintext and through TLS (--tls-psk: the host's
# queue pairs encrypt on their reactor, the target's ports require TLS), in alternating rounds
# (the order flips every round) so that drift on a shared machine hits both alike. Prints, per
# round and as medians: QD1 4 KiB read latency (p50, mean) and 128 KiB sequential read MiB/s,
# with the TLS/plaintext ratios. A benchmark, not a test: nothing is asserted.
#   bench/tls_compare.sh [build-dir] [rounds]       (defaults: build 7)
#   KEY=NVMeTLSkey-1:02:...: bench/tls_compare.sh   (SHA-384: TLS_AES_256_GCM_SHA384)
#   RUNTIME=3s QD128=8 bench/tls_compare.sh
set -euo pipefail
build=${1:-build}
rounds=${2:-7}
bench=$build/tools/nvmeof-bench
runtime=${RUNTIME:-2s}
qd128=${QD128:-8}
# A fixed 32-byte key (hash 01: TLS_AES_128_GCM_SHA256) unless KEY is given.
key=${KEY:-$(python3 -c '
import base64, zlib
k = bytes(range(32))
print("NVMeTLSkey-1:01:" + base64.b64encode(k + zlib.crc32(k).to_bytes(4, "little")).decode() + ":")')}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() {  # mode bs qd file
  local tls=()
  [ "$1" = tls ] && tls=(--tls-psk "$key")
  "$bench" --embedded --paths 1 --rw read --bs "$2" --iodepth "$3" --runtime "$runtime" \
    --no-verify --no-progress --json "${tls[@]}" >"$4" 2>/dev/null
}

for i in $(seq 1 "$rounds"); do
  if (( i % 2 )); then order=(plain tls); else order=(tls plain); fi
  for m in "${order[@]}"; do
    run "$m" 4k 1 "$out/$m-4k-$i.json"
    run "$m" 128k "$qd128" "$out/$m-128k-$i.json"
  done
done

python3 - "$out" "$rounds" "$qd128" "$key" <<'PY'
import json, statistics, sys
out, rounds, qd, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def load(m, bs, i):
    j = json.load(open(f"{out}/{m}-{bs}-{i}.json"))
    assert j["errors"] == 0 and j["config"]["tls"] == (m == "tls"), (m, bs, i)
    return j["read"]
rows = {k: [] for k in ("p50_plain", "p50_tls", "mean_plain", "mean_tls", "mib_plain", "mib_tls")}
print(f"suite: {'TLS_AES_256_GCM_SHA384' if key.startswith('NVMeTLSkey-1:02') else 'TLS_AES_128_GCM_SHA256'}")
print("round  4k QD1 p50 us (plain/tls)  mean us (plain/tls)   128k QD%s MiB/s (plain/tls)" % qd)
for i in range(1, rounds + 1):
    p, t = load("plain", "4k", i), load("tls", "4k", i)
    P, T = load("plain", "128k", i), load("tls", "128k", i)
    vals = (p["latency_us"]["p50"], t["latency_us"]["p50"], p["latency_us"]["mean"],
            t["latency_us"]["mean"], P["mib_per_s"], T["mib_per_s"])
    for k, v in zip(rows, vals):
        rows[k].append(v)
    print("%5d  %10.1f / %-10.1f   %8.1f / %-8.1f   %10.1f / %-10.1f" % ((i,) + vals))
med = {k: statistics.median(v) for k, v in rows.items()}
ratio = lambda a, b: statistics.median([x / y for x, y in zip(rows[a], rows[b])])
print("median %10.1f / %-10.1f   %8.1f / %-8.1f   %10.1f / %-10.1f" % tuple(med.values()))
print("TLS/plaintext (median of per-round ratios): 4k QD1 p50 latency x%.3f, mean x%.3f; "
      "128k QD%s MiB/s x%.3f" % (ratio("p50_tls", "p50_plain"), ratio("mean_tls", "mean_plain"),
                                 qd, ratio("mib_tls", "mib_plain")))
PY
