#!/bin/sh
# The main job on one machine: rdzvd plus four ranks on loopback, each rank
# in its own "Pod" (node), printing what each rank got.
set -eu
build=${1:-build}
state=$(mktemp -d /tmp/rdzv-demo-XXXXXX)
cleanup() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$state"; }
trap cleanup EXIT INT TERM

"$build/rendezvous/rdzvd" --bind 'tcp://127.0.0.1:*' --state-dir "$state" \
    --endpoint-file "$state/endpoint" 2>"$state/rdzvd.log" &
server=$!
while [ ! -s "$state/endpoint" ]; do sleep 0.05; done
export RDZV_SERVER=$(cat "$state/endpoint")
echo "rdzvd serving on $RDZV_SERVER (state in $state)"

joins=""
for rank in 0 1 2 3; do
    "$build/client/rdzv" join --group demo --world 4 --rank $rank --node "pod-$rank" \
        --host 127.0.0.1 --timeout 30 --format env >"$state/rank$rank.env" &
    joins="$joins $!"
done
for pid in $joins; do
    wait "$pid" || { echo "a rank failed; rdzvd log:" >&2; cat "$state/rdzvd.log" >&2; exit 1; }
done

for rank in 0 1 2 3; do
    . "$state/rank$rank.env"
    ports=$(echo "$RDZV_PORTS" | awk -F, '{print $1 ".." $NF}')
    id=${RDZV_NCCL_UNIQUE_ID:-none}
    printf 'rank %s of %s  epoch %s  master %s:%s  ports %s  VLLM_PORT=%s  nccl id %.16s...\n' \
        "$RDZV_RANK" "$RDZV_WORLD" "$RDZV_EPOCH" "$RDZV_MASTER_ADDR" "$RDZV_MASTER_PORT" \
        "$ports" "$VLLM_PORT" "$id"
    printf '    store %s  dp_rpc %s  api %s  probe %s  LOCAL_RANK %s of %s  GROUP_RANK %s of %s\n' \
        "$RDZV_PORT_STORE" "$RDZV_PORT_DP_RPC" "$RDZV_PORT_API" "$RDZV_PORT_PROBE" "$LOCAL_RANK" \
        "$LOCAL_WORLD_SIZE" "$GROUP_RANK" "$GROUP_WORLD_SIZE"
    printf '    vllm serve MODEL %s\n' "$RDZV_VLLM_ARGS"
done
echo
echo "rdzv status:"
"$build/client/rdzv" status --group demo
echo
echo "rdzvd log:"
cat "$state/rdzvd.log"
