#!/bin/sh
# The rdzv command line: usage errors exit 2 and name the flag to fix; the
# assignment is printed or handed to a command; exit codes 3 and 4.
# Usage: cli_test.sh RDZV FAKE_RDZVD  (TAP on stdout)
RDZV=$1
FAKE=$2
EP="ipc:///tmp/rdzv-cli-test-$$"
OUT=$(mktemp)
ERR=$(mktemp)
n=0
failed=0

"$FAKE" "$EP" &
fake_pid=$!
trap 'kill "$fake_pid" 2>/dev/null; rm -f "$OUT" "$ERR" "/tmp/rdzv-cli-test-$$"' EXIT
unset RDZV_SERVER RDZV_GROUP RDZV_WORLD RDZV_RANK RDZV_HOST RDZV_NODE RDZV_EPOCH

ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=1; echo "not ok $n - $1"; sed 's/^/# /' "$ERR"; }

# expect CODE DESCRIPTION CMD...: runs CMD, checks its exit status.
expect() {
    want=$1; what=$2; shift 2
    "$@" >"$OUT" 2>"$ERR"
    got=$?
    if [ "$got" -eq "$want" ]; then ok "$what"; else echo "# exit $got, want $want"; not_ok "$what"; fi
}
# timed LIMIT CODE DESCRIPTION CMD...: expect, and CMD ends within LIMIT
# seconds.
timed() {
    limit=$1; what=$3; shift
    t0=$(date +%s%N)
    expect "$@"
    ms=$((($(date +%s%N) - t0) / 1000000))
    if [ "$ms" -le $((limit * 1000)) ]; then ok "$what: within $limit s"
    else echo "# took $ms ms"; not_ok "$what: within $limit s"; fi
}
# has FILE TEXT DESCRIPTION: the last command's output contains TEXT.
has() {
    if grep -qF -- "$2" "$1"; then ok "$3"; else echo "# missing: $2"; cat "$1" | sed 's/^/# /'; not_ok "$3"; fi
}

J="join --server $EP --group g"
expect 2 "no command" "$RDZV"
expect 2 "unknown command" "$RDZV" frobnicate
expect 0 "--version" "$RDZV" --version
has "$OUT" "rdzv 0.2.0" "--version prints the version"
for c in join status kv group; do expect 0 "$c --help" "$RDZV" $c --help; done
expect 0 "top-level --help" "$RDZV" --help
expect 2 "join unknown flag" "$RDZV" $J --world 2 --rank 0 --bogus
has "$ERR" "unknown option '--bogus'" "unknown flag is named"
expect 2 "join without --world" "$RDZV" $J --rank 0
has "$ERR" "rdzv join: --world (or RDZV_WORLD) is required" "missing --world is named"
expect 2 "join without --rank" "$RDZV" $J --world 2
has "$ERR" "--rank (or RDZV_RANK) is required" "missing --rank is named"
expect 2 "join without --group" "$RDZV" join --server "$EP" --world 2 --rank 0
expect 2 "join non-numeric world" "$RDZV" $J --world abc --rank 0
has "$ERR" "--world (or RDZV_WORLD)" "bad world is named"
expect 2 "join rank outside world" "$RDZV" $J --world 2 --rank 2
expect 2 "join negative rank" "$RDZV" $J --world 2 --rank -1
expect 2 "join bad --format" "$RDZV" $J --world 2 --rank 0 --format xml
expect 2 "join bad --nccl-id" "$RDZV" $J --world 2 --rank 0 --nccl-id maybe
expect 2 "join bad --timeout" "$RDZV" $J --world 2 --rank 0 --timeout -1
expect 2 "join flag without value" "$RDZV" join --group
expect 2 "join bad endpoint" "$RDZV" join --server bogus://x --group g --world 2 --rank 0
expect 2 "a server list with a bad element" "$RDZV" status --server "$EP,bogus:x"
has "$ERR" "bad endpoint 'bogus:x' in place 2 of the server list" "the bad element is named"
expect 2 "a server list with an empty element" env RDZV_SERVER="$EP," "$RDZV" status
has "$ERR" "--server (or RDZV_SERVER): empty endpoint in place 2" "the empty element is named"
for c in join status kv group; do
    "$RDZV" $c --help >"$OUT" 2>&1
    has "$OUT" "--server EP[,EP...]" "$c --help says --server takes a list"
