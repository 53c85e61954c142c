#!/bin/sh
# Our user-space NVMe/RDMA initiator against Linux nvmet-rdma on rdma_rxe: connect and
# keep-alive, verified I/O, refused connects, and a Volume over our RDMA and TCP paths that
# loses the RDMA port (nvmet port 3) in the middle of a verified workload and gets it back.
# Run it with: tests/vm/vm_run.sh tests/vm/rdma_host.sh build-dir/tests/vm/rdma_host
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
bin=${1:?usage: rdma_host.sh <rdma_host binary>}
secs=${2:-14}
[ -e /dev/infiniband/rdma_cm ] || skip "no /dev/infiniband/rdma_cm in the guest"
[ -e /dev/infiniband/uverbs0 ] || skip "no user-space verbs device in the guest"

step() { echo "rdma_host: $*"; }
run() { run_timed "$bin" "$@"; }

step "connect, identify, keep-alive"
run "[connect]" || fail "connect through rdma $RDMA_ADDR"

step "I/O: QD 1 and QD 128, 4 KiB..128 KiB, MDTS split"
run "[io]" || fail "verified I/O through rdma $RDMA_ADDR"

step "refused connects"
run "[refused]" || fail "refused connects"

step "Volume over rdma $RDMA_ADDR and tcp $TCP1, rdma port removed and restored (${secs} s)"
ready=/tmp/rdma_host.ready
rm -f "$ready"
CONF_SECONDS=$secs CONF_EXPECT_LOSS=1 CONF_READY=$ready run "[volume]" &
pid=$!
w=300
while [ ! -e "$ready" ] && [ $w -gt 0 ] && kill -0 $pid 2>/dev/null; do
    sleep 0.1
    w=$((w - 1))
done
[ -e "$ready" ] || { wait $pid; fail "the volume workload never started"; }
sleep 1
step "removing port 3 (rdma)"
nvmet_port_remove 3 || fail "remove port 3"
sleep 3
step "restoring port 3 (rdma)"
nvmet_port_add 3 || fail "add port 3"
wait $pid
rc=$?
[ $rc = 0 ] || fail "volume workload across the loss of the rdma port (exit $rc)"
step "pass"
