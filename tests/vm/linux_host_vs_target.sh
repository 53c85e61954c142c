#!/bin/sh
# Linux's NVMe/TCP host against OUR embedded target (tools/nvmeof-target) in the guest:
# discovery lists both ports, and a port added at run time (nvmeof-target ctl add-port) then
# removed comes and goes in it; nvme connect with digests off and on gives live controllers,
# a stamped pattern written with O_DIRECT through one controller reads back intact through
# both, nvme ana-log shows the states the target was started with, and disconnect is clean.
# Run it with: tests/vm/vm_run.sh tests/vm/linux_host_vs_target.sh build-dir/tools/nvmeof-target
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
target=${1:?usage: linux_host_vs_target.sh <nvmeof-target binary>}
[ "$NVMEOF_MP" = N ] || skip "per-path devices need multipath=N"

ADDR=127.0.0.3
OUR_NQN=nqn.2024-01.io.nvmeof:conformance
BLOCKS=256   # 1 MiB in 4 KiB blocks
SEEK=100     # blocks into the namespace
work=/tmp/conformance
mkdir -p "$work"

step() { echo "linux_host_vs_target: $*"; }
tpid=
cleanup() {
    nvme disconnect -n "$OUR_NQN" >/dev/null 2>&1
    [ -n "$tpid" ] && kill "$tpid" 2>/dev/null
}
trap cleanup EXIT

$IP addr add "$ADDR/8" dev lo 2>/dev/null
$IP -4 addr show dev lo | grep -q "inet $ADDR/" || fail "cannot add $ADDR to lo"

# Port index 1 (the second --listen) is ANA group 2.
"$target" --listen "$ADDR:4420" --listen "$ADDR:4421" --nqn "$OUR_NQN" --size 64M \
    --ana 0=optimized --ana 1=non-optimized --control "$work/ctl.sock" --log \
    >"$work/target.out" 2>"$work/target.err" &
tpid=$!
w=100
until grep -q 'nsid 1:' "$work/target.out" 2>/dev/null; do
    kill -0 "$tpid" 2>/dev/null || { cat "$work/target.out" "$work/target.err"; fail "target exited at start"; }
    [ $w -gt 0 ] || fail "target did not start within 10 s"
    sleep 0.1
    w=$((w - 1))
done
cat "$work/target.out"

step "discovery"
nvme discover -t tcp -a "$ADDR" -s 4420 >"$work/discover.txt" 2>&1 || {
    cat "$work/discover.txt"
    fail "nvme discover -t tcp -a $ADDR -s 4420"
}
cat "$work/discover.txt"
# One "trsvcid subnqn traddr" line per entry.
entries=$(awk '/^trsvcid:/ {s=$2} /^subnqn:/ {n=$2} /^traddr:/ {print s, n, $2}' "$work/discover.txt")
for p in 4420 4421; do
    echo "$entries" | grep -qx "$p $OUR_NQN $ADDR" || fail "discovery does not list $OUR_NQN at $ADDR:$p"
done

discover_entries() {
    nvme discover -t tcp -a "$ADDR" -s 4420 >"$work/discover.txt" 2>&1 || {
        cat "$work/discover.txt"
        fail "nvme discover -t tcp -a $ADDR -s 4420"
    }
    awk '/^trsvcid:/ {s=$2} /^subnqn:/ {n=$2} /^traddr:/ {print s, n, $2}' "$work/discover.txt"
}
step "a port added at run time is in Linux's discovery, removed it is not"
"$target" ctl "$work/ctl.sock" add-port "$ADDR:4422" || fail "nvmeof-target ctl add-port $ADDR:4422"
discover_entries | grep -qx "4422 $OUR_NQN $ADDR" || { cat "$work/discover.txt"; fail "discovery does not list the added port 4422"; }
"$target" ctl "$work/ctl.sock" remove-port 2 || fail "nvmeof-target ctl remove-port 2"
discover_entries | grep -q "^4422 " && { cat "$work/discover.txt"; fail "discovery still lists the removed port 4422"; }
discover_entries | grep -qx "4421 $OUR_NQN $ADDR" || fail "discovery lost port 4421"

# A stamped pattern: every 4 KiB block names its LBA and the pass that wrote it.
pattern() { # <file> <pass>
    awk -v n=$BLOCKS -v seek=$SEEK -v pass="$2" 'BEGIN {
        pad = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        for (b = 0; b < n; b++) {
            s = sprintf("lba %08d pass %s ", b + seek, pass)
            while (length(s) < 4095) s = s pad
            print substr(s, 1, 4095)
        }
    }' >"$1"
    [ "$(wc -c <"$1")" = $((BLOCKS * 4096)) ] || fail "pattern $1 has the wrong size"
}
write_dev() { # <dev> <file>
    dd if="$2" of="$1" bs=4096 seek=$SEEK count=$BLOCKS oflag=direct conv=notrunc 2>"$work/dd.err" ||
        { cat "$work/dd.err"; return 1; }
}
check_dev() { # <dev> <file>
    rm -f "$work/back"
    dd if="$1" of="$work/back" bs=4096 skip=$SEEK count=$BLOCKS iflag=direct 2>"$work/dd.err" ||
        { cat "$work/dd.err"; return 1; }
    cmp "$2" "$work/back"
}
# ANA state of a group in a controller's ANA log page, from nvme-cli's JSON.
group_state() { # <nvmeX> <grpid>
    nvme ana-log "/dev/$1" -o json 2>/dev/null | tr -d ' \n' | tr '{' '\n' |
        sed -n "s/^\"grpid\":$2,.*\"state\":\"\([a-z-]*\)\".*/\1/p"
}
group_nsids() { # <nvmeX> <grpid>
    nvme ana-log "/dev/$1" -o json 2>/dev/null | tr -d ' \n' | tr '{' '\n' |
        sed -n "s/^\"grpid\":$2,\"nnsids\":\([0-9]*\),.*/\1/p"
}