done
expect 2 "env RDZV_WORLD non-numeric" env RDZV_WORLD=abc "$RDZV" $J --rank 0
has "$ERR" "RDZV_WORLD" "bad RDZV_WORLD is named"
expect 2 "status extra argument" "$RDZV" status --server "$EP" extra
expect 2 "kv without verb" "$RDZV" kv
expect 2 "kv unknown verb" "$RDZV" kv frob
expect 2 "kv put without value" "$RDZV" kv put --server "$EP" --group g --epoch 1 k
expect 2 "kv get without epoch" "$RDZV" kv get --server "$EP" --group g k
has "$ERR" "--epoch (or RDZV_EPOCH) is required" "missing epoch is named"
expect 2 "kv get bad epoch" "$RDZV" kv get --server "$EP" --group g --epoch x k
expect 2 "group without subcommand" "$RDZV" group
expect 2 "group delete without group" "$RDZV" group delete --server "$EP"
expect 2 "agent not built or bad usage" "$RDZV" agent --no-such-flag
A="agent --server $EP --group g --rank 0 --socket /tmp/rdzv-cli-test-$$.sock"
expect 2 "agent bad --world" "$RDZV" $A --world x
has "$ERR" "--world (or RDZV_WORLD) must be an integer in 1..2147483647, not 'x'" \
    "agent names the option, its variable and the range"
expect 2 "agent bad RDZV_RESERVE_WAIT" env RDZV_RESERVE_WAIT=-1 "$RDZV" $A --world 1
has "$ERR" "--reserve-wait (or RDZV_RESERVE_WAIT) must be an integer in 0..3600, not '-1'" \
    "an option's variable is named the same way"
expect 2 "agent bad --port-range" "$RDZV" $A --world 1 --port-range 9-3
has "$ERR" "--port-range (or RDZV_PORT_RANGE) must be BASE-LIMIT" "port range named"
expect 1 "agent socket in a missing directory" "$RDZV" agent --server "$EP" --group g \
    --world 1 --rank 0 --socket /nonexistent-dir/agent.sock
has "$ERR" "directory /nonexistent-dir does not exist" "the directory is checked before joining"

expect 0 "join json" "$RDZV" $J --world 2 --rank 1 --host 10.0.0.7 --node n1
has "$OUT" '"rank":1' "json has the rank"
has "$OUT" '"master_addr":"10.0.0.7"' "json has the master"
[ "$(wc -l <"$OUT")" -eq 1 ] && ok "json is one line" || not_ok "json is one line"
expect 0 "join env" "$RDZV" $J --world 2 --rank 1 --format env
for line in RDZV_GROUP=g RDZV_EPOCH=1 RDZV_RANK=1 RDZV_WORLD=2 RDZV_MASTER_ADDR=127.0.0.1 \
        RDZV_MASTER_PORT=20000 RDZV_PORTS=20004,20005,20006,20007 "RDZV_NCCL_UNIQUE_ID=" \
        RDZV_PORT_STORE=20000 RDZV_PORT_DP_RPC=20001 RDZV_PORT_PROBE=20006-20007 \
        MASTER_ADDR=127.0.0.1 MASTER_PORT=20000 RANK=1 WORLD_SIZE=2 VLLM_PORT=20006 \
        LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 GROUP_WORLD_SIZE=1 \
        VLLM_DP_RANK=1 VLLM_DP_SIZE=2 VLLM_DP_MASTER_IP=127.0.0.1 VLLM_DP_MASTER_PORT=20000 \
        VLLM_DP_RANK_LOCAL=1 VLLM_DP_SIZE_LOCAL=2 \
        "RDZV_VLLM_ARGS='--data-parallel-size 2 --data-parallel-rank 1 --data-parallel-address 127.0.0.1 --data-parallel-rpc-port 20001'"; do
    if grep -qx -- "$line" "$OUT"; then ok "env line $line"; else not_ok "env line $line"; fi
