#!/bin/sh
# Access control of OUR target (tools/nvmeof-target) against Linux's own NVMe/TCP host, on the
# 6.12 guest kernel (the one with NVMe authentication built): the target runs with --allow-host,
# the allowed host NQN connects and reads back what it wrote, a host NQN not on the list is
# refused (nvme connect fails; the kernel and the target both say why), and `nvme discover` as
# the refused host lists no subsystem while the allowed host's lists ours.
# Then DH-HMAC-CHAP: the target holds the host's key and a controller key; Linux's host
# authenticates unidirectionally and bidirectionally (nvme connect --dhchap-secret
# --dhchap-ctrl-secret) and reads back what it wrote; a wrong key and no key are refused.
# Run it with: tests/vm/vm_run.sh --kernel 6.12 tests/vm/access_test.sh build-dir/tools/nvmeof-target
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
target=${1:?usage: access_test.sh <nvmeof-target binary>}
[ "$NVMEOF_MP" = N ] || skip "per-path devices need multipath=N"

ADDR=127.0.0.3
SVC=4420
OUR_NQN=nqn.2024-01.io.nvmeof:access
ALLOWED=nqn.2024-01.io.nvmeof.test:allowed-host
ALLOWED_ID=6e766d65-6f66-4000-8000-000000000a11
REFUSED=nqn.2024-01.io.nvmeof.test:refused-host
REFUSED_ID=6e766d65-6f66-4000-8000-000000000bad
BLOCKS=64    # 256 KiB in 4 KiB blocks
SEEK=32
work=/tmp/access
mkdir -p "$work"

step() { echo "access_test: $*"; }
tpid=
cleanup() {
    nvme disconnect -n "$OUR_NQN" >/dev/null 2>&1
    [ -n "$tpid" ] && kill "$tpid" 2>/dev/null
}
trap cleanup EXIT

# A stamped pattern: every 4 KiB block names its LBA and the host that wrote it.
pattern() { # <file> <tag>
    awk -v n=$BLOCKS -v seek=$SEEK -v tag="$2" 'BEGIN {
        pad = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        for (b = 0; b < n; b++) {
            s = sprintf("lba %08d by %s ", b + seek, tag)
            while (length(s) < 4095) s = s pad
            print substr(s, 1, 4095)
        }
    }' >"$1"
    [ "$(wc -c <"$1")" = $((BLOCKS * 4096)) ] || fail "pattern $1 has the wrong size"
}

# connect_as <hostnqn> <hostid> [nvme connect options]: nvme connect to our subsystem as that
# host; prints nvmeX.
connect_as() {
    # shellcheck disable=SC2034 # host_connect (guest_lib.sh) connects to $NQN
    NQN=$OUR_NQN
    _hn=$1 _hi=$2
    shift 2
    host_connect_tcp "$ADDR" "$SVC" --hostnqn="$_hn" --hostid="$_hi" "$@"
}

# Subsystem NQNs `nvme discover` as <hostnqn> lists, one a line.
discovered_as() { # <hostnqn> <hostid>
    nvme discover -t tcp -a "$ADDR" -s "$SVC" --hostnqn="$1" --hostid="$2" >"$work/discover.txt" 2>&1 || {
        cat "$work/discover.txt"
        fail "nvme discover as $1"
    }
    sed -n 's/^subnqn: *//p' "$work/discover.txt"
}

start_target() { # [target flags...]
    : >"$work/target.err"
    "$target" --listen "$ADDR:$SVC" --nqn "$OUR_NQN" --size 64M "$@" \
        >"$work/target.out" 2>"$work/target.err" &
    tpid=$!
    _w=100
    until grep -q 'may connect' "$work/target.out" 2>/dev/null; do
        kill -0 "$tpid" 2>/dev/null || { cat "$work/target.out" "$work/target.err"; fail "target exited at start"; }
        [ $_w -gt 0 ] || fail "target did not start within 10 s"
        sleep 0.1
        _w=$((_w - 1))
    done
    cat "$work/target.out"
}

stop_target() {
    kill "$tpid"
    wait "$tpid"
    _rc=$?
    tpid=
    [ $_rc = 0 ] || { cat "$work/target.err"; fail "target exited $_rc on SIGTERM"; }
}

case_allowed_host_moves_data() { # [nvme connect options, e.g. DH-HMAC-CHAP secrets]
    step "the allowed host connects and reads back what it wrote $*"
    c=$(connect_as "$ALLOWED" "$ALLOWED_ID" "$@") ||
        { dmesg | tail -n 8; cat "$work/target.err"; fail "nvme connect as $ALLOWED $*"; }
    [ "$(cat /sys/class/nvme/"$c"/subsysnqn)" = "$OUR_NQN" ] || fail "$c subsysnqn is not $OUR_NQN"
    [ "$(cat /sys/class/nvme/"$c"/hostnqn)" = "$ALLOWED" ] || fail "$c hostnqn is not $ALLOWED"
    dev=/dev/${c}n1
    wait_path "$dev" 10 || fail "no $dev"
    pattern "$work/p" allowed
    dd if="$work/p" of="$dev" bs=4096 seek=$SEEK count=$BLOCKS oflag=direct conv=notrunc 2>"$work/dd.err" ||
        { cat "$work/dd.err"; fail "O_DIRECT write to $dev"; }
    rm -f "$work/back"
    dd if="$dev" of="$work/back" bs=4096 skip=$SEEK count=$BLOCKS iflag=direct 2>"$work/dd.err" ||
        { cat "$work/dd.err"; fail "O_DIRECT read from $dev"; }
    cmp "$work/p" "$work/back" || fail "what $dev read back differs from what it wrote"
    nvme disconnect -d "$c" >/dev/null || fail "nvme disconnect -d $c"
    wait_ctrl_state "$c" gone 10 || fail "$c still there after disconnect"
}

