#!/bin/bash
# torchrun with --rdzv-backend rdzv on the GPU machine (docs/gpu.md): two
# nodes (two torchrun agents, one worker each) on this machine, a gloo
# all-reduce; then node B is killed and started again: a new epoch, and
# torchrun restarts node A's worker. Assembled by tests/gpu/torchrun-carry.sh.
# Needs torch >= 2.5 (the torchrun.handlers entry points).
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
PY=$(command -v python3)
"$PY" -c "import torch; print('torch', torch.__version__)"
T=$(mktemp -d)
LD_LIBRARY_PATH=$D/lib "$D/bin/rdzvd" --bind tcp://127.0.0.1:29400 --state-dir "$T/state" --no-nccl \
    --port-base 21000 --port-limit 23000 >/dev/null 2>"$OUT/rdzvd.log" </dev/null &
srv=$!
sleep 1
export PYTHONPATH=$D/pylib RDZV_LIBRARY=$D/pylibs/librdzv.so.0 LD_LIBRARY_PATH=$D/pylibs
"$PY" -c "import importlib.metadata as m; print([e for e in m.entry_points(group='torchrun.handlers')])"
node() {   # node NAME LOG
    setsid "$PY" -m torch.distributed.run --rdzv-backend rdzv --rdzv-endpoint 127.0.0.1:29400 \
        --rdzv-id job --nnodes 2 --nproc-per-node 1 --monitor-interval 1 --max-restarts 3 \
        --rdzv-conf node=$1 "$D/torchrun_train.py" >"$2" 2>&1 </dev/null &
    echo $!
}
waitfor() {  # waitfor FILE COUNT SECONDS
    for i in $(seq "$3"); do [ "$(grep -c '^ROUND\|\]:ROUND' "$1" 2>/dev/null)" -ge "$2" ] && return 0; sleep 1; done; return 1
}
t0=$(date +%s)
a=$(node nodeA "$OUT/a.log"); b=$(node nodeB "$OUT/b1.log")
waitfor "$OUT/a.log" 1 120 && waitfor "$OUT/b1.log" 1 60; echo "round 1 rc=$? after $(( $(date +%s) - t0 )) s"
LD_LIBRARY_PATH=$D/lib "$D/bin/rdzv" status --server tcp://127.0.0.1:29400
pkill -9 -P "$b"; kill -9 "$b"; sleep 1      # its worker too: it runs in a session of its own
t1=$(date +%s)
b=$(node nodeB "$OUT/b2.log")
waitfor "$OUT/b2.log" 1 120 && waitfor "$OUT/a.log" 2 60; echo "round 2 rc=$? after $(( $(date +%s) - t1 )) s"
LD_LIBRARY_PATH=$D/lib "$D/bin/rdzv" status --server tcp://127.0.0.1:29400
kill -TERM -- -"$a" -"$b" 2>/dev/null; sleep 3; kill -9 -- -"$a" -"$b" 2>/dev/null
for f in a b1 b2; do echo "=== $f"; grep -E "START|ROUND|rdzv torchrun|Error|error|Traceback|restart" "$OUT/$f.log" | head -30; done
kill "$srv"; wait "$srv" 2>/dev/null
echo "=== rdzvd"; tail -20 "$OUT/rdzvd.log"
