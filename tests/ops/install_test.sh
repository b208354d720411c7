#!/bin/sh
# `meson install` into a DESTDIR, then what a user of the installed tree
# relies on: the programs, librdzv with its SONAME, rdzv.h and rdzv.pc (a
# program built with pkg-config against them runs), the shim, the man pages
# and the systemd unit. Usage: install_test.sh BUILD_DIR. TAP.
set -u
build=$(cd "$1" && pwd)
dest=$(mktemp -d /tmp/rdzv-install-XXXXXX)
trap 'rm -rf "$dest"' EXIT
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
check() { name=$1; shift; if "$@" >"$dest/.out" 2>&1; then ok "$name"; else not_ok "$name" "$(tail -5 "$dest/.out")"; fi; }

echo "1..11"
option() {
    meson introspect --buildoptions "$build" | python3 -c \
        "import json,sys; print(next(o['value'] for o in json.load(sys.stdin) if o['name']=='$1'))"
}
prefix=$(option prefix)
libdir=$(option libdir)
case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac
sanitize=$(option b_sanitize)
root=$dest$prefix

if ! meson install -C "$build" --destdir "$dest" --no-rebuild --quiet >"$dest/.install" 2>&1; then
    not_ok "meson install --destdir" "$(tail -5 "$dest/.install")"
    echo "Bail out! nothing installed"
    exit 1
fi
ok "meson install --destdir"

export LD_LIBRARY_PATH="$dest$libdir"
check "rdzvd and rdzv run from the install" sh -c \
    "'$root/sbin/rdzvd' --version && '$root/bin/rdzv' --version && '$root/bin/rdzv' agent --help"
check "librdzv has SONAME librdzv.so.0" sh -c \
    "readelf -d '$dest$libdir/librdzv.so.0' | grep -q 'SONAME.*\\[librdzv.so.0\\]'"
check "librdzv_shim.so and rdzv.h installed" test -f "$dest$libdir/librdzv_shim.so" -a -f "$root/include/rdzv.h"

pcdir=$dest$libdir/pkgconfig
cat >"$dest/use_rdzv.c" <<'EOF'
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
EOF
san=""
[ "$sanitize" != none ] && san="-fsanitize=$sanitize"
pc="pkg-config --define-variable=prefix=$root"
check "pkg-config finds rdzv.pc" env PKG_CONFIG_PATH="$pcdir" $pc --exists rdzv
check "a program builds against the installed rdzv.pc" sh -c \
    "cc $san -Wall -Werror -o '$dest/use_rdzv' '$dest/use_rdzv.c' \$(PKG_CONFIG_PATH='$pcdir' $pc --cflags --libs rdzv)"
check "it runs and calls rdzv_client_new" "$dest/use_rdzv"
check "it links librdzv.so.0 by SONAME" sh -c "readelf -d '$dest/use_rdzv' | grep -q 'NEEDED.*\\[librdzv.so.0\\]'"
# A static link needs every library librdzv.so.0 itself needs: libc aside,
# and the sanitizer runtimes a -Db_sanitize build adds (the compiler brings
# those, not pkg-config).
needed=$(readelf -d "$dest$libdir/librdzv.so.0" | sed -n 's/.*NEEDED.*\[lib\([^.]*\)\.so.*/\1/p' \
         | grep -vx -e c -e asan -e ubsan -e tsan)
check "pkg-config --static --libs rdzv names every library librdzv needs ($(echo $needed))" sh -c \
    "libs=\$(PKG_CONFIG_PATH='$pcdir' $pc --static --libs rdzv) && for l in $(echo $needed); do
         echo \" \$libs \" | grep -q -- \" -l\$l \" || { echo \"missing -l\$l in: \$libs\"; exit 1; }; done"

mandir=$(option mandir)
case $mandir in /*) ;; *) mandir=$prefix/$mandir ;; esac
if command -v scdoc >/dev/null 2>&1; then
    check "man pages rdzvd(8) rdzv(1) librdzv_shim(7)" test -s "$dest$mandir/man8/rdzvd.8" \
        -a -s "$dest$mandir/man1/rdzv.1" -a -s "$dest$mandir/man7/librdzv_shim.7"
else
    n=$((n + 1)); echo "ok $n - man pages # SKIP scdoc is not installed"
fi
unit=$root/lib/systemd/system/rdzvd.service
check "rdzvd.service names the installed rdzvd" grep -q "^ExecStart=$prefix/sbin/rdzvd " "$unit"
exit $((failed > 0))
