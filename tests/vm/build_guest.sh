#!/bin/bash
# Prepares the QEMU testbed guest: Debian's own kernel (extracted, never
# installed on the host) and an initramfs that turns it into an NVMe-oF
# target (nvmet tcp + rdma over rdma_rxe) and host.
#
# usage: build_guest.sh [--kernel 6.1|6.12] [cache-dir]   (default $NVMEOF_VM_DIR or build/vm)
#   --kernel 6.1   (default) Debian 12's own kernel, the one behind bookworm's linux-image-amd64:
#                  leaves <cache-dir>/vmlinuz and <cache-dir>/initrd.img
#   --kernel 6.12  the one behind bookworm-backports' linux-image-amd64 (NVMe host and target
#                  authentication, NVMe/TCP TLS): leaves <cache-dir>/vmlinuz-6.12 and
#                  <cache-dir>/initrd-6.12.img. bookworm-backports is read through a sources
#                  list and apt state of the cache's own (<cache-dir>/apt-backports); the
#                  host's sources and apt state are never changed.
# Each kernel's tree and initramfs are cached side by side and built once.
# Exits 77 when the guest cannot be built here (no QEMU, no kernel package).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
series=6.1
if [ "${1:-}" = --kernel ]; then
    series=${2:?--kernel 6.1|6.12}
    shift 2
fi
case $series in
    6.1|6.12) ;;
    *) echo "build_guest: --kernel $series: expected 6.1 or 6.12" >&2; exit 2 ;;
esac
dir=${1:-${NVMEOF_VM_DIR:-$root/build/vm}}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
multiarch=/usr/lib/x86_64-linux-gnu

say() { echo "build_guest: $*" >&2; }
skip() { say "$*"; exit 77; }

# Two runners started together must not build into one tree at once.
exec 9>"$dir/.lock"
flock 9

host_packages=(qemu-system-x86 busybox-static cpio nvme-cli iproute2 kmod
               rdma-core ibverbs-providers ibverbs-utils fio xz-utils e2fsprogs)
installed=" $(dpkg-query -W -f='${db:Status-Abbrev}${Package}\n' "${host_packages[@]}" 2>/dev/null |
               awk '$1 == "ii" { printf "%s ", $2 }')"
missing=()
for p in "${host_packages[@]}"; do
    [[ $installed == *" $p "* ]] || missing+=("$p")
done
if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    # The lists may be absent or stale on a fresh machine.
    apt-get update -qq >&2 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2 ||
        say "apt-get install failed; checking what is usable anyway"
fi
for tool in qemu-system-x86_64 cpio depmod modprobe nvme ldd xz; do
    command -v "$tool" >/dev/null || skip "$tool is not available"
done
if [ ! -x /bin/busybox ] || ldd /bin/busybox >/dev/null 2>&1; then
    skip "/bin/busybox is missing or not static (package busybox-static)"
fi

# ---- kernel ------------------------------------------------------------------
# 6.1: bookworm's lists, as the host's apt has them. 6.12: bookworm-backports
# through a sources list and apt state in the cache; nothing of the host's apt
# changes (apt only reads the host's dpkg status).
if [ "$series" = 6.1 ]; then
    apt_opts=()
    apt_stamp=/var/cache/apt/pkgcache.bin
    pkg_file=$dir/apt-kernel-package
    kernel_out=$dir/vmlinuz
    initrd_out=$dir/initrd.img
    stamp=$dir/initrd.stamp
    apt_refresh() { apt-get update -qq >&2 || true; }
else
    bpo=$dir/apt-backports
    mkdir -p "$bpo"/{etc,state/lists/partial,cache/archives/partial}
    echo "deb http://deb.debian.org/debian bookworm-backports main" >"$bpo/etc/sources.list"
    apt_opts=(-o "Dir::Etc::SourceList=$bpo/etc/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State=$bpo/state" -o "Dir::Cache=$bpo/cache" -o Debug::NoLocking=1
              -o APT::Sandbox::User=root)
    apt_stamp=$bpo/state/lists
    pkg_file=$dir/apt-kernel-package-6.12
    kernel_out=$dir/vmlinuz-6.12
    initrd_out=$dir/initrd-6.12.img
    stamp=$dir/initrd-6.12.stamp
    # The backports lists are fetched when absent, or when the package they name is gone.
    apt_refresh() {
        apt-get "${apt_opts[@]}" update -qq >&2 || true
        touch "$bpo/state/lists"
    }
fi
kernel_package() {
    apt-cache "${apt_opts[@]}" depends linux-image-amd64 2>/dev/null |
        awk -v s="$series" '/Depends: linux-image-[0-9]/ && index($2, "linux-image-" s ".") == 1 { print $2; exit }' ||
        true  # no lists yet: an empty answer
}
# apt-cache takes a second; its answer only changes with apt's cache.
if [ "$pkg_file" -nt "$apt_stamp" ]; then
    kpkg=$(cat "$pkg_file")
