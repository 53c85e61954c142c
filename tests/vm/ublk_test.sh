#!/bin/sh
# nvmeof-ublk in the 6.12 guest: a volume over two paths to nvmet (both through veth pairs from
# the network namespace $NETNS) served as /dev/ublkbN.
#   [limits]    the device's size and logical block size are the namespace's
#   [discard]   a discarded megabyte reads back as zeros (Dataset Management, deallocate)
#   [fio]       fio --verify=crc32c writes (then reads back and checks) across a reset of path 0
#               (its nvmet port unlinked and linked again) and a partition of path 1 (its veth
#               end down): 0 errors, the verification passes
#   [ext4]      mkfs.ext4, files written while path 0's cable is pulled, unmount, a clean stop
#               (STOP_DEV, DEL_DEV: the device is gone), the volume served again: fsck clean and
#               every file's checksum matches
#   [dies]      the tool killed (SIGKILL) under reads: the driver fails the queued I/O (the
#               reader gets an error, not a hang), the block device goes, --delete removes the
#               dead device
#   [recovery]  --recovery reissue, killed under writes: the writer waits, a new tool takes the
#               device over (--recover), the writer finishes and the data reads back
# On a kernel without the ublk driver (6.1) it checks the tool's refusal and skips.
# Run it with: tests/vm/vm_run.sh --kernel 6.12 tests/vm/ublk_test.sh build/tools/nvmeof-ublk
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
tool=${1:?usage: ublk_test.sh <nvmeof-ublk binary>}

step() { echo "ublk_test: $*"; }

if [ ! -e /dev/ublk-control ]; then
    out=$("$tool" --path "$TCP1" --nqn "$NQN" 2>&1) && fail "nvmeof-ublk ran without a ublk driver"
    echo "$out" | grep -q "the kernel has no ublk driver" || fail "nvmeof-ublk's refusal did not say why: $out"
    skip "kernel $(uname -r) has no ublk driver (refused clearly: $out)"
fi
command -v mkfs.ext4 >/dev/null && command -v e2fsck >/dev/null || fail "the guest has no e2fsprogs"

netns_setup || fail "netns_setup: veth pairs, routes and nvmet ports $NETNS_PORT0 and $NETNS_PORT1"

tool_pid=
dev=
# serve [options]: starts the tool in $NETNS over both paths and waits for its device.
serve() {
    start_ublk nvmeof-ublk $IP netns exec "$NETNS" "$tool" --path "$NETNS_ADDR0" --path "$NETNS_ADDR1" \
        --nqn "$NQN" --queues 2 --depth 64 "$@"
    dev=$(head -n 1 /tmp/ublk.out)
    wait_path "/sys/block/${dev#/dev/}" 10 || fail "$dev not in sysfs"
    wait_path "$dev" 10 || fail "no $dev"
    step "serving $dev (pid $tool_pid)"
}
# stop_tool: SIGTERM, the clean stop: the tool exits 0 and the device is deleted.
stop_tool() {
    kill -TERM "$tool_pid"
    wait "$tool_pid" || { cat /tmp/ublk.err >&2; fail "nvmeof-ublk did not stop cleanly"; }
    [ ! -e "/sys/block/${dev#/dev/}" ] || fail "$dev still there after the stop"
    [ ! -e "/sys/class/ublk-char/ublkc${dev#/dev/ublkb}" ] || fail "ublkc${dev#/dev/ublkb} not deleted"
    # STOP_DEV gave every fetch back, so DEL_DEV waited for the device to be freed.
    ! grep -q "kept commands after STOP_DEV" /tmp/ublk.err || fail "the driver kept the queues' commands"
    tail -n 1 /tmp/ublk.err | sed 's/^/ublk_test:   /'
    : >/tmp/ublk.err
}
writes() { awk '{ print $5 }' "/sys/block/${dev#/dev/}/stat"; }
# wait_writes N PID: until the device has completed N writes, while PID runs.
wait_writes() {
    while [ "$(writes)" -lt "$1" ]; do
        kill -0 "$2" 2>/dev/null || fail "the writer ended before $1 writes (at $(writes))"
        sleep 0.1
    done
}

