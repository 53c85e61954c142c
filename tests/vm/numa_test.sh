#!/bin/sh
# NUMA placement against Linux nvmet in the two-node guest (vm_run.sh --numa): one nvmet port on
# an address of eth0 (node 0), one on eth1 (node 1); our initiator binds each path to its NIC.
# Both target addresses belong to this guest, so the bytes themselves go through the loopback
# device: what the test checks is the host side (plan, pinning, memory, path choice), not NIC
# traffic. Huge pages are reserved on both nodes so the large buffers take them.
# Run it with: tests/vm/vm_run.sh --numa tests/vm/numa_test.sh build-dir/tests/vm/numa_test
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
bin=${1:?usage: numa_test.sh <numa_test binary>}

[ -d /sys/devices/system/node/node1 ] || skip "one NUMA node: run through vm_run.sh --numa"
for n in 0 1; do
    echo 16 >/sys/devices/system/node/node$n/hugepages/hugepages-2048kB/nr_hugepages 2>/dev/null
done

numa_setup || fail "numa_setup: addresses on eth0/eth1 and nvmet ports"
export NUMA_READY=/tmp/numa.ready
rm -f "$NUMA_READY"
"$bin" &
pid=$!
w=1800
while [ ! -e "$NUMA_READY" ] && [ $w -gt 0 ] && kill -0 $pid 2>/dev/null; do
    sleep 0.1
    w=$((w - 1))
done
if [ -e "$NUMA_READY" ]; then
    echo "numa_test: taking port $NUMA_PORT1 (node 1) away"
    nvmet_port_remove "$NUMA_PORT1" || fail "remove port $NUMA_PORT1"
fi
wait $pid
