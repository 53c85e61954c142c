#!/bin/sh
# The multipath Volume over kernel paths: controllers connected through libnvme (two TCP, one
# RDMA), their /dev/ngXnY driven by io_uring passthrough, a verified workload through an ANA
# flip and a lost port; then the controllers deleted through libnvme.
# Run it with: tests/vm/vm_run.sh tests/vm/kernel_volume_test.sh build-dir/tests/vm/kernel_volume_test
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
bin=${1:?usage: kernel_volume_test.sh <kernel_volume_test binary>}
[ "$NVMEOF_MP" = N ] || skip "per-path devices need multipath=N"

"$bin" "[connect]" || fail "kernel connect through libnvme"
"$bin" "[volume]" || fail "volume over kernel paths"
"$bin" "[disconnect]" || fail "kernel disconnect through libnvme"
echo "kernel_volume_test: pass"
