#!/bin/sh
# Our user-space NVMe/RDMA queue pair against the kernel's nvme-rdma host driven by fio's
# io_uring_cmd engine on its /dev/ngXnY, in one guest run, on the same rxe device and the same
# nvmet port: 4 KiB random reads at QD 1 (latency: 1 / IOPS of the closed loop, the same
# formula for both) and QD 32 (IOPS). A measurement, not a pass/fail check on speed.
# Run it with: tests/vm/vm_run.sh tests/vm/rdma_fio_compare.sh build-dir/tests/vm/rdma_perf [seconds]
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
bin=${1:?usage: rdma_fio_compare.sh <rdma_perf binary> [seconds]}
secs=${2:-5}
[ "$NVMEOF_MP" = N ] || skip "per-path devices need multipath=N"
command -v fio >/dev/null || skip "no fio in the guest"
fio --enghelp 2>/dev/null | grep -q io_uring_cmd || skip "fio has no io_uring_cmd engine"
[ -e /dev/infiniband/uverbs0 ] || skip "no user-space verbs device in the guest"

c0=$(host_connect_rdma) || fail "kernel rdma connect to $RDMA_ADDR"
ng=/dev/ng${c0#nvme}n1
wait_path "$ng" || fail "no $ng"

run_fio() {  # run_fio <qd>
    fio --name=randread --ioengine=io_uring_cmd --cmd_type=nvme --filename="$ng" --rw=randread \
        --bs=4k --iodepth="$1" --runtime="$secs" --time_based --size=64M --eta=never \
        --registerfiles --norandommap --randrepeat=0 --gtod_reduce=1 \
        --output=/tmp/fio.txt || fail "fio"
    _i=$(sed -n 's/.*read: IOPS=\([0-9.k]*\),.*/\1/p' /tmp/fio.txt | head -1)
    case $_i in
        *k) _i=$(echo "${_i%k}" | awk '{printf "%d", $1 * 1000}') ;;
    esac
    [ -n "$_i" ] || { cat /tmp/fio.txt; fail "no IOPS in fio's output"; }
    echo "fio io_uring_cmd (kernel nvme-rdma) randread 4k qd$1: $_i IOPS" >&2
    echo "$_i"
}
run_ours() {  # run_ours <qd>
    _o=$("$bin" "rdma://$RDMA_ADDR" "$NQN" "$secs" "$1") || fail "rdma_perf qd$1"
    echo "$_o" >&2
    echo "$_o" | sed -n 's/.*: \([0-9]*\) IOPS.*/\1/p'
}
# fio, ours, fio, ours at each depth: alternating evens out drift in the emulated machine.
# (fail in a command substitution ends only the subshell: each result is checked here.)
f1=$(run_fio 1) && o1=$(run_ours 1) && f2=$(run_fio 1) && o2=$(run_ours 1) || fail "QD 1 runs"
F1=$(run_fio 32) && O1=$(run_ours 32) && F2=$(run_fio 32) && O2=$(run_ours 32) || fail "QD 32 runs"
echo "$f1 $f2 $o1 $o2 $F1 $F2 $O1 $O2" | awk '{
    f = ($1 + $2) / 2; o = ($3 + $4) / 2; F = ($5 + $6) / 2; O = ($7 + $8) / 2;
    printf "QD1 4k randread: kernel nvme-rdma + fio %.1f us, nvmeof rdma %.1f us (1/IOPS, means of 2 runs)\n", 1e6 / f, 1e6 / o;
    printf "QD32 4k randread: kernel nvme-rdma + fio %d IOPS, nvmeof rdma %d IOPS (means of 2 runs)\n", F, O;
    printf "ratio nvmeof/kernel: QD1 latency %.2f, QD32 IOPS %.2f\n", (1e6 / o) / (1e6 / f), O / F}'
host_disconnect_all
