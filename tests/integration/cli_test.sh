#!/bin/sh
# The rdzv CLI against a real rdzvd: output formats, exec, env fallbacks,
# status, kv, group delete and every exit code. TAP output.
set -u
RDZVD=$1
RDZV=$2
dir=$(mktemp -d /tmp/rdzv-cli-XXXXXX)
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; }
check() { if eval "$2"; then ok "$1"; else not_ok "$1"; fi; }
cleanup() {
    [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT

"$RDZVD" --bind 'tcp://127.0.0.1:*' --state-dir "$dir/state" --endpoint-file "$dir/ep" \
    --port-limit 32000 --no-nccl 2>"$dir/rdzvd.log" &
pid=$!
i=0
while [ ! -s "$dir/ep" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
export RDZV_SERVER=$(cat "$dir/ep")

# Four ranks at once, JSON output, one node each.
for r in 0 1 2 3; do
    "$RDZV" join --group demo --world 4 --rank $r --node "pod-$r" --host 127.0.0.1 \
        >"$dir/r$r.json" 2>"$dir/r$r.err" &
    eval "j$r=\$!"
done
for r in 0 1 2 3; do eval "wait \$j$r"; echo $? >"$dir/r$r.rc"; done
for r in 0 1 2 3; do
    check "rank $r exits 0" "[ \"\$(cat $dir/r$r.rc)\" = 0 ]"
    check "rank $r got rank $r, epoch 1, ports from 19500" \
        "grep -q '\"rank\":$r,' $dir/r$r.json && grep -q '\"epoch\":1' $dir/r$r.json && grep -q '\"ports\":\[19500,19501' $dir/r$r.json"
done

# env format and the variables engines read; env fallbacks for the options.
RDZV_GROUP=envg RDZV_WORLD=1 RDZV_RANK=0 RDZV_NODE=n RDZV_HOST=127.0.0.1 \
    "$RDZV" join --format env >"$dir/env.out"
for v in RDZV_GROUP=envg RDZV_EPOCH=1 RDZV_RANK=0 RDZV_WORLD=1 RDZV_MASTER_ADDR=127.0.0.1 \
         RDZV_MASTER_PORT=19500 MASTER_ADDR=127.0.0.1 MASTER_PORT=19500 RANK=0 WORLD_SIZE=1 \
         VLLM_PORT=19510 VLLM_DP_RANK=0 VLLM_DP_SIZE=1 VLLM_DP_MASTER_IP=127.0.0.1 \
         VLLM_DP_MASTER_PORT=19500 RDZV_PORT_STORE=19500 RDZV_PORT_DP_RPC=19501 \
         RDZV_PORT_PROBE=19510-19531 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 GROUP_RANK=0; do
    check "env output has $v" "grep -qx '$v' $dir/env.out"
done
check "RDZV_PORTS is a comma list of 32" \
    "[ \$(grep '^RDZV_PORTS=' $dir/env.out | tr ',' '\n' | wc -l) = 32 ]"

# exec: the command runs with the assignment in its environment.
out=$("$RDZV" join --group envg --world 1 --rank 0 --node n --host 127.0.0.1 -- \
      sh -c 'echo "$RANK/$WORLD_SIZE/$VLLM_PORT"')
check "join -- CMD runs CMD with the env" "[ \"$out\" = 0/1/19510 ]"
"$RDZV" join --group envg --world 1 --rank 0 --node n --host 127.0.0.1 -- sh -c 'exit 7'
check "join -- CMD exits with CMD's status" "[ $? = 7 ]"

# --server reaches CMD: its own rdzv calls go to the same rdzvd.
env -u RDZV_SERVER "$RDZV" join --server "$RDZV_SERVER" --group kvsrv --world 1 --rank 0 \
    --node n --host 127.0.0.1 -- sh -c '"$0" kv put --timeout 2 k v && "$0" kv get --timeout 2 k' \
    "$RDZV" >"$dir/kvsrv.out" 2>"$dir/kvsrv.err"
check "join --server EP -- CMD: CMD's rdzv kv reaches EP" \
    "[ $? = 0 ] && [ \"\$(cat $dir/kvsrv.out)\" = v ]"
env -u RDZV_SERVER "$RDZV" join --server "$RDZV_SERVER" --group kvsrv2 --world 1 --rank 0 \
    --node n --host 127.0.0.1 --format env >"$dir/kvsrv.env"
check "env output has RDZV_SERVER" "grep -qx 'RDZV_SERVER=$RDZV_SERVER' $dir/kvsrv.env"

# Exit codes.
"$RDZV" join --group demo --world 4 2>"$dir/e2"
check "missing --rank exits 2" "[ $? = 2 ] && grep -q -- '--rank' $dir/e2"
"$RDZV" join --group demo --world four --rank 0 2>/dev/null
check "non-numeric --world exits 2" "[ $? = 2 ]"
"$RDZV" join --group demo --world 5 --rank 0 --node x 2>"$dir/e4"
check "world mismatch exits 4 naming the code" "[ $? = 4 ] && grep -q world_mismatch $dir/e4"
"$RDZV" join --group lonely --world 2 --rank 0 --timeout 1 2>"$dir/e3"
check "a group that never completes exits 3 with rdzvd's own timeout reply" \
    "[ $? = 3 ] && grep -q '1 of 2 ranks joined epoch 1, waiting for rank 1; timeout 1 s' $dir/e3"
"$RDZV" status --group lonely >"$dir/table"
check "status prints a table: the forming group, 1 of 2 joined, none serving, rank 1 missing" \
    "grep -Eq '^lonely +2 +1 +- +1 +[0-9]+s +forming +1\$' $dir/table"
check "status --group adds a line per rank: no endpoint before its plan, alive, serving unknown" \
    "grep -Eq '^ +0 +[^ ]+ +- +yes +- +- +[0-9]+s ago\$' $dir/table"

# A join that waits says so every 5 s, and why: the group's missing ranks,
# or that rdzvd does not answer (a port nobody serves). Both run at once.
"$RDZV" join --group slow --world 2 --rank 0 --timeout 6 >/dev/null 2>"$dir/slow" &
slow=$!
"$RDZV" join --server tcp://127.0.0.1:9 --group x --world 2 --rank 0 --timeout 6 \
    >/dev/null 2>"$dir/noreply" &
noreply=$!
"$RDZV" agent --group slowa --world 2 --rank 0 --socket "$dir/slowa.sock" --timeout 6 \
    2>"$dir/slowa" &
slowa=$!
wait $slow
slow_rc=$?
wait $noreply
wait $slowa
slowa_rc=$?
check "a waiting join says every 5 s which ranks it waits for" \
    "[ $slow_rc = 3 ] && grep -q 'still waiting after 5 s: group slow: 1 of 2 ranks joined epoch 1, waiting for rank 1; timeout 6 s' $dir/slow"
check "and that rdzvd does not answer, naming what to check, and when it asked" \
    "grep -q 'still waiting after 5 s: no reply from tcp://127.0.0.1:9 (no CURVE keys are set (RDZV_CURVE_SERVER_PUBLIC) and rdzvd may require them; or rdzvd down, wrong address, Service/NetworkPolicy); timeout 6 s' $dir/noreply \
     && grep -q 'timed out: no reply from tcp://127.0.0.1:9 (no CURVE keys are set' $dir/noreply"
check "so does a waiting agent, and it exits 3 with the missing rank" \
    "[ $slowa_rc = 3 ] && grep -q 'rdzv agent: still waiting after 5 s: group slowa: 1 of 2 ranks joined epoch 1, waiting for rank 1; timeout 6 s' $dir/slowa"
"$RDZV" join --server tcp://no-such-host.invalid:29400 --group x --world 2 --rank 0 \
    --timeout 2 2>"$dir/dns"
check "an unknown server name: looked up until the timeout, then exit 3 naming DNS" \
    "[ $? = 3 ] && grep -q \"timed out: cannot resolve server host 'no-such-host.invalid' (DNS: .*); timeout 2 s\" $dir/dns"

# Until rdzvd shows rank 0 of group $1 joined (5 s at most).
wait_rank0() {
    i=0
    until "$RDZV" status --json --group "$1" 2>/dev/null | grep -q '"joined":\[0\]' || [ $i -ge 250 ]; do
        sleep 0.02; i=$((i + 1))
    done
}

# A killed join does not block its restart: rank_taken is retried until
# --timeout (the dead session's join waits in rdzvd for its 2 s first;
# rank 1 comes 4 s after, lest it complete the group with the dead one).
"$RDZV" join --group rt2 --world 2 --rank 0 --node n --host 127.0.0.1 --timeout 2 \
    >/dev/null 2>&1 &
old=$!
wait_rank0 rt2
kill -9 $old; wait $old 2>/dev/null
"$RDZV" join --group rt2 --world 2 --rank 0 --node n --host 127.0.0.1 --timeout 10 \
    >"$dir/rt0.out" 2>"$dir/rt0.err" &
new=$!
sleep 4
"$RDZV" join --group rt2 --world 2 --rank 1 --node n --host 127.0.0.1 --timeout 10 >/dev/null
wait $new
check "a restarted join retries rank_taken, saying so, and joins" \
    "[ $? = 0 ] && grep -q rank_taken $dir/rt0.err && grep -q '\"rank\":0,' $dir/rt0.out"
"$RDZV" join --group rt3 --world 2 --rank 0 --node n --host 127.0.0.1 --timeout 3 \
    >/dev/null 2>&1 &
old=$!
wait_rank0 rt3
"$RDZV" join --group rt3 --world 2 --rank 0 --node n --host 127.0.0.1 --timeout 1 2>"$dir/rt3.err"
check "rank_taken past --timeout still exits 4" "[ $? = 4 ] && grep -q rank_taken $dir/rt3.err"
kill $old; wait $old 2>/dev/null

# status, kv, group delete.
"$RDZV" status --json --group demo >"$dir/status.json"
check "status lists the members with ports" \
    "grep -q '\"joined\":\[0,1,2,3\]' $dir/status.json && grep -q '\"ports\":\[19500,19531\]' $dir/status.json"
# A group joined just now: its ranks alive whatever the time the steps
# above took (a rank without heartbeats is dead after --dead-after 15 s).
for r in 0 1; do
    "$RDZV" join --group fresh --world 2 --rank $r --node "fresh-$r" --host 127.0.0.1 \
        >/dev/null 2>&1 &
    eval "f$r=\$!"
done
wait $f0; wait $f1
"$RDZV" status --group fresh >"$dir/fresh.table"
"$RDZV" status --json --group fresh >"$dir/fresh.json"
first=$(grep -o '"rank":0,"host":"127.0.0.1","node":"fresh-0","ports":\[[0-9]*' "$dir/fresh.json" \
        | grep -o '[0-9]*$')
check "status: the complete group, none of its 2 engines reported serving yet" \
    "grep -Eq '^fresh +2 +2 +0/2 +1 +[^ ]+ +complete +-\$' $dir/fresh.table"
check "status --group: rank 0 serves its API on its host and its plan's third port" \
    "[ -n '$first' ] && grep -Eq '^ +0 +fresh-0 +127.0.0.1:'\$(( ${first:-0} + 2 ))' +yes +- +- +[0-9]+s ago\$' $dir/fresh.table"
"$RDZV" kv put --group demo --epoch 1 answer 42
check "kv put exits 0" "[ $? = 0 ]"
check "kv get prints the value" "[ \"\$($RDZV kv get --group demo --epoch 1 answer)\" = 42 ]"
check "kv wait returns a present key" "[ \"\$($RDZV kv wait --group demo --epoch 1 answer --timeout 2)\" = 42 ]"
"$RDZV" kv get --group demo --epoch 1 nothing 2>/dev/null
check "kv get of a missing key exits 4" "[ $? = 4 ]"
"$RDZV" group delete --group demo
check "group delete exits 0" "[ $? = 0 ]"
"$RDZV" status --group demo 2>/dev/null
check "a deleted group is gone" "[ $? = 4 ]"
check "rdzvd is still running" "kill -0 $pid"

# After a CURVE key rotation that left this client's key out of rdzvd's
# --clients, rdzvd drops it without a word: every call's error names the
# keys first, the join's and a status's (an agent's heartbeat) alike.
mkdir -p "$dir/curve/clients"
"$RDZV" keygen "$dir/curve/server" >/dev/null
"$RDZV" keygen "$dir/curve/rotated" >/dev/null
"$RDZVD" --bind 'tcp://127.0.0.1:*' --state-dir "$dir/curve/state" \
    --endpoint-file "$dir/curve/ep" --port-limit 32000 --no-nccl \
    --curve-secret "$dir/curve/server_secret" --clients "$dir/curve/clients" \
    2>"$dir/curve/rdzvd.log" &
cpid=$!
i=0
while [ ! -s "$dir/curve/ep" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
keys="--curve-server-public $dir/curve/server --curve-secret $dir/curve/rotated_secret"
curve_why="no reply from $(cat "$dir/curve/ep") (RDZV_CURVE_SERVER_PUBLIC is not rdzvd's public key, or this client's key is not in rdzvd's --clients; or rdzvd down"
"$RDZV" join --server "$(cat "$dir/curve/ep")" $keys --group k --world 1 --rank 0 \
    --timeout 1 2>"$dir/curve/join"
check "a client key rdzvd does not know: join exits 3 naming the CURVE keys first" \
    "[ $? = 3 ] && grep -qF \"rdzv join: timed out: $curve_why\" $dir/curve/join"
"$RDZV" status --server "$(cat "$dir/curve/ep")" $keys --timeout 1 2>"$dir/curve/status"
check "... and so does a status, as a heartbeat, not only 'before the deadline'" \
    "[ $? = 3 ] && grep -qF \"$curve_why\" $dir/curve/status"
echo "not a certificate" >"$dir/curve/notes"
"$RDZV" join --server "$(cat "$dir/curve/ep")" --curve-server-public "$dir/curve/notes" \
    --curve-secret "$dir/curve/rotated_secret" --group k --world 1 --rank 0 \
    >"$dir/curve/bad.out" 2>"$dir/curve/bad.err"
check "a server certificate that does not parse: usage error naming it; czmq's parse error on stderr, stdout empty" \
    "[ $? = 2 ] && grep -qF 'cannot load the server certificate $dir/curve/notes' $dir/curve/bad.err && grep -q 'invalid syntax' $dir/curve/bad.err && [ ! -s $dir/curve/bad.out ]"
cp "$dir/curve/rotated" "$dir/curve/public-only"
"$RDZV" join --server "$(cat "$dir/curve/ep")" --curve-server-public "$dir/curve/server" \
    --curve-secret "$dir/curve/public-only" --group k --world 1 --rank 0 \
    >/dev/null 2>"$dir/curve/pub.err"
check "a public certificate alone as --curve-secret: usage error, it has no secret key" \
    "[ $? = 2 ] && grep -qF 'cannot load a secret key from $dir/curve/public-only: no curve/secret-key' $dir/curve/pub.err"
"$RDZV" status --server "$(cat "$dir/curve/ep")" --curve-server-public "$dir/curve/server" \
    --curve-secret "$dir/curve/rotated" --timeout 1 >/dev/null 2>"$dir/curve/pair.err"
check "--curve-secret naming the public half of a pair reads its _secret beside it (asked, unanswered: exit 3)" \
    "[ $? = 3 ] && grep -qF \"$curve_why\" $dir/curve/pair.err"
"$RDZV" status --server "$(cat "$dir/curve/ep")" --curve-server-public "$dir/curve/nosuch" \
    --curve-secret "$dir/curve/rotated_secret" --timeout 1 >/dev/null 2>"$dir/curve/nosuch.err"
check "a --curve-server-public that does not exist: usage error saying so" \
    "[ $? = 2 ] && grep -qF 'cannot load the server certificate $dir/curve/nosuch: No such file or directory' $dir/curve/nosuch.err"
"$RDZVD" --bind 'tcp://127.0.0.1:*' --state-dir "$dir/curve/state2" --no-nccl \
    --curve-secret "$dir/curve/public-only" --clients "$dir/curve/clients" \
    >/dev/null 2>"$dir/curve/rdzvd-public-only.err"
check "rdzvd --curve-secret of a public certificate alone: refuses to start, saying why" \
    "[ $? != 0 ] && grep -qF 'cannot load a secret key from $dir/curve/public-only (--curve-secret): no curve/secret-key' $dir/curve/rdzvd-public-only.err"
kill $cpid
wait $cpid 2>/dev/null

# A first join whose I/O error lasts (no source address routes to a
# broadcast address) ends at the agent's --timeout with exit 3 and the
# error, as rdzv join's timeout, instead of retrying for ever.
start=$(date +%s)
timeout 20 "$RDZV" agent --server tcp://255.255.255.255:9 --group io --world 1 --rank 0 \
    --timeout 2 --socket "$dir/io.sock" 2>"$dir/io"
io_rc=$?
took=$(( $(date +%s) - start ))
check "an agent's lasting I/O error ends within --timeout 2 + 3 s, exit 3, naming it" \
    "[ $io_rc = 3 ] && [ $took -le 5 ] && grep -q \"rdzv agent: timed out: no local address routes to '255.255.255.255'; pass a host; timeout 2 s\" $dir/io"

echo "1..$n"
[ $failed = 0 ]
