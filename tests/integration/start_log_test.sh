#!/bin/sh
# rdzvd's log: the start line says how rdzvd guards itself (CURVE and the
# client keys loaded, the token mode, the HTTP token) and whether groups get
# NCCL IDs; --log-level keeps the lines at or above a level. TAP output.
set -u
RDZVD=$1
RDZV=$2
dir=$(mktemp -d /tmp/rdzv-startlog-XXXXXX)
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

# Starts rdzvd with "$@" into $dir/log, waits until it serves.
start() {
    rm -f "$dir/ep"
    : >"$dir/log"
    "$RDZVD" --state-dir "$dir/state" --endpoint-file "$dir/ep" --port-limit 32000 \
        --bind 'tcp://127.0.0.1:*' "$@" 2>>"$dir/log" &
    pid=$!
    i=0
    while [ ! -s "$dir/ep" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null; pid=""; }
start_line() { grep -E ' start version=|"event":"start"' "$dir/log"; }

mkdir -p "$dir/clients" "$dir/tokens"
"$RDZV" keygen "$dir/server" >/dev/null
"$RDZV" keygen "$dir/clients/a" >/dev/null
"$RDZV" keygen "$dir/clients/b" >/dev/null
echo tok >"$dir/token"

start --no-nccl
check "no keys: curve=off, no key count, token=none, http_token=no" \
    "start_line | grep -q ' curve=off token=none http_token=no ' && ! start_line | grep -q client_keys"
check "--no-nccl: NCCL IDs only on request (or none in a build without NCCL), never by default" \
    "start_line | grep -Eq ' nccl=(on-request nccl_helper=[^ ]+|none)\$' && ! start_line | grep -q nccl=default"
stop

start --nccl-helper /bin/true
check "with a helper and without --no-nccl: nccl=default and the helper (none without NCCL)" \
    "start_line | grep -Eq ' nccl=(default nccl_helper=/bin/true|none)\$'"
stop

# The secret certificate beside the public ones is no client key.
start --no-nccl --curve-secret "$dir/server_secret" --clients "$dir/clients" \
    --group-token "$dir/token" --http 0 --http-token "$dir/token"
check "CURVE: curve=on with the client keys loaded, token=group, http_token=yes" \
    "start_line | grep -q ' curve=on client_keys=2 token=group http_token=yes '"
stop

start --no-nccl --tokens "$dir/tokens" --log-format json
check "--tokens: token=per-group; in JSON too, the key count absent without CURVE" \
    "start_line | grep -q '\"curve\":\"off\",\"token\":\"per-group\",\"http_token\":\"no\"'"
stop

# Levels. Without keys rdzvd says so at warn ("open"); start is info.
start --no-nccl --log-level warn
check "--log-level warn: info lines (start) vanish, warn lines (open) stay" \
    "[ -s $dir/ep ] && ! grep -q ' start ' $dir/log && grep -q ' open NO CURVE KEYS' $dir/log"
stop

good="RDZV_CURVE_SERVER_PUBLIC=$dir/server RDZV_CURVE_SECRET=$dir/clients/a_secret"
start --no-nccl --curve-secret "$dir/server_secret" --clients "$dir/clients"
env $good RDZV_SERVER="$(cat "$dir/ep")" "$RDZV" status --timeout 5 >/dev/null
check "--log-level info (the default): a client let in writes no debug line" \
    "[ $? = 0 ] && grep -q ' start ' $dir/log && ! grep -q ' auth ' $dir/log"
stop
start --no-nccl --curve-secret "$dir/server_secret" --clients "$dir/clients" --log-level debug
env $good RDZV_SERVER="$(cat "$dir/ep")" "$RDZV" status --timeout 5 >/dev/null
check "--log-level debug: each client let in, with its key's file" \
    "[ $? = 0 ] && grep -q ' auth key=.* from=127.0.0.1 allowed file=a\$' $dir/log"
stop

"$RDZVD" --state-dir "$dir/state" --log-level verbose 2>"$dir/err"
check "an unknown --log-level: exit 2, naming the levels" \
    "[ $? = 2 ] && grep -q -- '--log-level must be error, warn, info or debug, not \"verbose\"' $dir/err"
"$RDZVD" --help | grep -q -- '--log-level LEVEL'
check "--help lists --log-level" "[ $? = 0 ]"

echo "1..$n"
[ $failed = 0 ]