done
expect 0 "join export" "$RDZV" $J --world 2 --rank 1 --format export
has "$OUT" "export VLLM_PORT='20006'" "export lines are quoted"
(eval "$(cat "$OUT")" && [ "$RDZV_PORT_DP_RPC/$VLLM_DP_SIZE_LOCAL" = 20001/2 ] &&
    [ "$RDZV_VLLM_ARGS" = "--data-parallel-size 2 --data-parallel-rank 1 --data-parallel-address 127.0.0.1 --data-parallel-rpc-port 20001" ]) &&
    ok "eval of the export lines sets the variables" ||
    not_ok "eval of the export lines sets the variables"
expect 0 "join vllm-args" "$RDZV" $J --world 2 --rank 1 --format vllm-args
[ "$(cat "$OUT")" = "--data-parallel-size 2 --data-parallel-rank 1 --data-parallel-address 127.0.0.1 --data-parallel-rpc-port 20001" ] &&
    ok "vllm-args is the one line of flags" || not_ok "vllm-args is the one line of flags: $(cat "$OUT")"
expect 2 "join with an unknown format" "$RDZV" $J --world 2 --rank 1 --format yaml
has "$ERR" "json, env, export or vllm-args" "the format error lists the formats"
expect 0 "join from the environment" env RDZV_SERVER="$EP" RDZV_GROUP=g RDZV_WORLD=abc \
    RDZV_RANK=0 RDZV_HOST=10.9.9.9 "$RDZV" join --world 3 --host 10.1.1.1 --format env
has "$OUT" "WORLD_SIZE=3" "--world wins over RDZV_WORLD"
has "$OUT" "MASTER_ADDR=10.1.1.1" "--host wins over RDZV_HOST"
expect 0 "join runs a command" "$RDZV" $J --world 2 --rank 1 -- sh -c 'echo "$RANK/$WORLD_SIZE/$VLLM_PORT/$RDZV_VLLM_ARGS"'
has "$OUT" "1/2/20006/--data-parallel-size 2 --data-parallel-rank 1 " "the command sees the assignment, unquoted"
expect 7 "join passes the command's status" "$RDZV" $J --world 2 --rank 1 sh -c 'exit 7'
expect 127 "join with a missing command" "$RDZV" $J --world 2 --rank 1 -- /nonexistent/cmd
expect 4 "join refused" "$RDZV" join --server "$EP" --group refuse --world 2 --rank 0
has "$ERR" "rdzv: world_mismatch: group refuse has world 4, not 2" "refusal printed"
expect 3 "join timeout" "$RDZV" join --server "$EP" --group silent --world 2 --rank 0 --timeout 0.3
expect 0 "status --json" "$RDZV" status --server "$EP" --json
has "$OUT" '{"groups":[]}' "status --json prints the groups"
expect 0 "status" "$RDZV" status --server "$EP"
has "$OUT" 'GROUP' "status prints a table"
expect 0 "kv put" "$RDZV" kv put --server "$EP" --group g --epoch 1 k v
expect 0 "kv get" env RDZV_EPOCH=1 "$RDZV" kv get --server "$EP" --group g k
has "$OUT" "the value" "kv get prints the value"
expect 0 "kv wait" "$RDZV" kv wait --server "$EP" --group g --epoch 1 k --timeout 1
expect 4 "kv get missing" "$RDZV" kv get --server "$EP" --group g --epoch 1 missing
expect 3 "kv wait timeout" "$RDZV" kv wait --server "$EP" --group silent --epoch 1 k --timeout 0.1
expect 0 "group delete" "$RDZV" group delete --server "$EP" --group g

