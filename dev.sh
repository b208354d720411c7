#!/bin/sh
# One entry point for a fresh Debian 12 machine:
#   ./dev.sh demo   install what is missing, build, run rdzvd + 4 ranks on loopback
#   ./dev.sh test   install what is missing, build, run every test, then again
#                   built with AddressSanitizer and UBSan
set -eu
cd "$(dirname "$0")"

PACKAGES="gcc meson ninja-build pkg-config libczmq-dev libzmq3-dev libcjson-dev
check zlib1g-dev python3 python3-zmq python3-venv python3-setuptools-whl python3-wheel-whl iproute2 procps util-linux libmicrohttpd-dev python3-yaml scdoc
clang libclang-rt-14-dev valgrind
libcurl4-openssl-dev etcd-server etcd-client curl
prometheus haproxy"

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

install_packages() {
    missing=""
    for p in $PACKAGES; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
    done
    [ -z "$missing" ] && return 0
    echo "dev.sh: installing$missing"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
}

# Test tooling from the npm registry, never part of the product: the
# Kubernetes schema validator of tests/ops/k8s (its lock file pins it).
# The manifest tests also need kubectl 1.27 or newer for `kubectl kustomize`;
# Debian 12's kubernetes-client is older, so without kubectl they are skipped.
install_test_tools() {
    if ! command -v npm >/dev/null 2>&1; then
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm
    fi
    # Again whenever the lock file changed since the last npm ci here.
    if ! cmp -s tests/ops/k8s/package-lock.json tests/ops/k8s/node_modules/.rdzv-installed-lock; then
        echo "dev.sh: npm ci in tests/ops/k8s"
        (cd tests/ops/k8s && npm ci --no-audit --no-fund --loglevel=error &&
            cp package-lock.json node_modules/.rdzv-installed-lock)
    fi
    command -v kubectl >/dev/null 2>&1 ||
        echo "dev.sh: kubectl not found: the Kubernetes manifest tests will be skipped"
}

build() {
    dir=$1
    shift
    if [ ! -f "$dir/build.ninja" ]; then
        meson setup "$dir" "$@"
    fi
    ninja -C "$dir"
}

demo() {
    install_packages
    build build
    exec sh examples/demo.sh build
}

run_tests() {
    install_packages
    install_test_tools
    build build-ci -Dwerror=true
    meson test -C build-ci --print-errorlogs --num-processes 2
    # The same suite with the sanitizers; a finding fails the run.
    build build-asan -Db_sanitize=address,undefined -Db_lundef=false
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        meson test -C build-asan --print-errorlogs --num-processes 2
    # libFuzzer: each harness of tests/fuzz for 30 s (clang, ASan, UBSan).
    tests/fuzz/run.sh build-fuzz 30
}

case "${1:-}" in
demo) demo ;;
test) run_tests ;;
*) echo "usage: ./dev.sh demo|test" >&2; exit 2 ;;
esac
