#!/bin/sh
# Who may talk to rdzvd: CURVE keys through zauth, the group token, and the
# loopback-only default when no keys are configured. TAP output.
set -u
RDZVD=$1
RDZV=$2
dir=$(mktemp -d /tmp/rdzv-sec-XXXXXX)
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
    id=$1
    shift
    rm -f "$dir/ep"
    "$RDZVD" --state-dir "$dir/state$id" --endpoint-file "$dir/ep" --port-limit 32000 --no-nccl \
        "$@" 2>>"$dir/rdzvd.log" &
    pid=$!
    i=0
    while [ ! -s "$dir/ep" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null; pid=""; }

mkdir -p "$dir/clients"
"$RDZV" keygen "$dir/server" >/dev/null
"$RDZV" keygen "$dir/clients/good" >/dev/null
"$RDZV" keygen "$dir/rogue" >/dev/null
check "keygen writes PATH and a 0600 PATH_secret" \
    "[ -s $dir/server ] && [ \"\$(stat -c %a $dir/server_secret)\" = 600 ]"
check "the public certificate holds no secret key" "! grep -q secret-key $dir/server"
echo "s3cret-token" >"$dir/token"

start 1 --bind 'tcp://127.0.0.1:*' --curve-secret "$dir/server_secret" --clients "$dir/clients" \
    --group-token "$dir/token"
export RDZV_SERVER=$(cat "$dir/ep")
good="RDZV_CURVE_SERVER_PUBLIC=$dir/server RDZV_CURVE_SECRET=$dir/clients/good_secret"
env $good RDZV_GROUP_TOKEN="$dir/token" "$RDZV" join --group g --world 1 --rank 0 --timeout 5 >"$dir/out"
check "a listed client key with the token joins" "[ $? = 0 ] && grep -q '\"epoch\":1' $dir/out"
env $good "$RDZV" status --timeout 5 2>"$dir/err"
check "without the token: refused with forbidden (exit 4)" "[ $? = 4 ] && grep -q forbidden $dir/err"
echo wrong >"$dir/badtoken"
env $good RDZV_GROUP_TOKEN="$dir/badtoken" "$RDZV" status --timeout 5 2>/dev/null
check "a wrong token: refused (exit 4)" "[ $? = 4 ]"
env RDZV_CURVE_SERVER_PUBLIC="$dir/server" RDZV_CURVE_SECRET="$dir/rogue_secret" \
    RDZV_GROUP_TOKEN="$dir/token" "$RDZV" status --timeout 2 2>/dev/null
check "an unlisted client key gets no answer (exit 3)" "[ $? = 3 ]"
RDZV_GROUP_TOKEN="$dir/token" "$RDZV" status --timeout 2 2>/dev/null
check "a plaintext client gets no answer (exit 3)" "[ $? = 3 ]"
check "the forbidden request was logged" "grep -q 'code=forbidden' $dir/rdzvd.log"
stop

# One rule without keys: loopback only. The default endpoint (tcp://*:29400)
# becomes its loopback twin, said in the log before any bind (so a busy
# 29400 here does not matter); a --bind typed by the user is never changed,
# so a wildcard is refused like an address.
start 2
check "without keys the default endpoint is narrowed to loopback, loudly" \
    "grep -q 'NO CURVE KEYS.*without keys rdzvd serves loopback only (tcp://127.0.0.1:29400)' $dir/rdzvd.log"
[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=""
"$RDZVD" --state-dir "$dir/state3" --bind 'tcp://*:0' --no-nccl 2>"$dir/err3"
check "without keys an explicit wildcard --bind is refused (exit 2), saying the rule" \
    "[ $? = 2 ] && grep -q 'without keys rdzvd serves loopback only; refusing --bind tcp://\*:0' $dir/err3 \
     && grep -q insecure-bind-any $dir/err3"
"$RDZVD" --state-dir "$dir/state3" --bind tcp://192.0.2.1:29999 --no-nccl 2>"$dir/err3"
check "without keys a non-loopback address is refused the same way (exit 2)" \
    "[ $? = 2 ] && grep -q 'without keys rdzvd serves loopback only; refusing --bind tcp://192.0.2.1:29999' $dir/err3"

# --http beyond loopback without --http-token says who can read it.
start 4 --bind 'tcp://127.0.0.1:*' --http 0.0.0.0:0
check "a non-loopback --http without --http-token warns" \
    "grep -q 'open --http 0.0.0.0:0 serves /metrics and /v1/groups.*give --http-token FILE' $dir/rdzvd.log"
stop
: >"$dir/rdzvd.log"
printf 'h77p\n' >"$dir/http-token"
start 5 --bind 'tcp://127.0.0.1:*' --http 0.0.0.0:0 --http-token "$dir/http-token"
check "with --http-token it serves and does not warn" \
    "[ -s $dir/ep ] && ! grep -q 'give --http-token' $dir/rdzvd.log"
stop
"$RDZVD" --state-dir "$dir/state6" --http 9400 --http-token "$dir/nonexistent" --no-nccl 2>"$dir/err6"
check "an unreadable --http-token names --http-token (exit 2)" \
    "[ $? = 2 ] && grep -q -- '(--http-token)' $dir/err6"

# A security file that cannot be used is blamed on its own flag, not --server.
"$RDZV" status --group-token "$dir/nonexistent" 2>"$dir/err4"
check "an unreadable --group-token names --group-token (exit 2)" \
    "[ $? = 2 ] && grep -q -- '--group-token (or RDZV_GROUP_TOKEN): cannot read' $dir/err4 \
     && ! grep -q -- '--server' $dir/err4"
"$RDZV" status --curve-server-public "$dir/server" 2>"$dir/err5"
check "a server key without --curve-secret names --curve-secret (exit 2)" \
    "[ $? = 2 ] && grep -q -- '--curve-secret (or RDZV_CURVE_SECRET): not set' $dir/err5 \
     && ! grep -q -- '--server' $dir/err5"
"$RDZV" status --curve-server-public "$dir/nonexistent" --curve-secret "$dir/rogue_secret" \
    2>"$dir/err6"
check "an unreadable --curve-server-public names it (exit 2)" \
    "[ $? = 2 ] && grep -q -- '--curve-server-public (or RDZV_CURVE_SERVER_PUBLIC)' $dir/err6"

echo "1..$n"
[ $failed = 0 ]
