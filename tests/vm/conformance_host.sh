#!/bin/sh
# Our user-space NVMe/TCP initiator against Linux nvmet-tcp: identify, verified I/O (sizes,
# digests, queue depths), the ANA log as nvmet was set, and a Volume over both ports that loses
# port 2 in the middle of a verified workload.
# Run it with: tests/vm/vm_run.sh tests/vm/conformance_host.sh build-dir/tests/vm/conformance_host
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
bin=${1:?usage: conformance_host.sh <conformance_host binary>}
secs=${2:-8}

step() { echo "conformance_host: $*"; }
run() { run_timed "$bin" "$@"; }

step "identify"
run "[identify]" || fail "identify through $TCP1 and $TCP2"

step "I/O: 4 KiB..1 MiB, digests off/on, QD 1 and QD 128"
run "[io]" || fail "verified I/O through $TCP1"

step "ANA: port 1 optimized, port 2 non-optimized"
nvmet_ana_state 1 optimized || fail "set ANA of port 1"
nvmet_ana_state 2 non-optimized || fail "set ANA of port 2"
CONF_ANA1=optimized CONF_ANA2=non-optimized run "[ana]" || fail "ANA log (optimized/non-optimized)"

step "ANA: port 2 inaccessible"
nvmet_ana_state 2 inaccessible || fail "set ANA of port 2"
CONF_ANA1=optimized CONF_ANA2=inaccessible run "[ana]" || fail "ANA log (optimized/inaccessible)"
nvmet_ana_state 2 optimized || fail "reset ANA of port 2"

step "Volume over both ports, port 2 removed after I/O starts (${secs} s)"
ready=/tmp/conformance.ready
rm -f "$ready"
CONF_SECONDS=$secs CONF_EXPECT_LOSS=1 CONF_READY=$ready run "[volume]" &
pid=$!
w=200
while [ ! -e "$ready" ] && [ $w -gt 0 ] && kill -0 $pid 2>/dev/null; do
    sleep 0.1
    w=$((w - 1))
done
[ -e "$ready" ] || { wait $pid; fail "the volume workload never started"; }
sleep 1
step "removing port 2"
nvmet_port_remove 2 || fail "remove port 2"
wait $pid
rc=$?
nvmet_port_add 2
[ $rc = 0 ] || fail "volume workload across the loss of port 2 (exit $rc)"
step "pass"
