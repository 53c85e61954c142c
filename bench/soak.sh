#!/usr/bin/env bash
# The soak run: bench/nvmeof-soak (a verified randrw workload over three paths of the embedded
# target) for MINUTES while random faults (reset, partition, ANA flips, slow, fail-status, all
# paths down then back) hit random paths every 0.2-2 s. Prints errors, mismatches, the longest
# read and write, RSS and descriptors at start and end; exits non-zero on errors or mismatches.
# Not part of ./run test.
#   bench/soak.sh MINUTES [build-dir] [nvmeof-soak flags...]     e.g. bench/soak.sh 30
set -euo pipefail
minutes=${1:?usage: bench/soak.sh MINUTES [build-dir] [nvmeof-soak flags...]}
build=${2:-build}
shift $(( $# > 2 ? 2 : $# ))
here=$(dirname "$(readlink -f "$0")")
cd "$here/.."
ninja -C "$build" bench/nvmeof-soak >/dev/null
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The library logs one line per failover and reconnect; they are counted, not shown.
set +e
"$build/bench/nvmeof-soak" --minutes "$minutes" "$@" 2>"$log"
rc=$?
set -e
echo "library log: $(wc -l <"$log") lines ($(grep -c 'reconnect' "$log" || true) about reconnects)"
grep -m5 -iE 'leak|sanitizer|runtime error|abort' "$log" || true
exit $rc