# A server that answers what no rdzvd sends: the reply is called malformed
# and said why, never "no reply" (rdzvd down, wrong address...). The
# timeouts only bound how long a client that waits on instead takes.
for case in "garbage:not JSON" "array:a JSON array" "multipart:a multipart message" \
    "wrongid:\"id\" 1001, but the request's is 1" \
    "v2:unsupported protocol version 2 (librdzv speaks 1)"; do
    g=${case%%:*}; why=${case#*:}
    expect 1 "status from a server answering $g" "$RDZV" status --server "$EP" --group "$g" --timeout 5
    has "$ERR" "rdzv status: malformed reply from $EP: $why" "$g: called malformed, and why"
done
expect 1 "join from a server answering garbage" "$RDZV" join --server "$EP" --group garbage \
    --world 1 --rank 0 --timeout 5
has "$ERR" "malformed reply from $EP: not JSON" "join: called malformed, not 'no reply'"
expect 1 "kv get of a value holding \\u0000" "$RDZV" kv get --server "$EP" --group g --epoch 1 nul
has "$ERR" 'a string holds \u0000 (NUL), which librdzv cannot carry' "refused, not cut at the NUL"
if grep -qF "ab" "$OUT"; then not_ok "no part of the value printed"; else ok "no part of the value printed"; fi
expect 4 "a 500 KB error message" "$RDZV" status --server "$EP" --group huge
has "$ERR" "… (512000 bytes)" "the message is cut, with its length"
if [ "$(wc -c <"$ERR")" -lt 512 ]; then ok "under 512 bytes printed"; else not_ok "under 512 bytes printed"; fi

# Several servers, the first dead (nothing listens on port 1): the call
# moves on to the live one, and CMD gets the whole list. The timeouts only
# bound how long a client that never moves on takes to fail.
LIST="tcp://127.0.0.1:1,$EP"
expect 0 "status with a dead first server" "$RDZV" status --server "$LIST" --json --timeout 10
has "$OUT" '{"groups":[]}' "the live server answers"
expect 0 "join with a dead first server" env RDZV_SERVER="$LIST" "$RDZV" join --group g \
    --world 2 --rank 1 --timeout 10 -- sh -c 'echo "server=$RDZV_SERVER"'
has "$OUT" "server=$LIST" "the command's RDZV_SERVER is the whole list"
expect 0 "join --format env with a list" "$RDZV" join --server "$LIST" --group g --world 2 \
    --rank 1 --timeout 10 --format env
has "$OUT" "RDZV_SERVER=$LIST" "the env lines hold the whole list"
# Rank 5: its plan (20020..20023) is clear of the ports the lease tests bind.
if [ -n "${RDZV_SANITIZED:-}" ]; then
    # The agent preloads the shim into its command; a sanitized shim in an
    # unsanitized sh aborts (ASan's runtime must come first).
    ok "agent with a dead first server # SKIP sanitized shim"
    ok "the agent's command gets the whole list # SKIP sanitized shim"
else
    expect 0 "agent with a dead first server" "$RDZV" agent --server "$LIST" --group g --world 6 \
        --rank 5 --timeout 10 --socket "/tmp/rdzv-cli-test-$$.sock" -- sh -c 'echo "server=$RDZV_SERVER"'
    has "$OUT" "server=$LIST" "the agent's command gets the whole list"
fi

# A server name that does not resolve: each command retries it until its
# --timeout, then exits 3 naming the name and getaddrinfo's reason (the
# agent through librdzv's join). Limits: the timeout and 2 s.
NX=tcp://no-such-host.invalid:29400
DNS="cannot resolve server host 'no-such-host.invalid' (DNS: "
NXSOCK=/tmp/rdzv-cli-test-$$-nx.sock
timed 4 3 "join with an unresolvable server" "$RDZV" join --server "$NX" --group g --world 1 \
    --rank 0 --timeout 2
has "$ERR" "rdzv join: timed out: $DNS" "join names the DNS failure"
has "$ERR" "; timeout 2 s" "join says its timeout"
timed 4 3 "status with an unresolvable server" "$RDZV" status --server "$NX" --timeout 2
has "$ERR" "rdzv status: timed out: $DNS" "status names the DNS failure"
timed 4 3 "agent with an unresolvable server" timeout 20 "$RDZV" agent --server "$NX" --group g \
    --world 1 --rank 0 --timeout 2 --socket "$NXSOCK"
has "$ERR" "$DNS" "agent names the DNS failure"
rm -f "$NXSOCK" "$NXSOCK".*
# Nothing answers: join ends about a second after --timeout (rdzvd's own
# timeout reply would have come by then), not later because a progress
# line was asking rdzvd when the join gave up.
timed 6 3 "join with nothing listening, --timeout 4" "$RDZV" join --server tcp://127.0.0.1:1 \
    --group g --world 1 --rank 0 --timeout 4
has "$ERR" "no reply from tcp://127.0.0.1:1 (no CURVE keys are set (RDZV_CURVE_SERVER_PUBLIC) and rdzvd may require them; or rdzvd down" "join says nothing answered, and what to check"

# tcp://HOST without a port is HOST, port 29400, as HOST alone is.
expect 3 "tcp://HOST means port 29400" "$RDZV" status --server tcp://127.0.0.1 --timeout 0.3
has "$ERR" "no reply from tcp://127.0.0.1:29400 (no CURVE keys are set" "the port is 29400, and the causes are named"
expect 2 "tcp://HOST: is refused" "$RDZV" status --server tcp://127.0.0.1: --timeout 0.3
has "$ERR" "bad endpoint 'tcp://127.0.0.1:': want tcp://HOST:PORT" "the bad endpoint is named"

# Every variable the Kubernetes example gives a rank's rdzv, and its flag,
# is in join --help; RDZV_AGENT_SOCKET is the engine's (librdzv_shim(7)).
# Of the flags it passes, --socket and --allow-uid are the agent's own.
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
"$RDZV" join --help >"$OUT" 2>&1
for var in $(grep -ho 'name: RDZV_[A-Z_]*' "$ROOT"/examples/kubernetes/*/ranks.yaml | sort -u \
        | sed 's/name: //'); do
    [ "$var" = RDZV_AGENT_SOCKET ] && continue
    flag=--$(echo "${var#RDZV_}" | tr 'A-Z_' 'a-z-')
    has "$OUT" "($var" "join --help names $var"
    has "$OUT" "  $flag " "join --help lists $flag"
done
for flag in $(grep -ho '^ *- --[a-z-]*' "$ROOT"/examples/kubernetes/*/ranks.yaml | sort -u \
        | sed 's/.*- //'); do
    case $flag in --socket|--allow-uid) continue ;; esac
    has "$OUT" "  $flag " "join --help lists $flag"
