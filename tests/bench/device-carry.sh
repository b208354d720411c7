#!/bin/sh
# Assembles what the benchmarks need on a machine without our Debian packages
# (the GPU device: docs/performance.md):
# the release binaries, the libraries they load (not glibc's, libstdc++ or
# libgcc_s: the target's own are newer), wrappers that set LD_LIBRARY_PATH
# for them only, and the build-tree layout shim_bench.py, start_cost.py and
# release_trace.py expect (tree/). The shim needs only the C library, so the
# engine preloads the carried copy as it is.
#
#   tests/bench/device-carry.sh [BUILD] [OUT]     (default build-bench .device/bench)
set -eu
build=${1:-build-bench}
out=${2:-.device/bench}
here=$(cd "$(dirname "$0")" && pwd)

for f in rendezvous/rdzvd tests/bench/rdzv-bench client/rdzv shim/librdzv_shim.so \
         tests/bench/rdzv-shim-bench; do
    [ -x "$build/$f" ] || { echo "device-carry: $build/$f missing; build it first" >&2; exit 1; }
done
mkdir -p "$out/lib" "$out/tree/tests/bench" "$out/tree/shim" "$out/tree/rendezvous" "$out/tree/client"
cp "$build/rendezvous/rdzvd" "$build/tests/bench/rdzv-bench" "$build/client/rdzv" \
   "$build/shim/librdzv_shim.so" "$build/tests/bench/rdzv-shim-bench" "$out/"
cp "$here/compare.py" "$here/shim_bench.py" "$here/release_trace.py" "$here/io_spread.sh" \
   "$here/start_cost.py" "$out/"
cp "$build/tests/bench/rdzv-shim-bench" "$out/tree/tests/bench/"
cp "$build/shim/librdzv_shim.so" "$out/tree/shim/"

# Every library the binaries resolve, minus the C runtime.
for b in "$build/rendezvous/rdzvd" "$build/tests/bench/rdzv-bench" "$build/client/rdzv"; do
    ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
    case $(basename "$lib") in
        libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*) ;;
        *) cp -L "$lib" "$out/lib/" ;;
    esac
done

wrap() {   # wrap NAME TARGET-RELATIVE-TO-WRAPPER-DIR WRAPPER-PATH
    cat >"$3" <<EOF
#!/bin/sh
# Carried copy: libraries from the Debian build machine, for this binary only.
# No subshell and no dirname: the wrapper adds one shell to a start, no more.
case \$0 in /*) p=\$0 ;; */*) p=\$PWD/\$0 ;; *) p=\$(command -v "\$0") ;; esac
d=\${p%/*}/$2
LD_LIBRARY_PATH="\$d/lib" exec "\$d/$1" "\$@"
EOF
    chmod +x "$3"
}
wrap rdzvd . "$out/rdzvd.sh"
wrap rdzv-bench . "$out/rdzv-bench.sh"
wrap rdzvd ../.. "$out/tree/rendezvous/rdzvd"
wrap rdzv ../.. "$out/tree/client/rdzv"
wrap rdzv-bench ../../.. "$out/tree/tests/bench/rdzv-bench"
echo "device-carry: $out ($(du -sh "$out" | cut -f1)); run e.g."
echo "  cd $out && ulimit -n 20000 && python3 compare.py --bench ./rdzv-bench.sh --rdzvd ./rdzvd.sh --ranks 1024,4096,16384 --repeat 3 --processes 8"
echo "  cd $out && python3 shim_bench.py --build tree && python3 start_cost.py --runs 20"
