#!/bin/bash
# Runs a script or a host-built binary inside the QEMU testbed guest (Linux
# nvmet + the Linux NVMe-oF host, see README.md) and exits with its exit code.
#
# usage: vm_run.sh [--kernel 6.1|6.12] [--numa] [--mp Y|N] [--timeout S] <script-or-binary> [args...]
#   --kernel V   guest kernel: 6.1 (default, Debian 12's) or 6.12 (bookworm-backports:
#                NVMe host/target authentication and NVMe/TCP TLS built)
#   --numa       two NUMA nodes, one CPU each, a second NIC on node 1
#   --mp Y|N     nvme-core native multipath (default N)
#   --timeout S  hard limit for the whole run (default $NVMEOF_VM_TIMEOUT or 300)
# environment:
#   NVMEOF_VM_DIR     guest cache (default <project>/build/vm)
#   NVMEOF_VM_SHARES  more host directories, ':'-separated, to mount in the guest
#   NVMEOF_*          other than NVMEOF_VM_*, passed on to the payload
#
# The project root is mounted in the guest at /mnt/host and at its own host
# path, so a binary in build/ finds what it finds on the host. The payload
# runs in the current directory when that is shared.
# Exit: the payload's code; 77 when QEMU or the guest kernel is unavailable;
# 1 when the guest produced no exit code.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
say() { echo "vm_run: $*" >&2; }
usage() {
    sed -n '5,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

numa=0
mp=N
kernel=6.1
limit=${NVMEOF_VM_TIMEOUT:-300}
while (($#)); do
    case $1 in
        --numa) numa=1; shift ;;
        --kernel) kernel=${2:?}; shift 2 ;;
        --kernel=*) kernel=${1#*=}; shift ;;
        --mp) mp=${2:?}; shift 2 ;;
        --mp=*) mp=${1#*=}; shift ;;
        --timeout) limit=${2:?}; shift 2 ;;
        --timeout=*) limit=${1#*=}; shift ;;
        --) shift; break ;;
        -*) usage ;;
        *) break ;;
    esac
