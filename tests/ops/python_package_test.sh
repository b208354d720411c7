#!/bin/sh
# The Python package as a user installs it: rdzv built and `meson install`ed
# into a prefix of its own, a fresh venv, `pip install` of python/ with no
# network (--no-index, the build backend from Debian's wheels of setuptools
# and wheel in /usr/share/python-wheels), and
# then, under `env -i` with no variable at all, every API call against the
# installed rdzvd (test_python_package.py), librdzv found where pkg-config
# said it was at install time, and the torchrun entry point discoverable;
# and a copy installed where pkg-config found no librdzv, which must say so
# at install and name what to set when it cannot load librdzv.
# Usage: python_package_test.sh SOURCE_ROOT. TAP (the Python test's, after
# the setup steps); exit 77 when Debian's python3-venv or the wheels are
# missing.
set -u
src=$(cd "$1" && pwd)
py=/usr/bin/python3
tmp=$(mktemp -d /tmp/rdzv-pypkg-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "1..1"; echo "not ok 1 - $1"; sed 's/^/# /' "$2" | tail -15; exit 1; }

if ! "$py" -m venv "$tmp/venv" >"$tmp/.venv" 2>&1; then
    echo "1..0 # SKIP $py -m venv failed (Debian: apt-get install python3-venv)"
    exit 77
fi
wheels=/usr/share/python-wheels
if ! ls "$wheels"/setuptools-*.whl "$wheels"/wheel-*.whl >/dev/null 2>&1; then
    echo "1..0 # SKIP no setuptools and wheel in $wheels (Debian: python3-setuptools-whl python3-wheel-whl)"
    exit 77
fi
prefix=$tmp/prefix
{ meson setup "$tmp/build" "$src" --prefix "$prefix" --libdir lib -Dtests=false -Dnccl=disabled &&
  ninja -C "$tmp/build" && meson install -C "$tmp/build" --quiet; } >"$tmp/.build" 2>&1 ||
    fail "build and meson install into $prefix" "$tmp/.build"
# Also a copy installed where pkg-config finds no librdzv (none on its path
# at all), with pip's -v output: its warning and its failed load are a case.
env -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR=/nonexistent "$tmp/venv/bin/pip" install -v \
    --no-index --find-links "$wheels" --target "$tmp/unfound" "$src/python" \
    >"$tmp/unfound.log" 2>&1 ||
    fail "pip install where pkg-config finds no librdzv" "$tmp/unfound.log"
PKG_CONFIG_PATH=$prefix/lib/pkgconfig "$tmp/venv/bin/pip" install --no-index \
    --find-links "$wheels" --quiet "$src/python" >"$tmp/.pip" 2>&1 ||
    fail "pip install --no-index --find-links $wheels python/ into a fresh venv" "$tmp/.pip"
cd "$tmp"              # away from the source tree: the venv's copy is imported
env -i PATH=/usr/bin:/bin "$tmp/venv/bin/python" "$src/tests/ops/test_python_package.py" \
    --rdzvd "$prefix/sbin/rdzvd" --expect-libdir "$prefix/lib" --unfound-install "$tmp/unfound"