done
for c in join status kv group; do
    "$RDZV" $c --help >"$OUT" 2>&1
    for v in RDZV_SERVER RDZV_GROUP RDZV_CURVE_SERVER_PUBLIC RDZV_CURVE_SECRET RDZV_GROUP_TOKEN \
            "default 10"; do
        [ "$c/$v" = "join/default 10" ] && v="default 60"
        has "$OUT" "$v" "$c --help: $v"
    done
done

# The manuals name every variable their code reads: librdzv_shim(7) each
# one shim/ reads, rdzv(1) each one the CLI and librdzv read (but
# RDZV_HEARTBEAT, rdzv_heartbeat_start's default, which rdzv(1) names as
# the agent's).
vars_of() {
    for v in $(cat "$@" | grep -o 'getenv([A-Z_"]*)\|cli_value([^,]*, *"[A-Z_]*"' \
            | grep -o '"[A-Z_]*"\|RDZV_[A-Z_]*_ENV' | tr -d '"' | sort -u); do
        case $v in
            *_ENV) grep -ho "define $v *\"[A-Z_]*\"" "$ROOT"/common/*.h | grep -o 'RDZV_[A-Z_]*"' \
                | tr -d '"' ;;
            *) echo "$v" ;;
        esac
    done
}
for v in $(vars_of "$ROOT"/shim/*.c); do
    has "$ROOT/docs/man/librdzv_shim.7.scd" "*$v*" "librdzv_shim(7) names $v"
done
for v in $(vars_of "$ROOT"/client/*.c); do
    [ "$v" = RDZV_HEARTBEAT ] && continue
    has "$ROOT/docs/man/rdzv.1.scd" "*$v*" "rdzv(1) names $v"
done

echo "1..$n"
exit $failed
