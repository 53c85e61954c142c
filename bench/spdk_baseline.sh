#!/usr/bin/env bash
# Builds SPDK's nvmf_tgt and spdk_nvme_perf (NVMe/TCP only) against Debian 12's DPDK (22.11), as
# the baseline bench/spdk_compare.py measures us against. SPDK is not a Debian package: SRC is an
# SPDK source tree without its submodules (a `git archive` of it will do), built in place. Nothing
# of SPDK becomes part of nvmeof; this is for measurements only.
#   bench/spdk_baseline.sh SRC
# Needs root for the packages and for the hugepages it reserves (SPDK runs without them, slower).
#
# What it changes in SRC, all at build-configuration level except the last:
#   - configure wants the isa-l submodule; Debian's isa-l (2.30) lacks crc64_rocksoft_refl, so
#     isa-l is switched off in mk/config.mk after configure (SPDK then uses its own CRC code);
#   - intel-ipsec-mb (a submodule) off; the build links only the DPDK libraries that exist
#     (22.11 has no librte_log or librte_argparse), and adds -lnuma, which SPDK's check misses
#     because Debian keeps rte_build_config.h under the multiarch include directory;
#   - SPDK's runtime check accepts DPDK 22.11 only up to 22.11.4 (private driver ABI); Debian
#     ships 22.11.11. The check is widened to .11: only TCP is used, no PCI device, so the PCI
#     driver tables it guards are never reached.
set -euo pipefail
src=${1:?usage: spdk_baseline.sh SRC}
cd "$src"
[ -x configure ] && [ -d lib/env_dpdk ] || { echo "spdk_baseline: $src is not an SPDK source tree" >&2; exit 2; }

need=(gcc g++ make libdpdk-dev libaio-dev uuid-dev libssl-dev libnuma-dev libjson-c-dev libcunit1-dev
  libcmocka-dev python3 pkg-config meson ninja-build libncurses-dev nasm libkeyutils-dev libfuse3-dev
  python3-tabulate python3-yaml python3-jinja2)
missing=()
for p in "${need[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

# Debian's python3 (SPDK's code generators need tabulate, yaml and jinja2 from the packages).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
if [ ! -f mk/config.mk ]; then
  ./configure --with-dpdk --with-isal=/usr --without-isal-crypto --with-shared --without-crypto \
    --without-vhost --without-virtio --without-nvme-cuse --without-rdma --without-idxd --without-fsdev \
    --without-xnvme --without-uring --without-ocf --without-vfio-user --without-usdt --without-fio \
    --disable-tests --disable-unit-tests --disable-examples
fi
# --with-isal=/usr and --with-shared only get past configure's submodule check.
sed -i -e 's/^CONFIG_ISAL?=y/CONFIG_ISAL?=n/' -e 's/^CONFIG_ISAL_INSTALLED?=y/CONFIG_ISAL_INSTALLED?=n/' \
  -e 's/^CONFIG_SHARED?=y/CONFIG_SHARED?=n/' -e 's/^CONFIG_IPSEC_MB?=y/CONFIG_IPSEC_MB?=n/' mk/config.mk
envmk=lib/env_dpdk/env.mk
if ! grep -q 'spdk_baseline' "$envmk"; then
  sed -i '/^DPDK_LIB_LIST_SORTED = /i # spdk_baseline: link only the DPDK libraries that exist\nDPDK_LIB_LIST := $(foreach l,$(DPDK_LIB_LIST),$(if $(wildcard $(DPDK_LIB_DIR)/lib$(l).*),$(l)))\n' "$envmk"
  # Debian's multiarch rte_build_config.h is where SPDK's -lnuma check does not look.
  if [ -f /usr/include/x86_64-linux-gnu/dpdk/rte_build_config.h ]; then
    sed -i '/^DPDK_PRIVATE_LINKER_ARGS += -ldl$/i DPDK_PRIVATE_LINKER_ARGS += -lnuma' "$envmk"
  fi
fi
dpdk_ver=$(pkg-config --modversion libdpdk)
case $dpdk_ver in
  22.11.*) sed -i 's/if (minor > 4) {/if (minor > 11) { \/* spdk_baseline: Debian 22.11.11 *\//' lib/env_dpdk/pci_dpdk.c ;;
esac
make -j"$(nproc)"
ls -l build/bin/nvmf_tgt build/bin/spdk_nvme_perf

# 2 MiB hugepages for both processes (1 GiB each at most); SPDK falls back to --no-huge without.
if [ "$(awk '/HugePages_Total/ {print $2}' /proc/meminfo)" -lt 1024 ]; then
  echo 1024 >/proc/sys/vm/nr_hugepages || true
fi
if ! grep -q ' hugetlbfs ' /proc/mounts; then
  mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages || true
fi
echo "spdk_baseline: built; run bench/spdk_compare.py --spdk $(pwd)"
