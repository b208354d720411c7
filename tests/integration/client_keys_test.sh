#!/bin/sh
# CURVE client keys rotate without a restart: rdzvd reads --clients DIR
# again when its contents change, plain files and a Kubernetes Secret's
# "..data" symlink swap alike, and logs the new count. TAP output.
set -u
RDZVD=$1
RDZV=$2
dir=$(mktemp -d /tmp/rdzv-keys-XXXXXX)
n=0
failed=0
check() {
    n=$((n + 1))
    if eval "$2"; then echo "ok $n - $1"; else failed=$((failed + 1)); echo "not ok $n - $1"; fi
}
cleanup() {
    [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT

start() {
    rm -f "$dir/ep"
    "$RDZVD" --state-dir "$dir/state" --endpoint-file "$dir/ep" --port-limit 32000 --no-nccl \
        --bind 'tcp://127.0.0.1:*' --curve-secret "$dir/server_secret" --clients "$1" \
        >>"$dir/rdzvd.out" 2>>"$dir/rdzvd.log" &
    pid=$!
    i=0
    while [ ! -s "$dir/ep" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
    export RDZV_SERVER="$(cat "$dir/ep")"
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null; pid=""; }
# Asks status as client $1 (a, b); exit 0 answered, 3 no answer (not let in).
as() {
    RDZV_CURVE_SERVER_PUBLIC="$dir/server" RDZV_CURVE_SECRET="$dir/keys/$1_secret" \
        "$RDZV" status --timeout "${2:-5}" >/dev/null 2>&1
}

mkdir -p "$dir/keys" "$dir/plain"
"$RDZV" keygen "$dir/server" >/dev/null
"$RDZV" keygen "$dir/keys/a" >/dev/null
"$RDZV" keygen "$dir/keys/b" >/dev/null

# Plain files, changed in place.
cp "$dir/keys/a" "$dir/plain/a.key"
start "$dir/plain"
as a
check "key A in DIR: A is let in" "[ $? = 0 ]"
as b 2
check "key B not in DIR: B gets no answer (exit 3)" "[ $? = 3 ]"
cp "$dir/keys/b" "$dir/plain/b.key"
as b
check "B's certificate added to DIR: B is let in, rdzvd not restarted" "[ $? = 0 ]"
check "the change is logged with the new count" \
    "grep -q ' clients keys=2 added=1 removed=0 dir=$dir/plain' $dir/rdzvd.log"
rm "$dir/plain/a.key"
as a 2
check "A's certificate removed: A gets no answer" "[ $? = 3 ]"
as b
check "... and B still is let in" "[ $? = 0 ]"
check "the removal is logged" "grep -q ' clients keys=1 added=0 removed=1 ' $dir/rdzvd.log"
cp "$dir/plain/b.key" "$dir/plain/b-copy.key"
as b
check "one key in two files: still let in, rdzvd still up" "[ $? = 0 ] && kill -0 $pid"
echo "not a certificate" >"$dir/plain/notes.txt"
as b
check "a file that is no certificate is skipped, named in the log" \
    "[ $? = 0 ] && grep -q ' clients skipped file=notes.txt ' $dir/rdzvd.log"
check "... and czmq's own line about it is in the log, rdzvd's stdout stays empty" \
    "grep -q 'invalid syntax' $dir/rdzvd.log && [ ! -s $dir/rdzvd.out ]"
stop

# A Kubernetes Secret as the kubelet lays it out: the data in a hidden
# timestamped folder, "..data" linking to it, one visible link per key into
# "..data". An update writes a new folder and renames a new "..data" link
# over the old one in one step.
k8s="$dir/secret"
mkdir -p "$k8s/..v1"
cp "$dir/keys/a" "$k8s/..v1/current"
ln -s ..v1 "$k8s/..data"
ln -s ..data/current "$k8s/current"
# swap VERSION FILE=KEY...: the Secret now holds these keys.
swap() {
    v=$1
    shift
    mkdir -p "$k8s/..$v"
    for pair in "$@"; do cp -n "$dir/keys/${pair#*=}" "$k8s/..$v/${pair%%=*}"; done
    ln -s "..$v" "$k8s/..data_tmp"
    mv -T "$k8s/..data_tmp" "$k8s/..data"
    for pair in "$@"; do
        [ -e "$k8s/${pair%%=*}" ] || ln -s "..data/${pair%%=*}" "$k8s/${pair%%=*}"
    done
    for link in "$k8s"/*; do [ -e "$link" ] || rm "$link"; done
}
start "$k8s"
check "a Secret's layout: the hidden entries are not read as keys" \
    "grep -q ' curve=on client_keys=1 ' $dir/rdzvd.log"
as a
check "Secret with A: A is let in" "[ $? = 0 ]"
swap v2 current=b previous=a
as b
check "..data swapped to a Secret with B and A: B is let in" "[ $? = 0 ]"
as a
check "... and A still is (both keys while Pods roll)" "[ $? = 0 ]"
swap v3 current=b
as a 2
check "..data swapped to a Secret with B alone: A gets no answer" "[ $? = 3 ]"
as b
check "... and B is let in" "[ $? = 0 ]"
# One key's value replaced under the same name with the old file's times:
# only the link's new target tells.
mkdir "$k8s/..v4"
cp "$dir/keys/a" "$k8s/..v4/current"
touch -r "$k8s/..v3/current" "$k8s/..v4/current"
swap v4 current=a
as a
check "the same name swapped to A's certificate: A is let in again" "[ $? = 0 ]"
as b 2
check "... and B no more" "[ $? = 3 ]"
stop

echo "1..$n"
[ $failed = 0 ]
