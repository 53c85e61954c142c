#!/bin/sh
# fio's io_uring_cmd engine against nvmeof on the same path (tcp $TCP1), in the same guest run:
# 4 KiB random reads at QD 32, through our bare passthrough queue pair (uring_qp_test) and
# through nvmeof-bench (the whole Volume over a passthrough:// path). Prints the IOPS and the
# ratios. A measurement, not a pass/fail check on speed (TCG figures are only good as ratios).
# The volume gets a 2 s command deadline: TCG stalls past the 25 ms default now and then, and a
# kernel path that misses its deadline is fenced by resetting its controller.
# Run it with: tests/vm/vm_run.sh tests/vm/uring_fio_compare.sh build-dir/tests/vm/uring_qp_test [seconds] [nvmeof-bench]
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
bin=${1:?usage: uring_fio_compare.sh <uring_qp_test binary> [seconds]}
secs=${2:-5}
bench=${3:-}
[ "$NVMEOF_MP" = N ] || skip "per-path devices need multipath=N"
command -v fio >/dev/null || skip "no fio in the guest"
fio --enghelp 2>/dev/null | grep -q io_uring_cmd || skip "fio has no io_uring_cmd engine"

c0=$(host_connect_tcp 127.0.0.1 4420) || fail "tcp connect to $TCP1"
ng=/dev/ng${c0#nvme}n1
wait_path "$ng" || fail "no $ng"

# fio, ours, fio, ours: alternating evens out drift in the emulated machine.
run_fio() {
    fio --name=randread --ioengine=io_uring_cmd --cmd_type=nvme --filename="$ng" --rw=randread \
        --bs=4k --iodepth=32 --runtime="$secs" --time_based --size=64M --eta=never \
        --registerfiles --norandommap --randrepeat=0 --gtod_reduce=1 \
        --output=/tmp/fio.txt || fail "fio"
    _i=$(sed -n 's/.*read: IOPS=\([0-9.k]*\),.*/\1/p' /tmp/fio.txt | head -1)
    case $_i in
        *k) _i=$(echo "${_i%k}" | awk '{printf "%d", $1 * 1000}') ;;
    esac
    [ -n "$_i" ] || { cat /tmp/fio.txt; fail "no IOPS in fio's output"; }
    echo "fio io_uring_cmd randread 4k qd32: $_i IOPS" >&2
    echo "$_i"
}
run_ours() {
    _o=$("$bin" randread "$ng" "$secs" 32) || fail "uring_qp_test randread"
    echo "nvmeof uring queue pair randread 4k qd32: $(echo "$_o" | sed -n 's/.*: \([0-9]*\) IOPS.*/\1/p') IOPS" >&2
    echo "$_o" | sed -n 's/.*: \([0-9]*\) IOPS.*/\1/p'
}
run_bench() {
    _o=$("$bench" --target "passthrough://$ng" --nqn "$NQN" --rw randread --bs 4k --iodepth 32 \
        --runtime "${secs}s" --size 64M --no-verify --io-deadline 2s --fence-bound 100ms --json) ||
        fail "nvmeof-bench"
    _i=$(echo "$_o" | tr -d ' \n' | sed -n 's/.*"total":{[^}]*"iops":\([0-9.]*\).*/\1/p' | cut -d. -f1)
    [ -n "$_i" ] || { echo "$_o"; fail "no IOPS in nvmeof-bench's output"; }
    echo "nvmeof-bench (volume, passthrough) randread 4k qd32: $_i IOPS" >&2
    echo "$_i"
}
if [ -n "$bench" ]; then
    f1=$(run_fio); o1=$(run_ours); b1=$(run_bench); f2=$(run_fio); o2=$(run_ours); b2=$(run_bench)
else
    f1=$(run_fio); o1=$(run_ours); f2=$(run_fio); o2=$(run_ours); b1=0; b2=0
fi
echo "$f1 $f2 $o1 $o2 $b1 $b2" | awk '{f = ($1 + $2) / 2; o = ($3 + $4) / 2; b = ($5 + $6) / 2;
    printf "fio io_uring_cmd: %d IOPS, nvmeof uring queue pair: %d IOPS (means of 2 runs)\n", f, o;
    printf "ratio nvmeof queue pair/fio: %.2f\n", o / f;
    if (b > 0) {
        printf "nvmeof-bench through a passthrough volume: %d IOPS (mean of 2 runs)\n", b;
        printf "ratio nvmeof-bench/fio: %.2f\n", b / f;
    }}'
host_disconnect_all
