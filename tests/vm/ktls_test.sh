#!/bin/sh
# Kernel TLS hand-off on the 6.12 guest (tls.ko loaded): see ktls_test.cpp.
# Run it with: tests/vm/vm_run.sh --kernel 6.12 tests/vm/ktls_test.sh build-dir/tests/vm/ktls_test
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
bin=${1:?usage: ktls_test.sh <ktls_test binary>}
grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp || skip "$(uname -r) offers no tls ULP"
"$bin" --require || fail "kernel TLS hand-off"
