#!/bin/sh
# Volumes of one subsystem share its controllers, against Linux nvmet: a subsystem of its own with
# four namespaces (tmpfs files, buffered_io) behind two TCP ports of its own, the four namespaces
# opened as volumes on one engine, controllers counted on nvmet's side, one port taken away under
# verified I/O; then, as the negative control, the four opened as four hosts, which nvmet counts
# as four controllers per port. nvmet_namespaces_test.cpp says what each case asserts.
# Run it with: tests/vm/vm_run.sh tests/vm/nvmet_namespaces_test.sh build-dir/tests/vm/nvmet_namespaces_test
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
bin=${1:?usage: nvmet_namespaces_test.sh <nvmet_namespaces_test binary>}

NS_NQN=nqn.2014-08.org.nvmexpress:nvmeof-testbed-namespaces
NS_COUNT=4
NS_PORT0=30 NS_PORT1=31
NS_ADDR0=127.0.0.1:4430 NS_ADDR1=127.0.0.2:4431
NS_FILE_PREFIX=/run/nvmet-multi-ns
export NS_NQN NS_COUNT NS_PORT0 NS_PORT1 NS_ADDR0 NS_ADDR1 NS_FILE_PREFIX

step() { echo "nvmet_namespaces_test: $*"; }
up() { cut -d' ' -f1 /proc/uptime; }

sub=$NVMET/subsystems/$NS_NQN
{ mkdir "$sub" && echo 1 >"$sub/attr_allow_any_host"; } || fail "nvmet subsystem $NS_NQN"
n=1
while [ $n -le $NS_COUNT ]; do
    # tmpfs has no O_DIRECT on 6.1, hence buffered_io.
    truncate -s 32M "$NS_FILE_PREFIX$n.img" &&
        mkdir "$sub/namespaces/$n" &&
        echo -n "$NS_FILE_PREFIX$n.img" >"$sub/namespaces/$n/device_path" &&
        echo 1 >"$sub/namespaces/$n/buffered_io" &&
        echo 1 >"$sub/namespaces/$n/enable" || fail "nvmet namespace $n"
    n=$((n + 1))
done
for i in 0 1; do
    eval _port=\$NS_PORT$i _addr=\$NS_ADDR$i
    p=$NVMET/ports/$_port
    { mkdir "$p" &&
        echo tcp >"$p/addr_trtype" &&
        echo ipv4 >"$p/addr_adrfam" &&
        echo "${_addr%:*}" >"$p/addr_traddr" &&
        echo "${_addr#*:}" >"$p/addr_trsvcid" &&
        ln -s "$sub" "$p/subsystems/$NS_NQN"; } || fail "nvmet port $_port at $_addr"
done
step "$NS_NQN: namespaces $(ls "$sub/namespaces" | tr '\n' ' ')on tcp $NS_ADDR0 (port $NS_PORT0) and tcp $NS_ADDR1 (port $NS_PORT1)"

t0=$(up)
"$bin" "[namespaces]" || fail "four namespaces over shared controllers, port $NS_PORT1 lost"
step "took $(awk -v a="$t0" -v b="$(up)" 'BEGIN { printf "%.1f", b - a }') s"
# nvmet's own log of the run: the controllers it made for the subsystem.
dmesg | grep "for subsystem $NS_NQN " | sed 's/^/nvmet_namespaces_test:   /'

step "negative control: the same four namespaces opened as four hosts"
# The test above gave port $NS_PORT1 back when it ended.
[ -L "$NVMET/ports/$NS_PORT1/subsystems/$NS_NQN" ] || fail "port $NS_PORT1 does not export $NS_NQN again"
"$bin" "[apart]" || fail "nvmet's count of controllers when nothing is shared"
step "pass"