else
    kpkg=$(kernel_package)
    if [ -z "$kpkg" ]; then
        apt_refresh
        kpkg=$(kernel_package)
    fi
    [ -z "$kpkg" ] || echo "$kpkg" >"$pkg_file"
fi
if [ -n "$kpkg" ]; then
    kver=${kpkg#linux-image-}
else
    # Offline with no apt lists: a kernel fetched earlier still serves.
    cached=$(ls -d "$dir"/kernel-"$series".*/boot 2>/dev/null | sort -V | tail -n 1 || true)
    [ -n "$cached" ] || skip "cannot resolve the $series package behind linux-image-amd64"
    cached=${cached%/boot}
    kver=${cached##*/kernel-}
    say "no apt lists; using the cached kernel $kver"
fi
ktree=$dir/kernel-$kver
if [ ! -f "$ktree/boot/vmlinuz-$kver" ]; then
    mkdir -p "$dir/debs"
    say "downloading $kpkg"
    if ! (cd "$dir/debs" && apt-get "${apt_opts[@]}" download -qq "$kpkg" >&2); then
        # Stale lists name a version the mirror dropped: refresh them once.
        apt_refresh
        kpkg=$(kernel_package)
        [ -n "$kpkg" ] || skip "cannot resolve the $series package behind linux-image-amd64"
        echo "$kpkg" >"$pkg_file"
        kver=${kpkg#linux-image-}
        ktree=$dir/kernel-$kver
        (cd "$dir/debs" && apt-get "${apt_opts[@]}" download -qq "$kpkg" >&2) ||
            skip "cannot download $kpkg"
    fi
    # Unpacked under a name the clean-up below does not match.
    unpack=$dir/unpack-$series.tmp
    rm -rf "$unpack"
    dpkg -x "$dir/debs/${kpkg}"_*.deb "$unpack"
    # The package ships no modules.dep; its postinst would have made one.
    depmod -b "$unpack" "$kver"
    # A kernel tree is 120 to 400 MB: keep only the current one of each series.
    rm -rf "$dir"/kernel-"$series".*
    mv "$unpack" "$ktree"
    rm -f "$dir/debs/${kpkg}"_*.deb
fi
cp -u "$ktree/boot/vmlinuz-$kver" "$kernel_out"

# ---- initramfs ---------------------------------------------------------------
# The project's own binaries are dynamically linked against these; each is
# optional so the testbed works before the project's dependencies are in.
# (prometheus-cpp for the metrics endpoint; copy_elf brings civetweb and zlib behind it.)
project_libs=(liburing.so.2 libnvme.so.1 libisal.so.2 libibverbs.so.1
              librdmacm.so.1 libfmt.so.9 libstdc++.so.6 libm.so.6 libgcc_s.so.1
              libprometheus-cpp-core.so.1.0 libprometheus-cpp-pull.so.1.0)
present=()
for l in "${project_libs[@]}"; do
    [ -e "$multiarch/$l" ] && present+=("$l")
done
want="$kver ${present[*]}"
inputs=("$here/build_guest.sh" "$here/guest_init" "$here/guest_lib.sh")
fresh=1
[ -f "$initrd_out" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] || fresh=0
for f in "${inputs[@]}"; do
    [ "$f" -nt "$stamp" ] && fresh=0
done
((fresh)) && exit 0

say "building the initramfs for $kver"
stage=$dir/initramfs-$series.tmp
rm -rf "$stage"
mkdir -p "$stage"/{bin,sbin,dev,proc,sys,tmp,run,mnt/host,mnt/ctl,etc/nvme,etc/nvmeof}
mkdir -p "$stage"/usr/{bin,sbin,lib,lib64}
# Merged /usr as on the host, so every path ldd reports resolves in the guest.
ln -s usr/lib "$stage/lib"
ln -s usr/lib64 "$stage/lib64"

cp /bin/busybox "$stage/bin/busybox"
for applet in $(/bin/busybox --list); do
    [ -e "$stage/bin/$applet" ] || ln -s busybox "$stage/bin/$applet"
done
# The kernel's request_module() runs /sbin/modprobe.
ln -sf ../bin/busybox "$stage/sbin/modprobe"
mknod -m 600 "$stage/dev/console" c 5 1
mknod -m 666 "$stage/dev/null" c 1 3

declare -A copied=()
copy_lib() {   # copy_lib <path as the loader looks it up>
    [ -n "${copied[$1]:-}" ] && return 0
    copied[$1]=1
    install -D -m 755 "$(readlink -f "$1")" "$stage$1"
}
copy_elf() {   # copy_elf <host path> [<guest path>]
    local src=$1 dst=${2:-$1} lib
    install -D -m 755 "$src" "$stage$dst"
    for lib in $(ldd "$src" 2>/dev/null | awk '/=> \// { print $3 } /^\t\/.*ld-linux/ { print $1 }'); do
        copy_lib "$lib"
    done
}

copy_elf /usr/sbin/nvme
copy_elf /usr/bin/ip /usr/sbin/ip
copy_elf /usr/sbin/tc
copy_elf /usr/bin/rdma
copy_elf /usr/bin/fio
copy_elf /bin/bash /usr/bin/bash
# ext4 on a ublk device (ublk_test.sh): mkfs and fsck.
if [ -x /sbin/mke2fs ] && [ -x /sbin/e2fsck ]; then
    copy_elf /sbin/mke2fs /usr/sbin/mke2fs
    ln -sf mke2fs "$stage/usr/sbin/mkfs.ext4"
    copy_elf /sbin/e2fsck /usr/sbin/e2fsck
    [ -f /etc/mke2fs.conf ] && install -D -m 644 /etc/mke2fs.conf "$stage/etc/mke2fs.conf"
else
    say "no e2fsprogs on the host: the guest has no mkfs.ext4"
fi
# Shebangs of scripts written on the host.
ln -s /usr/bin/bash "$stage/bin/bash"
ln -s /bin/busybox "$stage/usr/bin/env"
for b in ibv_devinfo ibv_rc_pingpong rping; do
    [ -x /usr/bin/$b ] && copy_elf /usr/bin/$b
done
copy_elf $multiarch/libibverbs/librxe-rdmav34.so
install -D -m 644 /etc/libibverbs.d/rxe.driver "$stage/etc/libibverbs.d/rxe.driver"
for l in "${present[@]}"; do
    copy_elf "$multiarch/$l"
done

echo "nqn.2014-08.org.nvmexpress:uuid:6e766d65-6f66-4000-8000-746573746265" >"$stage/etc/nvme/hostnqn"
echo "6e766d65-6f66-4000-8000-746573746265" >"$stage/etc/nvme/hostid"

# Modules in insmod order, dependencies first. The crc algorithms are listed
# by hand: they are soft dependencies found through the crypto API.
modules=(configfs crc32_generic crc32-pclmul crc32c_generic crc32c-intel
         crct10dif_generic crc64_rocksoft_generic
         dummy veth virtio_net virtio_pci 9p 9pnet_virtio
         nvme-core nvme-fabrics nvme-tcp nvmet nvmet-tcp
         ib_core ib_uverbs iw_cm ib_cm rdma_cm rdma_ucm rdma_rxe nvme-rdma nvmet-rdma)
if modinfo -b "$ktree" -k "$kver" sch_netem >/dev/null 2>&1; then
    modules+=(sch_netem)
else
    say "sch_netem is not in $kver; netem_delay will report unsupported"
fi
# 6.12: the kernel TLS module NVMe/TCP TLS would need (nvme-auth and nvme-keyring come as
# dependencies of nvme-core and nvmet; the DH and hash algorithms are built in), and the
# AES-GCM its record layer asks the crypto API for (gcm and ghash are modules, AES and CTR are
# built in): soft dependencies again, listed by hand.
# 6.12 also builds the ublk driver (6.1 does not) and ext4 for a file system on a ublk device.
if [ "$series" = 6.12 ]; then
    modules+=(tls ghash-generic gcm ublk_drv ext4)
fi
for m in "${modules[@]}"; do
    modprobe -d "$ktree" -S "$kver" --show-depends "$m" ||
        say "module $m is not in $kver"
done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' | while read -r ko; do
    rel=/lib/modules/${ko#"$ktree"/lib/modules/}
    case $rel in
        *.ko.xz)
            # busybox's insmod takes no compressed module: 6.12 ships them xz'ed.
            rel=${rel%.xz}
            mkdir -p "$(dirname "$stage$rel")"
            xz -dc "$ko" >"$stage$rel"
            ;;
        *) install -D -m 644 "$ko" "$stage$rel" ;;
    esac
    echo "$rel"
done >"$stage/etc/nvmeof/modules"
cp "$ktree/lib/modules/$kver"/modules.{builtin,builtin.modinfo,order} \
    "$stage/lib/modules/$kver/"
depmod -b "$stage" "$kver"

install -m 755 "$here/guest_init" "$stage/init"
install -D -m 644 "$here/guest_lib.sh" "$stage/usr/lib/nvmeof/guest_lib.sh"

# Uncompressed: unpacking under TCG costs more than reading a larger file.
(cd "$stage" && find . -print0 | cpio --null -o -H newc --quiet) >"$initrd_out.tmp"
mv "$initrd_out.tmp" "$initrd_out"
say "initramfs: $(du -h "$initrd_out" | cut -f1), $(wc -l <"$stage/etc/nvmeof/modules") modules"
rm -rf "$stage"
echo "$want" >"$stamp"
