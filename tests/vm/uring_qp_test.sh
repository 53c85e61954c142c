#!/bin/sh
# The io_uring passthrough queue pair on the kernel host's three paths (tcp, tcp, rdma): data
# written through one path and verified through the others, the ANA log read through admin
# passthrough against what nvmet was set to, and a path whose port goes away failing its
# commands instead of hanging.
# Run it with: tests/vm/vm_run.sh tests/vm/uring_qp_test.sh build-dir/tests/vm/uring_qp_test
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
bin=${1:?usage: uring_qp_test.sh <uring_qp_test binary>}
[ "$NVMEOF_MP" = N ] || skip "per-path devices need multipath=N"

c0=$(host_connect_tcp 127.0.0.1 4420) || fail "tcp connect to $TCP1"
c1=$(host_connect_tcp 127.0.0.2 4421) || fail "tcp connect to $TCP2"
c2=$(host_connect_rdma) || fail "rdma connect to $RDMA_ADDR"
for c in $c0 $c1 $c2; do
    wait_path "/dev/ng${c#nvme}n1" || fail "no /dev/ng${c#nvme}n1"
done
ng0=/dev/ng${c0#nvme}n1 ng1=/dev/ng${c1#nvme}n1 ng2=/dev/ng${c2#nvme}n1

echo "uring_qp_test: data"
"$bin" data "$ng0" "$ng1" "$ng2" >/tmp/data.txt || { cat /tmp/data.txt; fail "data through the passthrough queue pairs"; }
cat /tmp/data.txt
# Registered buffers work over nvme-tcp (the kernel refuses them over nvme-rdma, and the pair
# falls back to ordinary commands there).
grep -q "path $ng1: .* still using them 1" /tmp/data.txt || fail "registered buffers not used on $ng1"
# Passthrough polling (IOPOLL) stays off: it crashes this kernel (see QpConfig::iopoll).
grep -q "path $ng1: .* polled 0 " /tmp/data.txt || fail "the pair on $ng1 polls"

echo "uring_qp_test: ANA"
nvmet_ana_state 2 non-optimized
nvmet_ana_state 3 inaccessible
"$bin" ana "/dev/$c0" optimized || fail "ANA of $c0"
"$bin" ana "/dev/$c1" non-optimized || fail "ANA of $c1"
"$bin" ana "/dev/$c2" inaccessible || fail "ANA of $c2"
nvmet_ana_state 2 optimized
nvmet_ana_state 3 optimized
"$bin" ana "/dev/$c1" optimized || fail "ANA of $c1 after the change back"

echo "uring_qp_test: port 2 removed under load"
"$bin" loss "$ng1" 15 &
pid=$!
sleep 2
nvmet_port_remove 2
wait $pid
rc=$?
nvmet_port_add 2
[ $rc = 0 ] || fail "path loss (exit $rc)"
wait_ctrl_state "$c1" live 10 || fail "$c1 did not come back"
host_disconnect_all || fail "controllers left after disconnect-all"
echo "uring_qp_test: pass"
