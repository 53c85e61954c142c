#!/bin/sh
# nvmeof-paths against the kernel host: after connecting to both TCP ports and the RDMA port, its
# JSON lists one subsystem with three controllers (tcp, tcp, rdma) at the right addresses, and
# each path's ANA state as nvmet was told (port 2 inaccessible).
# Run it with: tests/vm/vm_run.sh tests/vm/paths_test.sh build-dir/tools/nvmeof-paths
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
tool=${1:?usage: paths_test.sh <nvmeof-paths binary>}
[ "$NVMEOF_MP" = N ] || skip "per-path devices need multipath=N"

c0=$(host_connect_tcp 127.0.0.1 4420) || fail "tcp connect to $TCP1"
c1=$(host_connect_tcp 127.0.0.2 4421) || fail "tcp connect to $TCP2"
c2=$(host_connect_rdma) || fail "rdma connect to $RDMA_ADDR"
for c in $c0 $c1 $c2; do
    wait_path "/dev/ng${c#nvme}n1" || fail "no /dev/ng${c#nvme}n1"
done
nvmet_ana_state 2 inaccessible

"$tool" --help >/dev/null || fail "--help"
"$tool" || fail "nvmeof-paths (text) failed"
"$tool" --json >/tmp/paths.json || fail "nvmeof-paths --json failed"
cat /tmp/paths.json

# dump(2) puts one "key": value per line; the keys of a path open with "controller".
n=$(grep -c '"nqn":' /tmp/paths.json)
[ "$n" = 1 ] || fail "$n subsystems, wanted 1"
grep -q "\"nqn\": \"$NQN\"" /tmp/paths.json || fail "subsystem NQN is not $NQN"
transports=$(sed -n 's/.*"transport": "\([a-z]*\)".*/\1/p' /tmp/paths.json | sort | tr '\n' ' ')
[ "$transports" = "rdma tcp tcp " ] || fail "controller transports are '$transports'"

# name traddr trsvcid per controller
ctrls=$(awk -F'"' '/"name": "nvme[0-9]/ {n=$4} /"traddr":/ {a=$4} /"trsvcid":/ {print n, a, $4}' \
    /tmp/paths.json)
echo "controllers: $ctrls"
echo "$ctrls" | grep -qx "$c0 127.0.0.1 4420" || fail "$c0 is not at $TCP1"
echo "$ctrls" | grep -qx "$c1 127.0.0.2 4421" || fail "$c1 is not at $TCP2"
echo "$ctrls" | grep -qx "$c2 10.10.10.1 4420" || fail "$c2 is not at $RDMA_ADDR"

# controller generic_device ana_state per path
paths=$(awk -F'"' '/"controller":/ {c=$4} /"generic_device":/ {g=$4} /"ana_state":/ {print c, g, $4}' \
    /tmp/paths.json)
echo "paths: $paths"
[ "$(echo "$paths" | wc -l)" = 3 ] || fail "not three paths"
echo "$paths" | grep -qx "$c0 /dev/ng${c0#nvme}n1 optimized" || fail "$c0 path is not optimized"
echo "$paths" | grep -qx "$c1 /dev/ng${c1#nvme}n1 inaccessible" || fail "$c1 path is not inaccessible"
echo "$paths" | grep -qx "$c2 /dev/ng${c2#nvme}n1 optimized" || fail "$c2 path is not optimized"

nvmet_ana_state 2 optimized
host_disconnect_all || fail "controllers left after disconnect-all"
echo "paths_test: pass"
