#!/bin/sh
# examples/vllm/launch-rank.sh with a stand-in for vllm, against a real
# rdzvd on loopback: the join-only mode, the bare-metal agent mode (the
# agent runs the script again under the shim) and a missing agent.
# Usage: launch_rank_test.sh RDZVD RDZV. TAP.
set -u
rdzvd=$1
export RDZV="$2"
script=$(cd "$(dirname "$0")/../../examples/vllm" && pwd)/launch-rank.sh
tmp=$(mktemp -d /tmp/rdzv-launch-XXXXXX)
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
n=0
failed=0
result() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else failed=$((failed + 1)); echo "not ok $n - $2"; sed 's/^/# /' "$tmp/out" 2>/dev/null | tail -8; fi; }

cat >"$tmp/vllm" <<'VLLM'
#!/bin/sh
{ echo "ARGS $*"; echo "LD_PRELOAD=${LD_PRELOAD:-}"; echo "SOCKET=${RDZV_AGENT_SOCKET:-}"; echo "VLLM_PORT=$VLLM_PORT"; echo "MASTER_PORT=$RDZV_MASTER_PORT"; } >"$VLLM_OUT"
VLLM
chmod +x "$tmp/vllm"
export VLLM="$tmp/vllm" RDZV_WAIT=20 XDG_RUNTIME_DIR="$tmp"

echo "1..5"
"$rdzvd" --bind 'tcp://127.0.0.1:*' --endpoint-file "$tmp/ep" --state-dir "$tmp/state" \
    --no-nccl --port-base 28700 --port-limit 28800 2>"$tmp/rdzvd.log" &
pid=$!
i=0
while [ ! -s "$tmp/ep" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
export RDZV_SERVER="$(cat "$tmp/ep")" RDZV_WORLD=1 RDZV_RANK=0

VLLM_OUT=$tmp/join.out RDZV_GROUP=join RDZV_NO_AGENT=1 "$script" my/model --max-model-len 64 >"$tmp/out" 2>&1
master=$(sed -n 's/^MASTER_PORT=//p' "$tmp/join.out")
grep -q "^ARGS serve my/model --enable-expert-parallel --data-parallel-size 1 --data-parallel-rank 0 --data-parallel-address [^ ]* --data-parallel-rpc-port $((master + 1)) --port $((master + 2)) --tensor-parallel-size 2 --max-model-len 64\$" "$tmp/join.out" 2>/dev/null
result $? "join-only: vllm serve gets the assignment, the planned RPC port and its API port"
grep -q "^VLLM_PORT=$((master + 10))\$" "$tmp/join.out" 2>/dev/null
result $? "join-only: VLLM_PORT the probe pool's first port, after the named ones"

VLLM_OUT=$tmp/agent.out RDZV_GROUP=agent TP=4 EP=0 "$script" my/model >"$tmp/out" 2>&1
grep -q "^ARGS serve my/model --data-parallel-size 1 --data-parallel-rank 0 .* --tensor-parallel-size 4\$" "$tmp/agent.out" 2>/dev/null
result $? "agent mode: TP and EP settings reach vllm serve"
grep -q "^LD_PRELOAD=.*librdzv_shim.so" "$tmp/agent.out" 2>/dev/null &&
    grep -q "^SOCKET=$tmp/rdzv-agent-0.sock\$" "$tmp/agent.out"
result $? "agent mode: vllm runs under the shim with the agent's socket"

RDZV_AGENT_SOCKET=$tmp/none.sock RDZV_WAIT=1 VLLM_OUT=$tmp/none.out "$script" m >"$tmp/out" 2>&1
rc=$?
[ $rc != 0 ] && grep -q "RDZV_AGENT_SOCKET" "$tmp/out" && [ ! -e "$tmp/none.out" ]
result $? "no agent: fails naming RDZV_AGENT_SOCKET, vllm not started"
exit $((failed > 0))
