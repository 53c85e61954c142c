#!/bin/sh
# A fabric that changes under running volumes, against Linux nvmet: persistent discovery of three
# ports, a port linked to the subsystem mid-run and one unlinked, a namespace grown and one
# disabled. nvmet_fabric_test.cpp says what each phase asserts.
#
# nvmet sends a Discovery Log Page Change event only to the discovery controllers connected
# through the port that changed, and each port's discovery log lists that port's subsystems. So
# every port here also exports a small second subsystem (keeping it listening whatever ours
# does), and the host watches the discovery controller of each port.
# Run it with: tests/vm/vm_run.sh tests/vm/nvmet_fabric_test.sh build-dir/tests/vm/nvmet_fabric_test
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
bin=${1:?usage: nvmet_fabric_test.sh <nvmet_fabric_test binary>}

FAB_NQN=nqn.2014-08.org.nvmexpress:nvmeof-testbed-fabric
FAB_OTHER_NQN=nqn.2014-08.org.nvmexpress:nvmeof-testbed-fabric-other
FAB_PORTS="40 41 42"
FAB_ADDR40=127.0.0.1:4440 FAB_ADDR41=127.0.0.2:4441 FAB_ADDR42=127.0.0.3:4442
FAB_FILE_PREFIX=/run/nvmet-fabric-ns
export FAB_NQN FAB_ADDR40 FAB_ADDR41 FAB_ADDR42 FAB_FILE_PREFIX

step() { echo "nvmet_fabric_test: $*"; }

make_ns() {  # make_ns <subsystem dir> <nsid> <file> <size>
    truncate -s "$4" "$3" &&
        mkdir "$1/namespaces/$2" &&
        echo -n "$3" >"$1/namespaces/$2/device_path" &&
        echo 1 >"$1/namespaces/$2/buffered_io" &&
        echo 1 >"$1/namespaces/$2/enable"
}

sub=$NVMET/subsystems/$FAB_NQN
other=$NVMET/subsystems/$FAB_OTHER_NQN
{ mkdir "$sub" && echo 1 >"$sub/attr_allow_any_host"; } || fail "nvmet subsystem $FAB_NQN"
{ mkdir "$other" && echo 1 >"$other/attr_allow_any_host"; } || fail "nvmet subsystem $FAB_OTHER_NQN"
make_ns "$sub" 1 "${FAB_FILE_PREFIX}1.img" 32M || fail "namespace 1"
make_ns "$sub" 2 "${FAB_FILE_PREFIX}2.img" 32M || fail "namespace 2"
make_ns "$other" 1 "${FAB_FILE_PREFIX}-other.img" 8M || fail "the other subsystem's namespace"
for p in $FAB_PORTS; do
    eval _addr=\$FAB_ADDR$p
    d=$NVMET/ports/$p
    { mkdir "$d" &&
        echo tcp >"$d/addr_trtype" &&
        echo ipv4 >"$d/addr_adrfam" &&
        echo "${_addr%:*}" >"$d/addr_traddr" &&
        echo "${_addr#*:}" >"$d/addr_trsvcid" &&
        ln -s "$other" "$d/subsystems/$FAB_OTHER_NQN"; } || fail "nvmet port $p at $_addr"
done
# Ours on ports 40 and 41; port 42 gets it mid-run.
ln -s "$sub" "$NVMET/ports/40/subsystems/$FAB_NQN" || fail "link port 40"
ln -s "$sub" "$NVMET/ports/41/subsystems/$FAB_NQN" || fail "link port 41"
step "$FAB_NQN on $FAB_ADDR40 and $FAB_ADDR41; $FAB_ADDR42 exports only $FAB_OTHER_NQN"

"$bin" "[fabric]" || fail "the fabric changing under running volumes"
step "pass"