step "[limits]"
serve
nsbytes=$(stat -c %s "$NS1_FILE")
devbytes=$(($(cat "/sys/block/${dev#/dev/}/size") * 512))
lbs=$(cat "/sys/block/${dev#/dev/}/queue/logical_block_size")
step "  $dev: $devbytes bytes, logical block $lbs, max_sectors_kb $(cat "/sys/block/${dev#/dev/}/queue/max_sectors_kb")"
[ "$devbytes" = "$nsbytes" ] || fail "$dev has $devbytes bytes, the namespace $nsbytes"
# The namespace's own block size, as the kernel's NVMe host reads it from the same nvmet port.
c0=$(host_connect_tcp) || fail "kernel host connect to $TCP1"
wait_path "/sys/block/${c0}n1/queue/logical_block_size" || fail "no ${c0}n1"
nslbs=$(cat "/sys/block/${c0}n1/queue/logical_block_size")
host_disconnect_all
[ "$lbs" = "$nslbs" ] || fail "$dev has logical block size $lbs, the namespace $nslbs"

step "[discard] 1 MiB written, then discarded: it reads back as zeros, on the device and in nvmet's file"
[ "$(cat "/sys/block/${dev#/dev/}/queue/discard_max_bytes")" -gt 0 ] || fail "$dev takes no discard"
dd if=/dev/urandom of=/tmp/rand bs=1M count=1 2>/dev/null
dd if=/dev/zero of=/tmp/zero bs=1M count=1 2>/dev/null
dd if=/tmp/rand of="$dev" bs=1M seek=8 count=1 oflag=direct 2>/dev/null || fail "write $dev"
dd if="$dev" of=/tmp/back bs=1M skip=8 count=1 iflag=direct 2>/dev/null || fail "read $dev"
cmp -s /tmp/rand /tmp/back || fail "the megabyte written does not read back"
blkdiscard -o $((8 << 20)) -l $((1 << 20)) "$dev" || fail "blkdiscard $dev"
dd if="$dev" of=/tmp/back bs=1M skip=8 count=1 iflag=direct 2>/dev/null || fail "read $dev"
cmp -s /tmp/zero /tmp/back || fail "the discarded megabyte does not read back as zeros"
dd if="$NS1_FILE" of=/tmp/back bs=1M skip=8 count=1 2>/dev/null || fail "read $NS1_FILE"
cmp -s /tmp/zero /tmp/back || fail "nvmet's file still holds the discarded megabyte"

step "[fio] verified random writes across a reset of path 0 and a partition of path 1"
fio --name=verify --filename="$dev" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k \
    --iodepth=32 --size=48M --verify=crc32c --verify_fatal=1 --do_verify=1 --rate_iops=800 --eta=never \
    --output=/tmp/fio-verify.txt &
fio_pid=$!
w=$(writes)
wait_writes $((w + 1500)) $fio_pid
step "  path 0 reset (nvmet port $NETNS_PORT0 unlinked) at $(writes) writes"
nvmet_port_remove "$NETNS_PORT0" || fail "unlink port $NETNS_PORT0"
wait_writes $((w + 2500)) $fio_pid
nvmet_port_add "$NETNS_PORT0" || fail "link port $NETNS_PORT0"
step "  path 0 back at $(writes) writes"
wait_writes $((w + 4000)) $fio_pid
step "  path 1 partitioned ($NETNS_IF1 down) at $(writes) writes"
netns_link 1 down || fail "link 1 down"
wait_writes $((w + 5500)) $fio_pid
netns_link 1 up || fail "link 1 up"
step "  path 1 healed at $(writes) writes"
wait $fio_pid
fio_rc=$?
grep -E "err=|WRITE:|READ:|verify" /tmp/fio-verify.txt | sed 's/^/ublk_test:   /'
[ $fio_rc = 0 ] || fail "fio exited $fio_rc"
grep -q "err= 0" /tmp/fio-verify.txt || fail "fio reported errors"
grep -q "READ: bw=" /tmp/fio-verify.txt || fail "fio did not read back to verify"

step "[ext4] mkfs, files written with path 0's cable pulled, unmount, stop, serve again, fsck"
dmesg -c >/dev/null
mkfs.ext4 -F -q "$dev" || fail "mkfs.ext4 $dev"
# nvmet cannot zero a range of a tmpfs file: its Write Zeroes fails for good, which the device
# reports as not supported, never as an I/O error (the kernel then writes the zeroes itself).
if dmesg | grep -q "I/O error, dev ${dev#/dev/}"; then
    dmesg | grep "I/O error, dev ${dev#/dev/}" | head -n 3
    fail "mkfs.ext4 met I/O errors"
fi
mkdir -p /mnt/ublk /tmp/src
mount -t ext4 "$dev" /mnt/ublk || fail "mount $dev"
nfiles=24
i=1
while [ $i -le $nfiles ]; do
    dd if=/dev/urandom of=/tmp/src/f$i bs=64k count=16 2>/dev/null || fail "make /tmp/src/f$i"
    i=$((i + 1))
done
(cd /tmp/src && sha256sum f*) >/tmp/src.sha256
(
    i=1
    while [ $i -le $nfiles ]; do
        cp /tmp/src/f$i /mnt/ublk/f$i && sync || exit 1
        i=$((i + 1))
    done
) &
cp_pid=$!
while [ ! -e /mnt/ublk/f6 ]; do kill -0 $cp_pid 2>/dev/null || break; sleep 0.1; done
step "  path 0 cut ($NETNS_IF0 down) after $(ls /mnt/ublk | wc -l) files"
netns_link 0 down || fail "link 0 down"
while [ ! -e /mnt/ublk/f18 ]; do kill -0 $cp_pid 2>/dev/null || break; sleep 0.1; done
netns_link 0 up || fail "link 0 up"
step "  path 0 back after $(ls /mnt/ublk | wc -l) files"
wait $cp_pid || fail "writing the files"
umount /mnt/ublk || fail "umount"
stop_tool
serve
e2fsck -f -n "$dev" >/tmp/fsck.txt 2>&1
fsck_rc=$?
tail -n 2 /tmp/fsck.txt | sed 's/^/ublk_test:   /'
[ $fsck_rc = 0 ] || { cat /tmp/fsck.txt; fail "fsck exited $fsck_rc"; }
mount -t ext4 -o ro "$dev" /mnt/ublk || fail "mount $dev again"
(cd /mnt/ublk && sha256sum -c /tmp/src.sha256) >/tmp/sums.txt 2>&1 || { cat /tmp/sums.txt; fail "a file's checksum differs"; }
step "  $(grep -c ': OK$' /tmp/sums.txt) of $nfiles files match"
[ "$(grep -c ': OK$' /tmp/sums.txt)" = $nfiles ] || fail "not every file matched"
umount /mnt/ublk || fail "umount"

step "[dies] SIGKILL under reads: queued I/O fails, the device goes, --delete removes it"
id=${dev#/dev/ublkb}
(while dd if="$dev" of=/dev/null bs=64k iflag=direct 2>/dev/null; do :; done; echo done >/tmp/reader.done) &
reader=$!
r0=$(awk '{ print $1 }' "/sys/block/${dev#/dev/}/stat")
while [ "$(awk '{ print $1 }' "/sys/block/${dev#/dev/}/stat")" -lt $((r0 + 200)) ]; do sleep 0.1; done
kill -KILL "$tool_pid"
wait "$tool_pid"
wait $reader
[ -e /tmp/reader.done ] || fail "the reader did not end"
step "  the reader got an error and ended"
w=100
while [ -e "/sys/block/${dev#/dev/}" ] && [ $w -gt 0 ]; do sleep 0.1; w=$((w - 1)); done
[ ! -e "/sys/block/${dev#/dev/}" ] || fail "$dev still there after its server died"
[ -e "/sys/class/ublk-char/ublkc$id" ] || fail "ublkc$id gone already"
"$tool" --delete "$id" || fail "nvmeof-ublk --delete $id"
[ ! -e "/sys/class/ublk-char/ublkc$id" ] || fail "ublkc$id still there after --delete"
step "  $dev gone, ublkc$id deleted"

step "[recovery] --recovery reissue: killed under writes, taken over, the writes complete"
serve --recovery reissue
id=${dev#/dev/ublkb}
dd if=/dev/urandom of=/tmp/pattern bs=1M count=16 2>/dev/null
dd if=/tmp/pattern of="$dev" bs=64k oflag=direct 2>/tmp/writer.err &
writer=$!
wait_writes 20 $writer
kill -KILL "$tool_pid"
wait "$tool_pid"
[ -e "/sys/block/${dev#/dev/}" ] || fail "$dev went away although its I/O is held for recovery"
kill -0 $writer 2>/dev/null || fail "the writer ended while the device had no server"
step "  server killed; $dev stays, the writer waits"
start_ublk "nvmeof-ublk --recover" $IP netns exec "$NETNS" "$tool" --path "$NETNS_ADDR0" \
    --path "$NETNS_ADDR1" --nqn "$NQN" --queues 2 --recover "$id"
step "  taken over by pid $tool_pid"
wait $writer || { cat /tmp/writer.err; fail "the writer failed across the recovery"; }
dd if="$dev" of=/tmp/back bs=1M count=16 iflag=direct 2>/dev/null || fail "read $dev back"
cmp /tmp/pattern /tmp/back || fail "the data written across the recovery differs"
step "  16 MiB written across the recovery read back equal"
stop_tool
step "pass"
