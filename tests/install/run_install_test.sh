#!/usr/bin/env bash
# The library as a package, as a consumer out of this tree sees it:
#   run_install_test.sh SOURCE-ROOT BUILD-ROOT
# 1. `meson install --destdir` of the build into a temporary directory;
# 2. the installed files: libnvmeof.so (SONAME) and .a, libnvmeof-target, the public headers
#    (and none of the internal ones; none befriends a type or declares a parse_ function), the
#    three tools, nvmeof.pc and nvmeof-target.pc;
# 3. the dynamic symbols of both libraries: only public names (nvmeof:: names declared in the
#    installed headers, nvmeof_ C names), nothing of the internals, no std:: instantiations;
# 4. each installed header compiles on its own with `pkg-config --cflags nvmeof`, and reaches no
#    header of liburing, Boost, libnvme, rdma-core, ISA-L or nlohmann-json;
# 5. tests/install/consumer.cpp, built with `c++ $(pkg-config --cflags --libs nvmeof)`, runs
#    against the installed nvmeof-target tool on loopback (two paths) and verifies its data; then
#    tests/install/consumer.c the same way with `cc`, if that file exists (the C API's consumer:
#    called as `consumer-c NQN ADDR:PORT [ADDR:PORT...]`, exit status 0 on success);
#    then both again linked against the installed libnvmeof.a through
#    `pkg-config --static --libs nvmeof` alone (nvmeof.pc names every private dependency), and run;
# 6. a meson project that takes nvmeof as a subproject
#    (dependency('nvmeof', fallback : ['nvmeof', 'nvmeof_dep'])) configures.
set -euo pipefail
src=$(readlink -f "$1")
build=$(readlink -f "$2")
here=$src/tests/install
work=$(mktemp -d /tmp/nvmeof-install.XXXXXX)
dest=$work/dest
target_pid=
cleanup() {
  if [ -n "$target_pid" ]; then
    kill "$target_pid" 2>/dev/null || true
    wait "$target_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "install test: $*" >&2; exit 1; }
step() { echo "== $*"; }

step "meson install --destdir $dest"
meson install -C "$build" --destdir "$dest" --no-rebuild --quiet >"$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; fail "meson install failed"; }

pc=$(find "$dest" -name nvmeof.pc -path '*/pkgconfig/*' | head -n 1)
[ -n "$pc" ] || fail "no nvmeof.pc installed"
[ -f "$(dirname "$pc")/nvmeof-target.pc" ] || fail "no nvmeof-target.pc installed"
libdir=$(dirname "$(dirname "$pc")")
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
export PKG_CONFIG_SYSROOT_DIR=$dest
export LD_LIBRARY_PATH=$libdir
in_dest() { case $1 in "$dest"/*) echo "$1" ;; *) echo "$dest$1" ;; esac; }
prefix=$(in_dest "$(pkg-config --variable=prefix nvmeof)")
incdir=$(in_dest "$(pkg-config --variable=includedir nvmeof)")
bindir=$prefix/bin

step "installed files"
for f in "$libdir/libnvmeof.so" "$libdir/libnvmeof.a" "$libdir/libnvmeof-target.so" \
         "$libdir/libnvmeof-target.a" "$bindir/nvmeof-bench" "$bindir/nvmeof-paths" \
         "$bindir/nvmeof-target" "$incdir/nvmeof/version.h" "$incdir/nvmeof/export.h" \
         "$incdir/nvmeof/volume.hpp" "$incdir/nvmeof/target.hpp"; do
  [ -e "$f" ] || fail "not installed: ${f#"$dest"}"
done
version=$(pkg-config --modversion nvmeof)
for lib in libnvmeof libnvmeof-target; do
  soname=$(readelf -d "$libdir/$lib.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
  [ -n "$soname" ] || fail "$lib.so has no SONAME"
  [ -e "$libdir/$soname" ] || fail "$lib.so: SONAME $soname is not installed"
  echo "$lib.so: SONAME $soname (version $version)"
done
grep -q "NVMEOF_VERSION_STRING \"$version\"" "$incdir/nvmeof/version.h" ||
  fail "nvmeof/version.h does not say $version"
# Only the public API is installed (and nothing outside include/nvmeof).
for h in reactor.hpp queue_pair.hpp sync_io.hpp; do
  [ ! -e "$incdir/nvmeof/$h" ] || fail "internal header installed: nvmeof/$h"
done
extra=$(find "$incdir" -type f ! -path "$incdir/nvmeof/*")
[ -z "$extra" ] || fail "headers installed outside include/nvmeof: $extra"
if grep -nE '#include *[<"](liburing|boost/|nvme/|infiniband/|rdma/|isa-l|nlohmann/)|impl\(\)' \
    "$incdir"/nvmeof/*; then
  fail "a public header includes a dependency's header or exposes impl()"
fi
# The library reaches its own state behind the public classes without being befriended, and the
# parsers of raw pages and option names are the library's (lib/), not the API.
if grep -nE '^[^/]*\<friend +(struct|class)\>|^[^/]*\<parse_[a-z_]+\(' "$incdir"/nvmeof/*; then
  fail "a public header befriends a type or declares a parser"
fi

step "exported symbols"
# Every name in a symbol's nvmeof:: qualification must be declared by the installed headers (their
# code, comments left out), and no symbol may belong to an Impl, to an internal namespace or to
# another namespace (std:: instantiations, boost::, ...).
words=$work/words
sed -e 's|//.*||' -e 's|/\*.*\*/||' "$incdir"/nvmeof/* | grep -oE '[A-Za-z_][A-Za-z0-9_]*' |
  sort -u >"$words"
for lib in libnvmeof libnvmeof-target; do
  nm -D --defined-only -C "$libdir/$lib.so" | cut -c18- | sed 's/^. //' | sort -u >"$work/$lib.syms"
  bad=$(grep -vE '^((typeinfo|typeinfo name|vtable|VTT|guard variable) for )?nvmeof::|^nvmeof_' \
    "$work/$lib.syms" || true)
  [ -z "$bad" ] || fail "$lib.so exports non-public symbols:"$'\n'"$bad"
  impl=$(sed 's/(.*//' "$work/$lib.syms" | grep -E '(^|::)Impl::' || true)
  [ -z "$impl" ] || fail "$lib.so exports internals:"$'\n'"$impl"
  internal=$(grep -E 'nvmeof::(tcp|rdma|uring|detail|target)::' "$work/$lib.syms" || true)
  [ -z "$internal" ] || fail "$lib.so exports internals:"$'\n'"$internal"
  for name in $(sed 's/(.*//' "$work/$lib.syms" | grep -oE 'nvmeof(::~?[A-Za-z_][A-Za-z0-9_]*)+' |
                sed -e 's/::~\?/ /g' | tr ' ' '\n' | grep -vx nvmeof | sort -u); do
    grep -qx "$name" "$words" || fail "$lib.so exports nvmeof::$name, which no installed header declares"
  done
  echo "$lib.so: $(wc -l <"$work/$lib.syms") symbols, all public"
done

step "installed headers compile on their own"
cflags=$(pkg-config --cflags nvmeof)
for h in "$incdir"/nvmeof/*.hpp; do
  name=nvmeof/$(basename "$h")
  echo "#include <$name>" >"$work/one.cpp"
  # shellcheck disable=SC2086
  c++ -std=c++20 -Wall -Wextra -Wpedantic -Werror $cflags -M "$work/one.cpp" >"$work/deps" ||
    fail "$name does not compile with: $cflags"
  # shellcheck disable=SC2086
  c++ -std=c++20 -Wall -Wextra -Wpedantic -Werror $cflags -fsyntax-only "$work/one.cpp" ||
    fail "$name does not compile with: $cflags"
  if grep -E 'liburing|/boost/|/nvme/|infiniband|/rdma/|isa-l|nlohmann' "$work/deps"; then
    fail "$name reaches a dependency's header"
  fi
  if sed 's/[ \\]/\n/g' "$work/deps" | grep '/nvmeof/' | grep -v "^$dest/"; then
    fail "$name reaches a header outside the installed tree"
  fi
done
printf '%s\n' '#include <nvmeof/version.h>' '#include <nvmeof/export.h>' \
  'NVMEOF_API int f(void);' 'const char* v = NVMEOF_VERSION_STRING;' \
  'int n = NVMEOF_VERSION + NVMEOF_VERSION_MAJOR + NVMEOF_VERSION_MINOR + NVMEOF_VERSION_PATCH;' \
  >"$work/one.c"
# shellcheck disable=SC2086
cc -std=c99 -Wall -Wextra -Wpedantic -Werror $cflags -fsyntax-only "$work/one.c" ||
  fail "nvmeof/version.h or nvmeof/export.h is not C"

step "nvmeof-target (installed) on loopback, two paths"
nqn=nqn.2024-01.io.nvmeof:install-test
"$bindir/nvmeof-target" --listen 127.0.0.1:0 --listen 127.0.0.1:0 --nqn "$nqn" --size 16M \
  >"$work/target.log" 2>&1 &
target_pid=$!
addrs=
for _ in $(seq 1 100); do
  addrs=$(sed -n 's/^nvmeof-target: listening on \([^ ]*\).*/\1/p' "$work/target.log" | tr '\n' ' ')
  [ "$(echo "$addrs" | wc -w)" -ge 2 ] && break
  kill -0 "$target_pid" 2>/dev/null || { cat "$work/target.log" >&2; target_pid=; fail "nvmeof-target exited"; }
  sleep 0.1
done
[ "$(echo "$addrs" | wc -w)" -ge 2 ] || { cat "$work/target.log" >&2; fail "nvmeof-target did not listen"; }
echo "listening on $addrs"

step "C++ consumer: c++ consumer.cpp \$(pkg-config --cflags --libs nvmeof)"
# shellcheck disable=SC2046
c++ -std=c++20 -Wall -Wextra -Werror -o "$work/consumer" "$here/consumer.cpp" \
  $(pkg-config --cflags --libs nvmeof) || fail "the C++ consumer does not build"
# Not grep -q: it would stop reading, and ldd, killed by SIGPIPE, fails the pipeline (pipefail).
ldd "$work/consumer" | grep "$libdir/libnvmeof.so" >/dev/null || fail "the consumer does not use the installed libnvmeof.so"
# shellcheck disable=SC2086
"$work/consumer" "$nqn" $addrs || fail "the C++ consumer failed"

if [ -f "$here/consumer.c" ]; then
  step "C consumer: cc consumer.c \$(pkg-config --cflags --libs nvmeof)"
  # shellcheck disable=SC2046
  cc -Wall -Wextra -Werror -o "$work/consumer-c" "$here/consumer.c" \
    $(pkg-config --cflags --libs nvmeof) || fail "the C consumer does not build"
  # shellcheck disable=SC2086
  "$work/consumer-c" "$nqn" $addrs || fail "the C consumer failed"
else
  echo "(no tests/install/consumer.c: no C consumer yet)"
fi

# A consumer linked against libnvmeof.a with what `pkg-config --static --libs nvmeof` gives: the
# static library is named where pkg-config says -lnvmeof (the linker would take the .so beside
# it), everything after it must come from nvmeof.pc's private fields.
static_consumer() {  # static_consumer COMPILER SOURCE OUTPUT [FLAGS...]
  local compiler=$1 source=$2 out=$3
  shift 3
  local libs=() w
  for w in $(pkg-config --static --libs nvmeof); do
    if [ "$w" = -lnvmeof ]; then libs+=("-l:libnvmeof.a"); else libs+=("$w"); fi
  done
  step "static: $compiler $(basename "$source") \$(pkg-config --static --libs nvmeof), libnvmeof.a"
  # shellcheck disable=SC2046
  "$compiler" "$@" -Wall -Wextra -Werror -o "$out" "$source" $(pkg-config --cflags nvmeof) "${libs[@]}" ||
    fail "$(basename "$source") does not link statically with: ${libs[*]}"
  if ldd "$out" | grep libnvmeof >/dev/null; then fail "$(basename "$out") loads a shared libnvmeof"; fi
  # shellcheck disable=SC2086
  "$out" "$nqn" $addrs || fail "the statically linked $(basename "$source") failed"
}
static_consumer c++ "$here/consumer.cpp" "$work/consumer-static" -std=c++20
if [ -f "$here/consumer.c" ]; then
  static_consumer cc "$here/consumer.c" "$work/consumer-c-static"
fi

step "as a meson subproject"
mkdir -p "$work/sub/subprojects"
ln -s "$src" "$work/sub/subprojects/nvmeof"
cp "$here/consumer.cpp" "$work/sub/"
cat >"$work/sub/meson.build" <<'MESON'
project('consumer', 'cpp', version : '1.0', default_options : ['cpp_std=c++20'])
nvmeof_dep = dependency('nvmeof', fallback : ['nvmeof', 'nvmeof_dep'])
executable('consumer', 'consumer.cpp', dependencies : nvmeof_dep)
MESON
(cd "$work/sub" && meson setup --wrap-mode=forcefallback build >"$work/sub.log" 2>&1) ||
  { tail -n 30 "$work/sub.log" >&2; fail "a project with nvmeof as a subproject does not configure"; }
grep -q "Subproject nvmeof finished" "$work/sub.log" &&
  grep -q "Dependency nvmeof found: YES $version (overridden)" "$work/sub.log" ||
  { tail -n 30 "$work/sub.log" >&2; fail "dependency('nvmeof') did not come from the subproject"; }
if grep -i "warning" "$work/sub.log"; then fail "the subproject configures with warnings"; fi
echo "install test: ok"
