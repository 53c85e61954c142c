#!/bin/sh
# IOPS with NUMA placement against the same run with placement off (reactors unpinned, every
# buffer on node 0), in the two-node guest (vm_run.sh --numa), over two nvmet ports on eth0
# (node 0) and eth1 (node 1), two reactors, the numa selector. The runs alternate (on, off, on,
# off) so that drift hits both. Prints IOPS, the ratio and the per-path split. TCG emulates the
# two nodes on one memory system, so the ratio measures our own overhead more than NUMA.
# A benchmark, not a test: nothing is asserted.
# Run it with: tests/vm/vm_run.sh --numa tests/vm/numa_bench.sh build-dir/tools/nvmeof-bench [secs]
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
bench=${1:?usage: numa_bench.sh <nvmeof-bench> [seconds]}
secs=${2:-5}
[ -d /sys/devices/system/node/node1 ] || skip "one NUMA node: run through vm_run.sh --numa"
numa_setup || fail "numa_setup"

run() {  # run <label> [flags...]
    _l=$1
    shift
    "$bench" --target "$NUMA_ADDR0" --target "$NUMA_ADDR1" --host-iface "$NUMA_IF0" \
        --host-iface "$NUMA_IF1" --nqn "$NQN" --reactors 2 --selector numa --rw randread \
        --bs 4k --iodepth 32 --runtime "${secs}s" --io-deadline 2s "$@" >/tmp/b.txt 2>/tmp/b.err ||
        { cat /tmp/b.err /tmp/b.txt; fail "nvmeof-bench $_l"; }
    _iops=$(sed -n 's/^  total: ios=[0-9]* *iops=\([0-9]*\).*/\1/p' /tmp/b.txt)
    _p0=$(sed -n 's/^    #0 .* ios=\([0-9]*\).*/\1/p' /tmp/b.txt)
    _p1=$(sed -n 's/^    #1 .* ios=\([0-9]*\).*/\1/p' /tmp/b.txt)
    echo "numa_bench: $_l iops=$_iops path0(node 0)=$_p0 path1(node 1)=$_p1"
    eval "${_l}_sum=\$((\${${_l}_sum:-0} + _iops))"
}
"$bench" --target "$NUMA_ADDR0" --target "$NUMA_ADDR1" --host-iface "$NUMA_IF0" \
    --host-iface "$NUMA_IF1" --nqn "$NQN" --reactors 2 --selector numa --runtime 1s \
    --io-deadline 2s --show-placement 2>/dev/null | sed -n '/^placement/,/reactor 1/p'
for i in 1 2; do
    run on --placement numa
    run off --placement unpinned --memory-node 0
done
awk -v on="$on_sum" -v off="$off_sum" \
    'BEGIN { printf "numa_bench: placement on %d IOPS, off %d IOPS (mean of 2), ratio on/off %.3f\n", on / 2, off / 2, on / off }'
