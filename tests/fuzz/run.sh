#!/bin/sh
# Builds the fuzz harnesses with clang, libFuzzer, ASan and UBSan, and fuzzes
# each for a bounded time (docs/reliability.md).
#
#   tests/fuzz/run.sh [BUILD_DIR [SECONDS]]      defaults: build-fuzz 30
#
# Run from anywhere; BUILD_DIR is relative to the repository root. Each
# harness starts from its seed corpus (tests/fuzz/corpus/NAME) and the kept
# regression inputs (tests/fuzz/regressions/NAME); new coverage goes to
# BUILD_DIR/fuzz-corpus/NAME, never into the source tree. A crash leaves its
# input as BUILD_DIR/fuzz-artifacts/NAME/crash-* and fails the run (exit 1):
# copy it into tests/fuzz/regressions/NAME/ once the bug is fixed.
# Environment: FUZZ_HARNESSES="proto core journal records" to pick some;
# FUZZ_JOBS (default 1) parallel workers per harness.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=${1:-build-fuzz}
seconds=${2:-30}
harnesses=${FUZZ_HARNESSES:-proto core journal records}
jobs=${FUZZ_JOBS:-1}

if ! command -v clang >/dev/null 2>&1; then
    echo "run.sh: clang is not installed (apt-get install clang libclang-rt-14-dev)" >&2
    exit 1
fi
if [ ! -f "$build/build.ninja" ]; then
    # fuzzer-no-link instruments every library (rdzvd's core included) for
    # coverage; the harnesses add the libFuzzer runtime themselves.
    CC=clang meson setup "$build" -Dbuildtype=debugoptimized \
        -Db_sanitize=address,undefined -Db_lundef=false -Dnccl=disabled \
        -Dc_args=-fsanitize=fuzzer-no-link
fi
targets=""
for h in $harnesses; do targets="$targets tests/fuzz/fuzz_$h"; done
# shellcheck disable=SC2086
ninja -C "$build" $targets

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# -jobs makes libFuzzer write fuzz-N.log into the current directory; only
# ask for it when more than one worker is wanted.
parallel=""
[ "$jobs" -gt 1 ] && parallel="-fork=$jobs"
status=0
for h in $harnesses; do
    corpus="$build/fuzz-corpus/$h"
    artifacts="$build/fuzz-artifacts/$h"
    mkdir -p "$corpus" "$artifacts"
    seeds="tests/fuzz/corpus/$h"
    [ -d "tests/fuzz/regressions/$h" ] && seeds="$seeds tests/fuzz/regressions/$h"
    echo "run.sh: fuzzing $h for ${seconds}s"
    # shellcheck disable=SC2086
    if ! "$build/tests/fuzz/fuzz_$h" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
            -max_len=8192 $parallel -print_final_stats=1 \
            -artifact_prefix="$artifacts/" "$corpus" $seeds \
            > "$build/fuzz-$h.log" 2>&1; then
        echo "run.sh: $h FAILED; see $build/fuzz-$h.log and $artifacts/" >&2
        tail -40 "$build/fuzz-$h.log" >&2
        status=1
    else
        grep -E '^stat::(number_of_executed_units|new_units_added)|cov:' "$build/fuzz-$h.log" \
            | tail -3 | sed "s/^/run.sh: $h: /"
    fi
done
exit $status
