#!/bin/sh
# Assembles what tests/gpu/torchrun_backend.sh needs on the GPU machine,
# which has torch but none of our Debian packages: rdzvd and rdzv with the
# libraries they load (lib/, for those two only), librdzv with the few
# libraries of ours it needs (pylibs/: the only ones put on torch's
# LD_LIBRARY_PATH), the Python package installed with --target (pylib/,
# its torchrun entry point included), and the test itself.
#
#   tests/gpu/torchrun-carry.sh [BUILD] [OUT]      (default build .device/torchrun)
# then, on the device: OUT=$OUT bash OUT/torchrun_backend.sh  (carry OUT)
set -eu
build=${1:-build}
out=${2:-.device/torchrun}
src=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/pylibs"
cp "$build/rendezvous/rdzvd" "$build/client/rdzv" "$out/bin/"
for b in "$build/rendezvous/rdzvd" "$build/client/rdzv"; do
    ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
    case $(basename "$lib") in
        libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*) ;;
        *) cp -L "$lib" "$out/lib/" ;;
    esac
done
cp -L "$build/client/librdzv.so.0" "$out/pylibs/"
for l in libczmq.so.4 libzmq.so.5 libcjson.so.1 libsodium.so.23 libpgm-5.3.so.0 libnorm.so.1; do
    cp "$out/lib/$l" "$out/pylibs/"
done
/usr/bin/python3 -m pip install --quiet --no-index --find-links /usr/share/python-wheels \
    --target "$out/pylib" "$src/python"
cp "$src/tests/gpu/torchrun_backend.sh" "$src/tests/gpu/torchrun_elastic.sh" \
   "$src/tests/gpu/torchrun_train.py" "$out/"
echo "carry $out ($(du -sh "$out" | cut -f1))"
