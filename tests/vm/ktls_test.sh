#!/bin/sh
# Kernel TLS on the 6.12 guest (tls.ko loaded). First the hand-off itself (ktls_test.cpp: a
# user-space handshake, then the kernel's record layer against OpenSSL's, both ways, with a
# wrong-sequence negative control). Then our host over it: nvmeof-bench against its embedded
# target on two TLS paths (the target's ports require TLS and encrypt in user space; the host's
# queue pairs hand their sessions to the kernel), data verified, and the kernel's tls_stat
# showing one kernel TLS session per queue; with NVMEOF_KTLS=0 the same run stays in user space
# and the kernel counts none (so the counter does measure the hand-off).
# Run it with: tests/vm/vm_run.sh --kernel 6.12 tests/vm/ktls_test.sh ktls_test nvmeof-bench
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
bin=${1:?usage: ktls_test.sh <ktls_test binary> <nvmeof-bench binary>}
bench=${2:?usage: ktls_test.sh <ktls_test binary> <nvmeof-bench binary>}
grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp || skip "$(uname -r) offers no tls ULP"
"$bin" --require || fail "kernel TLS hand-off"

# 32 bytes 00..1f with their CRC-32 (hash 01: TLS_AES_128_GCM_SHA256).
KEY=NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:
txsw() { awk '$1 == "TlsTxSw" { print $2 }' /proc/net/tls_stat; }
run_bench() { # <label> [env...]
    _label=$1
    shift
    _before=$(txsw)
    env "$@" "$bench" --embedded --paths 2 --rw randrw --bs 4k --iodepth 8 --size 8m --runtime 2s \
        --tls-psk "$KEY" --io-deadline 2s --json >/tmp/ktls-bench.json 2>/tmp/ktls-bench.err ||
        { cat /tmp/ktls-bench.err; fail "$_label: nvmeof-bench over TLS failed"; }
    grep -q '"mismatches": 0' /tmp/ktls-bench.json || { cat /tmp/ktls-bench.json; fail "$_label: mismatches"; }
    grep -q '"tls": true' /tmp/ktls-bench.json || fail "$_label: the bench did not run TLS"
    SESSIONS=$(( $(txsw) - _before ))
    echo "ktls_test: $_label: verified, $SESSIONS kernel TLS sessions"
}
run_bench "host on kernel TLS"
# Two paths, each an admin queue and at least one I/O queue.
[ "$SESSIONS" -ge 4 ] || fail "host on kernel TLS: expected at least 4 kernel TLS sessions, got $SESSIONS"
run_bench "host on user-space TLS" NVMEOF_KTLS=0
[ "$SESSIONS" = 0 ] || fail "NVMEOF_KTLS=0: the kernel still counted $SESSIONS sessions"
echo "ktls_test: ok"
