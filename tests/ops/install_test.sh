#!/bin/sh
# The installed tree as a user gets it: a build with the image recipe's own
# `meson setup` options (read from examples/kubernetes/Dockerfile),
# `meson install --destdir`, then every program and the shim run under
# `env -i`, with no LD_LIBRARY_PATH: versions, a one-rank join against the
# installed rdzvd, a probe under the installed shim through the installed
# agent, the recipe's own check step, the runtime packages it installs, the
# pkg-config file, man pages and the systemd unit.
# Usage: install_test.sh SOURCE_ROOT. TAP.
set -u
src=$(cd "$1" && pwd)
dockerfile=$src/examples/kubernetes/Dockerfile
tmp=$(mktemp -d /tmp/rdzv-install-XXXXXX)
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
check() { name=$1; shift; if "$@" >"$tmp/.out" 2>&1; then ok "$name"; else not_ok "$name" "$(tail -8 "$tmp/.out")"; fi; }
bare() { env -i "$@"; }

echo "1..18"
# The options after the source directory of the recipe's `meson setup` line.
options=$(sed -n 's/.*meson setup [^ ]* [^ ]* \(.*\)/\1/p' "$dockerfile" | sed 's/ *&&.*//; s/ *\\$//')
prefix=$(echo "$options" | sed -n 's/.*--prefix[ =]\([^ ]*\).*/\1/p')
libdir=$(echo "$options" | sed -n 's/.*--libdir[ =]\([^ ]*\).*/\1/p')
if [ -z "$prefix" ] || [ -z "$libdir" ]; then
    echo "Bail out! no --prefix/--libdir in the Dockerfile's meson setup line: '$options'"
    exit 1
fi
case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac
# shellcheck disable=SC2086 # the recipe's options, split as the shell in RUN splits them
if ! { meson setup "$tmp/build" "$src" $options && ninja -C "$tmp/build" &&
       meson install -C "$tmp/build" --destdir "$tmp/dest" --no-rebuild --quiet; } >"$tmp/.build" 2>&1; then
    not_ok "build and meson install with the recipe's options ($options)" "$(tail -8 "$tmp/.build")"
    echo "Bail out! nothing installed"
    exit 1
fi
ok "build and meson install --destdir with the recipe's options ($options)"
root=$tmp/dest$prefix
lib=$tmp/dest$libdir

check "rdzv --version under env -i" bare "$root/bin/rdzv" --version
check "rdzvd --version under env -i" bare "$root/sbin/rdzvd" --version
# The recipe's own check, as the image's last stage runs it (its PATH).
step=$(sed -n 's/^RUN \(rdzv --version.*\)/\1/p' "$dockerfile")
if [ -n "$step" ]; then
    check "the recipe's step '$step' passes on the installed tree" \
        bare PATH="$root/bin:$root/sbin:/usr/bin:/bin" sh -c "$step"
else
    not_ok "the recipe runs rdzv --version and rdzvd --version as a build step" "no such RUN line in $dockerfile"
fi

