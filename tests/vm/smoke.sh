#!/bin/sh
# Checks the testbed the other guest tests stand on: nvmet ports, discovery,
# three paths (tcp, tcp, rdma), ANA changes seen through the admin queue,
# a removed port seen by the host, data crossing from one path to another.
# Run it with: tests/vm/vm_run.sh tests/vm/smoke.sh
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"

step() { echo "smoke: $*"; }

step "nvmet ports"
for p in 1 2 3; do
    [ -L "$NVMET/ports/$p/subsystems/$NQN" ] || fail "nvmet port $p does not export $NQN"
done

step "discovery on $TCP1"
disc=$(nvme discover -t tcp -a 127.0.0.1 -s 4420) || fail "nvme discover failed"
echo "$disc" | grep -q "subnqn: *$NQN\$" || { echo "$disc"; fail "discovery does not list $NQN"; }

step "connect over tcp $TCP1, tcp $TCP2, rdma $RDMA_ADDR"
c0=$(host_connect_tcp 127.0.0.1 4420) || fail "tcp connect to $TCP1"
c1=$(host_connect_tcp 127.0.0.2 4421) || fail "tcp connect to $TCP2"
c2=$(host_connect_rdma) || fail "rdma connect to $RDMA_ADDR"
[ "$c0 $c1 $c2" = "nvme0 nvme1 nvme2" ] || fail "controllers are '$c0 $c1 $c2'"
[ "$(cat /sys/class/nvme/nvme2/transport)" = rdma ] || fail "nvme2 is not rdma"
if [ "$NVMEOF_MP" = N ]; then
    # One block and one generic device per path.
    for c in 0 1 2; do
        wait_path /dev/ng${c}n1 && wait_path /dev/nvme${c}n1 || fail "no namespace on nvme$c"
    done
    dev0=/dev/nvme0n1 dev1=/dev/nvme1n1
else
    wait_path /dev/ng0n1 || fail "no multipath head"
    for c in 0 1 2; do
        wait_path /sys/block/nvme0c${c}n1/ana_state || fail "no path nvme0c${c}n1"
    done
    dev0=/dev/nvme0n1 dev1=/dev/nvme0n1
fi

step "ANA state through the ANA log page"
nvmet_ana_state 1 optimized
[ "$(ana_state nvme0)" = optimized ] || fail "nvme0 ANA is '$(ana_state nvme0)', wanted optimized"
nvmet_ana_state 1 inaccessible
[ "$(ana_state nvme0)" = inaccessible ] || fail "nvme0 ANA is '$(ana_state nvme0)', wanted inaccessible"
[ "$(ana_state nvme1)" = optimized ] || fail "nvme1 ANA is '$(ana_state nvme1)', wanted optimized"
nvmet_ana_state 1 optimized

step "data written through $dev0, read back through $dev1"
stamp="nvmeof-smoke $(date +%s) $$"
i=0
while [ $i -lt 256 ]; do
    printf '%-4095s\n' "$stamp block $i"
    i=$((i + 1))
done >/tmp/pattern
dd if=/tmp/pattern of=$dev0 bs=64k oflag=direct 2>/dev/null || fail "write to $dev0"
dd if=$dev1 of=/tmp/back bs=64k count=16 iflag=direct 2>/dev/null || fail "read from $dev1"
cmp /tmp/pattern /tmp/back || fail "data read through $dev1 differs"

step "port 1 removed: the host loses nvme0"
nvmet_port_remove 1
wait_ctrl_state nvme0 '!live' 5 || fail "nvme0 stayed live after its port went away"
echo "nvme0 is $(ctrl_state nvme0)"
nvmet_port_add 1
wait_ctrl_state nvme0 live 10 || fail "nvme0 did not come back"

if [ "$NVMEOF_MP" = N ]; then
    step "data read back over rdma"
    dd if=/dev/nvme2n1 of=/tmp/back bs=64k count=16 iflag=direct 2>/dev/null || fail "read from nvme2n1"
    cmp /tmp/pattern /tmp/back || fail "data read through nvme2n1 differs"
fi

host_disconnect_all || fail "controllers left after disconnect-all"
step "all checks passed"