# shellcheck disable=SC2034 # host_connect (guest_lib.sh) connects to $NQN
NQN=$OUR_NQN
step "connect $ADDR:4420, digests off"
c0=$(host_connect_tcp "$ADDR" 4420) || fail "nvme connect to $ADDR:4420"
[ "$(ctrl_state "$c0")" = live ] || fail "$c0 is $(ctrl_state "$c0"), not live"
step "connect $ADDR:4421 with --hdr-digest --data-digest"
c1=$(host_connect_tcp "$ADDR" 4421 --hdr-digest --data-digest) ||
    fail "nvme connect --hdr-digest --data-digest to $ADDR:4421"
[ "$(ctrl_state "$c1")" = live ] || fail "$c1 is $(ctrl_state "$c1"), not live"
for c in $c0 $c1; do
    [ "$(cat /sys/class/nvme/"$c"/subsysnqn)" = "$OUR_NQN" ] || fail "$c subsysnqn is not $OUR_NQN"
    [ "$(cat /sys/class/nvme/"$c"/transport)" = tcp ] || fail "$c transport is not tcp"
done
d0=/dev/${c0}n1 d1=/dev/${c1}n1
wait_path "$d0" 10 || fail "no $d0"
wait_path "$d1" 10 || fail "no $d1"
nvme list
size=$(cat "/sys/block/${c0}n1/size")
[ "$size" = $((64 * 2048)) ] || fail "${c0}n1 has $size sectors, wanted 64 MiB"
[ "$(cat "/sys/block/${c0}n1/queue/logical_block_size")" = 4096 ] || fail "${c0}n1 block size is not 4096"

step "verified write/read through $d0 (digests off), read through $d1 (digests on)"
pattern "$work/p1" 1
write_dev "$d0" "$work/p1" || fail "O_DIRECT write to $d0"
check_dev "$d0" "$work/p1" || fail "read back through $d0 differs from what was written"
check_dev "$d1" "$work/p1" || fail "read through $d1 (digests) differs from what $d0 wrote"

step "verified write/read through $d1 (digests on), read through $d0"
pattern "$work/p2" 2
write_dev "$d1" "$work/p2" || fail "O_DIRECT write to $d1"
check_dev "$d1" "$work/p2" || fail "read back through $d1 differs from what was written"
check_dev "$d0" "$work/p2" || fail "read through $d0 differs from what $d1 wrote"

step "ANA log"
nvme ana-log "/dev/$c0" || fail "nvme ana-log /dev/$c0"
s=$(group_state "$c0" 1)
[ "$s" = optimized ] || fail "$c0 (port 4420) reports group 1 '$s', wanted optimized"
s=$(group_state "$c0" 2)
[ "$s" = non-optimized ] || fail "$c0 (port 4420) reports group 2 '$s', wanted non-optimized"
[ "$(group_nsids "$c0" 1)" = 1 ] || fail "$c0: group 1 should hold nsid 1"
s=$(group_state "$c1" 2)
[ "$s" = non-optimized ] || fail "$c1 (port 4421) reports group 2 '$s', wanted non-optimized"
[ "$(group_nsids "$c1" 2)" = 1 ] || fail "$c1: group 2 should hold nsid 1"

step "disconnect"
nvme disconnect -d "$c0" >/dev/null || fail "nvme disconnect -d $c0"
wait_ctrl_state "$c0" gone 10 || fail "$c0 still there after disconnect"
[ "$(ctrl_state "$c1")" = live ] || fail "$c1 is $(ctrl_state "$c1") after $c0 went away"
check_dev "$d1" "$work/p2" || fail "read through $d1 after $c0 disconnected"
nvme disconnect -d "$c1" >/dev/null || fail "nvme disconnect -d $c1"
wait_ctrl_state "$c1" gone 10 || fail "$c1 still there after disconnect"
host_disconnect_all || fail "controllers left after disconnect-all"

kill "$tpid"
wait "$tpid"
rc=$?
tpid=
cat "$work/target.err"
[ $rc = 0 ] || fail "target exited $rc on SIGTERM"
grep -q 'errors' "$work/target.err" || fail "target printed no port statistics"
step "pass"