# Every library the installed programs load must come with a package that
# the recipe's last stage installs (or one those depend on).
runtime=$(awk '/^FROM/ { last = NR } { line[NR] = $0 } END {
    for (i = last; i <= NR; i++) print line[i] }' "$dockerfile" |
    sed -n '/apt-get install/,/rm -rf/p' | tr ' \\' '\n\n' | grep -E '^lib|^zlib' | sort -u)
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances $runtime 2>/dev/null | grep -v '^ ' | sed 's/:.*//' | sort -u)
missing=""
for elf in "$root/bin/rdzv" "$root/sbin/rdzvd" "$lib/librdzv.so.0" "$lib/librdzv_shim.so"; do
    for so in $(bare /usr/bin/ldd "$elf" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p'); do
        case $so in "$tmp"/*) continue ;; esac
        pkg=$(dpkg -S "$so" 2>/dev/null || dpkg -S "$(readlink -f "$so")" 2>/dev/null ||
              dpkg -S "$(echo "$so" | sed 's,^/usr,,')" 2>/dev/null)
        pkg=$(echo "$pkg" | head -1 | sed 's/:.*//')
        echo "$closure" | grep -qx "$pkg" || missing="$missing $(basename "$so")($pkg)"
    done
done
if [ -n "$runtime" ] && [ -z "$missing" ]; then
    ok "every library the programs load comes with the recipe's runtime packages ($(echo $runtime))"
else
    not_ok "every library the programs load comes with the recipe's runtime packages" \
        "runtime packages: $(echo $runtime)" "not provided:$missing"
fi

# A real installed rdzvd on loopback; the managed range below the kernel's
# ephemeral ports, away from the defaults other tests use.
base=$((23000 + $$ % 40 * 32))
# env itself, not the bare() function: a function in the background is a
# subshell, and killing that would leave rdzvd running after the test.
env -i "$root/sbin/rdzvd" --bind 'tcp://127.0.0.1:*' --endpoint-file "$tmp/ep" --state-dir "$tmp/state" \
    --no-nccl --port-base "$base" --port-limit $((base + 256)) >"$tmp/rdzvd.log" 2>&1 &
pid=$!
i=0
while [ ! -s "$tmp/ep" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
ep=$(cat "$tmp/ep" 2>/dev/null)
check "a one-rank rdzv join against the installed rdzvd" sh -c \
    "env -i '$root/bin/rdzv' join --server '$ep' --group install --world 1 --rank 0 --format env >'$tmp/join' &&
     grep -qx 'RDZV_WORLD=1' '$tmp/join' && grep -q '^VLLM_PORT=$((base + 10))\$' '$tmp/join' &&
     grep -qx \"RDZV_VLLM_ARGS='--data-parallel-size 1 --data-parallel-rank 0 --data-parallel-address [^ ]* --data-parallel-rpc-port $((base + 1)) --port $((base + 2))'\" '$tmp/join'"

# Under the installed agent, with the installed shim it finds by itself: a
# probe of VLLM_PORT is leased, the same probe without the shim is refused
# (the agent holds the port), and a listener on it is served.
probe='import os, socket, sys
port = int(os.environ["VLLM_PORT"])
s = socket.socket()
try:
    s.bind(("", port))
except OSError as e:
    print("refused", port, e.errno); sys.exit(1)
print("leased", s.getsockname()[1], "of", port)
s.close()
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", port)); l.listen(1)
c = socket.create_connection(("127.0.0.1", port), timeout=5); a, _ = l.accept()
print("listener", l.getsockname()[1])'
bare "$root/bin/rdzv" agent --server "$ep" --group install-agent --world 1 --rank 0 \
    --socket "$tmp/agent.sock" --port-range "$base-$((base + 256))" -- \
    /bin/sh -c 'echo "LD_PRELOAD=$LD_PRELOAD"; /usr/bin/env -u LD_PRELOAD /usr/bin/python3 -c "$1"; /usr/bin/python3 -c "$1"' \
    sh "$probe" >"$tmp/agent.out" 2>"$tmp/agent.err"
rc=$?
if [ $rc = 0 ]; then ok "rdzv agent runs its command under env -i"; else
    not_ok "rdzv agent runs its command under env -i (rc $rc)" "$(tail -5 "$tmp/agent.err")" "$(cat "$tmp/agent.out")"; fi
check "the agent preloads the installed shim, found beside itself" \
    grep -qx "LD_PRELOAD=$root/bin/../lib/librdzv_shim.so" "$tmp/agent.out"
vllm_port=$(sed -n 's/^refused \([0-9]*\) 98$/\1/p' "$tmp/agent.out")
check "without the shim the agent's reservation refuses the probe (EADDRINUSE)" test -n "$vllm_port"
check "under the installed shim the probe of VLLM_PORT is leased" \
    grep -qx "leased $vllm_port of ${vllm_port:-none}" "$tmp/agent.out"
check "under the installed shim a listener on it is handed over and accepts" \
    grep -qx "listener ${vllm_port:-none}" "$tmp/agent.out"

# The image's way to make the Kubernetes Secrets: no kubectl needed.
check "rdzv-make-secrets --print makes five Secrets under env -i" sh -c \
    "env -i PATH='$root/bin:/usr/bin:/bin' '$root/bin/rdzv-make-secrets' --print >'$tmp/secrets.yaml' &&
     test \$(grep -c '^kind: Secret\$' '$tmp/secrets.yaml') = 5"

# A program built against the installed rdzv.pc, linked the way a user of a
# non-system prefix links (a run path to the libdir pkg-config names).
pcdir=$lib/pkgconfig
pc="pkg-config --define-variable=prefix=$root"
cat >"$tmp/use_rdzv.c" <<'C'
#include <rdzv.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    char err[256];
    rdzv_client_t *c = rdzv_client_new("tcp://127.0.0.1:1", NULL, err, sizeof err);
    if (!c) {
        fprintf(stderr, "rdzv_client_new: %s\n", err);
        return 1;
    }
    int good = strlen(rdzv_client_session(c)) > 0
               && rdzv_client_set_request_timeout(c, 0) == RDZV_ERR_USAGE;
    rdzv_client_destroy(&c);
    rdzv_client_destroy(&c);
    printf("librdzv %s ok\n", RDZV_VERSION_STRING);
    return good && c == NULL ? 0 : 1;
}
C
check "a program builds against the installed rdzv.pc" sh -c \
    "cc -Wall -Werror -o '$tmp/use_rdzv' '$tmp/use_rdzv.c' \$(PKG_CONFIG_PATH='$pcdir' $pc --cflags --libs rdzv) \
        -Wl,-rpath,\$(PKG_CONFIG_PATH='$pcdir' $pc --variable=libdir rdzv)"
check "it runs under env -i and links librdzv.so.0 by SONAME" sh -c \
    "env -i '$tmp/use_rdzv' && readelf -d '$tmp/use_rdzv' | grep -q 'NEEDED.*\\[librdzv.so.0\\]' &&
     readelf -d '$lib/librdzv.so.0' | grep -q 'SONAME.*\\[librdzv.so.0\\]'"
# A static link needs every library librdzv.so.0 itself needs, libc aside.
needed=$(readelf -d "$lib/librdzv.so.0" | sed -n 's/.*NEEDED.*\[lib\([^.]*\)\.so.*/\1/p' | grep -vx c)
check "pkg-config --static --libs rdzv names every library librdzv needs ($(echo $needed))" sh -c \
    "libs=\$(PKG_CONFIG_PATH='$pcdir' $pc --static --libs rdzv) && for l in $(echo $needed); do
         echo \" \$libs \" | grep -q -- \" -l\$l \" || { echo \"missing -l\$l in: \$libs\"; exit 1; }; done"

mandir=$root/share/man
if command -v scdoc >/dev/null 2>&1; then
    check "man pages rdzvd(8) rdzv(1) librdzv_shim(7)" test -s "$mandir/man8/rdzvd.8" \
        -a -s "$mandir/man1/rdzv.1" -a -s "$mandir/man7/librdzv_shim.7"
else
    n=$((n + 1)); echo "ok $n - man pages # SKIP scdoc is not installed"
fi
# Kubernetes and systemd stop it with SIGTERM: it must exit 0, not linger.
kill -TERM "$pid"
wait "$pid"
rc=$?
if [ $rc = 0 ] && ! kill -0 "$pid" 2>/dev/null; then ok "the installed rdzvd exits 0 on SIGTERM"; pid=""; else
    not_ok "the installed rdzvd exits 0 on SIGTERM (rc $rc)" "$(tail -5 "$tmp/rdzvd.log")"; fi
check "rdzvd.service names the installed rdzvd" grep -q "^ExecStart=$prefix/sbin/rdzvd " "$root/lib/systemd/system/rdzvd.service"
exit $((failed > 0))
