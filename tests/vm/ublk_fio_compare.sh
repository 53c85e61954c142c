#!/bin/sh
# The cost of the ublk hop, in the same guest run: fio (libaio, O_DIRECT) on /dev/ublkbN served
# by nvmeof-ublk against nvmeof-bench on the same volume (the same two nvmet paths $TCP1 and
# $TCP2, one reactor each, the same poll mode): 4 KiB random reads at QD 32 and 128 KiB
# sequential reads at QD 8, alternated twice. Prints the IOPS and the ratios (ublk / bench). A
# measurement, not a pass/fail check on speed (TCG figures are only good as ratios).
# Run it with: tests/vm/vm_run.sh --kernel 6.12 tests/vm/ublk_fio_compare.sh build/tools/nvmeof-ublk build/tools/nvmeof-bench [seconds]
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
tool=${1:?usage: ublk_fio_compare.sh <nvmeof-ublk> <nvmeof-bench> [seconds]}
bench=${2:?usage: ublk_fio_compare.sh <nvmeof-ublk> <nvmeof-bench> [seconds]}
secs=${3:-5}
[ -e /dev/ublk-control ] || skip "kernel $(uname -r) has no ublk driver"

start_ublk nvmeof-ublk "$tool" --path "$TCP1" --path "$TCP2" --nqn "$NQN" --queues 1 --depth 64
dev=$(head -n 1 /tmp/ublk.out)
wait_path "$dev" 10 || fail "no $dev"

# run_fio <rw> <bs> <qd>: IOPS of fio on the ublk device.
run_fio() {
    fio --name=ublk --ioengine=libaio --direct=1 --filename="$dev" --rw="$1" --bs="$2" \
        --iodepth="$3" --runtime="$secs" --time_based --size=64M --eta=never \
        --norandommap --randrepeat=0 --gtod_reduce=1 --output=/tmp/fio.txt || fail "fio"
    _i=$(sed -n 's/.*read: IOPS=\([0-9.k]*\),.*/\1/p' /tmp/fio.txt | head -1)
    case $_i in
        *k) _i=$(echo "${_i%k}" | awk '{printf "%d", $1 * 1000}') ;;
    esac
    [ -n "$_i" ] || { cat /tmp/fio.txt; fail "no IOPS in fio's output"; }
    echo "fio on $dev $1 $2 qd$3: $_i IOPS" >&2
    echo "$_i"
}
# run_bench <rw> <bs> <qd>: IOPS of nvmeof-bench on the same volume.
run_bench() {
    _o=$("$bench" --target "$TCP1" --target "$TCP2" --nqn "$NQN" --reactors 1 --rw "$1" --bs "$2" \
        --iodepth "$3" --runtime "${secs}s" --size 64M --no-verify --no-progress --json) ||
        fail "nvmeof-bench"
    _i=$(echo "$_o" | tr -d ' \n' | sed -n 's/.*"total":{[^}]*"iops":\([0-9.]*\).*/\1/p' | cut -d. -f1)
    [ -n "$_i" ] || { echo "$_o"; fail "no IOPS in nvmeof-bench's output"; }
    echo "nvmeof-bench $1 $2 qd$3: $_i IOPS" >&2
    echo "$_i"
}
# fio, bench, fio, bench: alternating evens out drift in the emulated machine.
u1=$(run_fio randread 4k 32); b1=$(run_bench randread 4k 32)
s1=$(run_fio read 128k 8); c1=$(run_bench read 128k 8)
u2=$(run_fio randread 4k 32); b2=$(run_bench randread 4k 32)
s2=$(run_fio read 128k 8); c2=$(run_bench read 128k 8)
echo "$u1 $u2 $b1 $b2 $s1 $s2 $c1 $c2" | awk '{u = ($1 + $2) / 2; b = ($3 + $4) / 2;
    s = ($5 + $6) / 2; c = ($7 + $8) / 2;
    printf "%-28s %14s %14s %8s\n", "(means of 2 runs)", "fio via ublk", "nvmeof-bench", "ratio";
    printf "%-28s %9d IOPS %9d IOPS %8.2f\n", "4 KiB random read, QD 32", u, b, u / b;
    printf "%-28s %9.1f MiB/s %8.1f MiB/s %8.2f\n", "128 KiB sequential read, QD 8", s / 8, c / 8, s / c }'
kill -TERM "$tool_pid"
wait "$tool_pid" || fail "nvmeof-ublk did not stop cleanly"
