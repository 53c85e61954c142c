#!/usr/bin/env bash
# `pip install .` and `pip wheel .` as a user runs them, offline, then the Python test suite
# against the installed package.
#   run_pip_test.sh PYTHON SOURCE-DIR BUILD-DIR
# PYTHON: the interpreter meson built the package for (Debian's python3, which has
# python3-mesonpy). A fresh virtual environment (with the system site packages: numpy, pytest)
# gets the checkout installed with --no-build-isolation --no-index; the suite then runs from
# outside the source tree with no PYTHONPATH, and conftest.py checks that `nvmeof` came from the
# environment's site-packages. meson-python builds in BUILD-DIR/pip-build, kept between runs so
# that only the first one compiles the library. The environment is made anew each run at one
# place, BUILD-DIR/pip-venv: meson-python 0.12 reconfigures a kept build directory (and so
# applies the options asked for) only when the interpreter is the one it configured it with.
set -euo pipefail
python=$1
src=$2
build=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pipbuild=$build/pip-build
jobs=(--no-cache-dir --config-settings=builddir="$pipbuild" --config-settings=compile-args=-j2)

if ! "$python" -c 'import mesonpy, venv' 2>/dev/null || ! command -v patchelf >/dev/null; then
  echo "skipped: needs python3-mesonpy, python3-venv and patchelf"
  exit 77
fi

venv=$build/pip-venv
"$python" -m venv --clear --system-site-packages "$venv"
venv_py=$venv/bin/python
unset PYTHONPATH
# A build directory configured through another interpreter would keep its first options.
if [ -d "$pipbuild" ] && ! grep -qsF "'$venv_py'" "$src/.mesonpy-native-file.ini"; then
  rm -rf "$pipbuild"
fi

# The wheel a user gets: the package and the libraries it loads, not the test target.
"$venv_py" -m pip wheel --quiet --no-build-isolation --no-index --no-deps -w "$tmp/wheels" \
  "${jobs[@]}" --config-settings=setup-args=-Dpython_install_testing=false "$src"
wheel=$(ls "$tmp"/wheels/nvmeof-*.whl)
"$venv_py" - "$wheel" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
need = ["nvmeof/__init__.py", "nvmeof/_core.", "libnvmeof.so"]
missing = [n for n in need if not any(n in x for x in names)]
if missing or any("nvmeof/_testing." in x for x in names):
    sys.exit(f"wheel {sys.argv[1]}: missing {missing} or carries _testing:\n" + "\n".join(names))
print(f"pip wheel: {sys.argv[1].rsplit('/', 1)[-1]}, {len(names)} files")
EOF

# The install, with nvmeof._testing (the embedded target the suite runs against).
"$venv_py" -m pip install --quiet --no-build-isolation --no-index --no-deps \
  "${jobs[@]}" --config-settings=setup-args=-Dpython_install_testing=true "$src"
site=$("$venv_py" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
cd "$tmp"
where=$("$venv_py" -c 'import nvmeof; print(nvmeof.__file__)')
case $where in
  "$site"/*) echo "pip install: nvmeof imports from $where" ;;
  *) echo "pip install: nvmeof imports from $where, not from $site" >&2; exit 1 ;;
esac
NVMEOF_EXPECT_PACKAGE_UNDER=$site PYTHONDONTWRITEBYTECODE=1 \
  "$venv_py" -m pytest -q -p no:cacheprovider "$src/tests/python"
