#!/usr/bin/env bash
# The soak run: bench/nvmeof-soak (a verified randrw workload over three paths of the embedded
# target) for MINUTES while random faults (reset, partition, ANA flips, slow, fail-status, all
# paths down then back) hit random paths every 0.2-2 s. Prints errors, mismatches, the longest
# read inside and outside the all-paths-down windows, a latency histogram, the failovers of a
# path no fault was on (a healthy path failed), RSS, heap,
# descriptors and threads over the run beside the load average; exits non-zero on errors, mismatches, or
# I/O that never finished (every wait has a timeout that names what it waited for).
# Not part of ./run test.
#   bench/soak.sh MINUTES [build-dir] [nvmeof-soak flags...]     e.g. bench/soak.sh 30
# Eight volumes on one engine (2 subsystems x 4 namespaces, the target in its own process):
#   bench/soak.sh 30 build --subsystems 2 --namespaces 4 --size-mib 16 --target-process
set -euo pipefail
minutes=${1:?usage: bench/soak.sh MINUTES [build-dir] [nvmeof-soak flags...]}
build=${2:-build}
shift $(( $# > 2 ? 2 : $# ))
here=$(dirname "$(readlink -f "$0")")
cd "$here/.."
ninja -C "$build" bench/nvmeof-soak tools/nvmeof-target >/dev/null  # --target-process runs the latter
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The library logs one line per failover and reconnect; they are counted, not shown. The soak's
# own progress and diagnostics (a wait that timed out, what was in flight) are shown.
set +e
"$build/bench/nvmeof-soak" --minutes "$minutes" "$@" 2> >(tee "$log" | grep --line-buffered -v '^nvmeof: ' >&2)
rc=$?
wait
set -e
echo "library log: $(wc -l <"$log") lines ($(grep -c 'reconnect' "$log" || true) about reconnects)"
grep -m5 -iE 'leak|sanitizer|runtime error|abort' "$log" || true
exit $rc