done
(($#)) || usage
[[ $mp == [YN] ]] || usage
[[ $kernel == 6.1 || $kernel == 6.12 ]] || usage
payload=$(realpath -e -- "$1" 2>/dev/null) || { say "no such payload: $1"; exit 1; }
shift

dir=${NVMEOF_VM_DIR:-$root/build/vm}
rc=0
"$here/build_guest.sh" --kernel "$kernel" "$dir" || rc=$?
((rc == 0)) || exit $rc
dir=$(cd "$dir" && pwd)
if [ "$kernel" = 6.1 ]; then
    vmlinuz=$dir/vmlinuz initrd=$dir/initrd.img
else
    vmlinuz=$dir/vmlinuz-$kernel initrd=$dir/initrd-$kernel.img
fi

run=$(mktemp -d "$dir/run.XXXXXX")
ctl=$run/ctl
mkdir "$ctl"
trap 'mv -f "$run/console.log" "$dir/last-console.log" 2>/dev/null; rm -rf "$run"' EXIT

is_under() { [[ $1/ == "$2"/* ]]; }
shares=("$root")
shared() {
    local d
    for d in "${shares[@]}"; do is_under "$1" "$d" && return 0; done
    return 1
}
IFS=: read -ra extra <<<"${NVMEOF_VM_SHARES:-}"
for d in "${extra[@]}"; do
    [ -d "$d" ] || continue
    d=$(realpath "$d")
    shared "$d" || shares+=("$d")
done
shared "$payload" || shares+=("$(dirname "$payload")")
cwd=$(pwd -P)
shared "$cwd" || cwd=$(dirname "$payload")

fsdevs=()
: >"$ctl/mounts"
for i in "${!shares[@]}"; do
    tag=host$i
    # QEMU options escape a comma by doubling it.
    fsdevs+=(-fsdev "local,id=fs$i,path=${shares[$i]//,/,,},security_model=none"
             -device "virtio-9p-pci,fsdev=fs$i,mount_tag=$tag,bus=pcie.0")
    echo "$tag ${shares[$i]}" >>"$ctl/mounts"
done

quote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
if [ -x "$payload" ]; then prog=("$payload"); else prog=(sh "$payload"); fi
{
    for name in $(compgen -e NVMEOF_); do
        [[ $name == NVMEOF_VM_* ]] || echo "export $name=$(quote "${!name}")"
    done
    echo "cd $(quote "$cwd") || exit 1"
    printf exec
    for a in "${prog[@]}" "$@"; do printf ' %s' "$(quote "$a")"; done
    echo
} >"$ctl/cmd"

# The guest stops its payload first so that it can still report.
guest_limit=$((limit > 60 ? limit - 25 : limit * 2 / 3))
qemu=(qemu-system-x86_64 -machine q35 -accel tcg -cpu max -m 2G -smp 2
      -nographic -no-reboot
      -kernel "$vmlinuz" -initrd "$initrd"
      -append "console=ttyS0 panic=1 quiet nvmeof.mp=$mp nvmeof.timeout=$guest_limit"
      -netdev user,id=n0
      -fsdev "local,id=fsctl,path=$ctl,security_model=none"
      -device virtio-9p-pci,fsdev=fsctl,mount_tag=ctl,bus=pcie.0
      "${fsdevs[@]}")
if ((numa)); then
    # Devices given after the pxb without bus= land on it and fail: these
    # come last. Each NIC sits behind a pxb of its own node (eth0 on node 0,
    # eth1 on node 1); a NIC on pcie.0 would report no node (-1). The guest
    # names the NICs in the reverse order of their pxbs here, hence node 1
    # first.
    qemu+=(-object memory-backend-ram,id=m0,size=1G
           -object memory-backend-ram,id=m1,size=1G
           -numa node,nodeid=0,cpus=0,memdev=m0
           -numa node,nodeid=1,cpus=1,memdev=m1
           -device pxb-pcie,id=pxb1,bus_nr=64,numa_node=1,bus=pcie.0
           -device pcie-root-port,id=rp1,bus=pxb1,chassis=1
           -netdev user,id=n1 -device virtio-net-pci,netdev=n1,bus=rp1,romfile=
           -device pxb-pcie,id=pxb0,bus_nr=128,numa_node=0,bus=pcie.0
           -device pcie-root-port,id=rp0,bus=pxb0,chassis=2
           -device virtio-net-pci,netdev=n0,bus=rp0,romfile=)
else
    qemu+=(-device virtio-net-pci,netdev=n0,bus=pcie.0,romfile=)
fi

say "booting: $(basename "$payload") $*; kernel $kernel, multipath=$mp$( ((numa)) && echo ", two NUMA nodes"); limit ${limit}s"
boot() {
    start=$(date +%s.%N)
    set +e
    # The filter drops the firmware's banner and terminal resets.
    timeout -k 5 "$limit" "${qemu[@]}" </dev/null 2>&1 |
        sed -u -e 's/\r$//; s/\x1b\[[0-9;?]*[a-zA-Z]//g; s/\x1bc//g' \
            -e '/^SeaBIOS (version/d; /^Booting from ROM/d' |
        tee "$run/console.log"
    qemu_rc=${PIPESTATUS[0]}
    set -e
    took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}
boot
# Under TCG on a loaded host the guest kernel now and then oopses while it boots (in its timer
# or idle code), before anything of ours ran. Only then it boots once more: a payload that
# started is never run twice, so no result of ours is hidden by the retry.
if [ ! -s "$ctl/rc" ] && ! grep -q '\] payload start$' "$run/console.log" &&
   grep -q 'Kernel panic' "$run/console.log"; then
    say "the guest kernel panicked before the payload started (${took}s); booting once more"
    cp "$run/console.log" "$run/console.first.log"
    boot
fi

rc=$(cat "$ctl/rc" 2>/dev/null || true)
if [ -z "$rc" ]; then
    # The console is the second channel when the control share failed.
    rc=$(sed -n 's/^\[vm [0-9.]*\] payload exit code \([0-9]\{1,3\}\)$/\1/p' \
         "$run/console.log" 2>/dev/null | tail -n 1)
    [ -z "$rc" ] || say "no exit code in the control share; using the console's"
fi
if [ -n "$rc" ]; then
    say "payload exit code $rc after ${took}s"
    exit "$rc"
fi
if ((qemu_rc == 124)); then
    say "the guest did not finish within ${limit}s"
else
    say "the guest produced no exit code (qemu exit status $qemu_rc, ${took}s)"
fi
exit 1