case_refused_host() {
    step "a host not on the allow list is refused"
    dmesg -c >/dev/null
    if connect_as "$REFUSED" "$REFUSED_ID" >"$work/refused.out" 2>&1; then
        cat "$work/refused.out"
        fail "nvme connect as $REFUSED succeeded; the target allows only $ALLOWED"
    fi
    cat "$work/refused.out"
    [ -z "$(ls /sys/class/nvme 2>/dev/null)" ] || fail "a controller is left after the refused connect"
    dmesg >"$work/dmesg.txt"
    cat "$work/dmesg.txt"
    # Linux names the Connect status it got: "Connect for subsystem ... is not allowed, hostnqn: ..."
    grep -q "is not allowed, hostnqn: $REFUSED" "$work/dmesg.txt" ||
        fail "the kernel did not report Connect Invalid Host for $REFUSED"
    grep -q "connect refused: host $REFUSED is not allowed to use $OUR_NQN" "$work/target.err" ||
        { cat "$work/target.err"; fail "the target did not log the refused host"; }
    n=$(grep -c "connect refused: host $REFUSED" "$work/target.err")
    [ "$n" = 1 ] || fail "the target logged the refusal $n times, wanted once"
}

case_discovery_per_host() {
    step "discovery as the refused host lists nothing, as the allowed host lists $OUR_NQN"
    seen=$(discovered_as "$REFUSED" "$REFUSED_ID")
    cat "$work/discover.txt"
    [ -z "$seen" ] || fail "discovery as $REFUSED lists: $seen"
    seen=$(discovered_as "$ALLOWED" "$ALLOWED_ID")
    [ "$seen" = "$OUR_NQN" ] || { cat "$work/discover.txt"; fail "discovery as $ALLOWED lists '$seen', wanted $OUR_NQN"; }
}

$IP addr add "$ADDR/8" dev lo 2>/dev/null
$IP -4 addr show dev lo | grep -q "inet $ADDR/" || fail "cannot add $ADDR to lo"

start_target --allow-host "$ALLOWED"
grep -q "only this host may connect: $ALLOWED" "$work/target.out" || fail "the target does not say who may connect"
for c in case_allowed_host_moves_data case_refused_host case_discovery_per_host; do
    $c
done
host_disconnect_all || fail "controllers left at the end"
stop_target

# DH-HMAC-CHAP: Linux's host authenticates to our target with the keys nvme-cli makes.
case_dhchap_wrong_key() {
    step "DH-HMAC-CHAP: a wrong key is refused"
    wrong=$(nvme gen-dhchap-key --nqn="$ALLOWED" --hmac=1 --key-length=32) || fail "nvme gen-dhchap-key"
    dmesg -c >/dev/null
    if connect_as "$ALLOWED" "$ALLOWED_ID" --dhchap-secret="$wrong" >"$work/wrong.out" 2>&1; then
        cat "$work/wrong.out"
        fail "nvme connect with a wrong DH-HMAC-CHAP key succeeded"
    fi
    cat "$work/wrong.out"
    dmesg | tail -n 5
    [ -z "$(ls /sys/class/nvme 2>/dev/null)" ] || fail "a controller is left after the refused key"
    grep -qi "authentication failed\|DH-HMAC-CHAP" "$work/target.err" ||
        { cat "$work/target.err"; fail "the target did not log the failed authentication"; }
}
hkey=$(nvme gen-dhchap-key --nqn="$ALLOWED" --hmac=1 --key-length=32) || fail "nvme gen-dhchap-key"
ckey=$(nvme gen-dhchap-key --nqn="$OUR_NQN" --hmac=3 --key-length=64) || fail "nvme gen-dhchap-key"
start_target --host-key "$ALLOWED=$hkey" --host-ctrl-key "$ALLOWED=$ckey"
case_allowed_host_moves_data --dhchap-secret="$hkey"
case_allowed_host_moves_data --dhchap-secret="$hkey" --dhchap-ctrl-secret="$ckey"
case_dhchap_wrong_key
step "DH-HMAC-CHAP: a host without a key is refused by a target that asks for one"
if connect_as "$ALLOWED" "$ALLOWED_ID" >"$work/nokey.out" 2>&1; then
    cat "$work/nokey.out"
    fail "nvme connect without a key succeeded against a target requiring DH-HMAC-CHAP"
fi
host_disconnect_all || fail "controllers left at the end"
stop_target
step "pass"
