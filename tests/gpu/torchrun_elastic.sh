#!/bin/bash
# torchrun --nnodes 2:3 with --rdzv-backend rdzv on the GPU machine
# (docs/gpu.md): nodes A and B start, their round closes at 2 after the
# last call; node C starts, A and B see it waiting and the next round
# closes at 3 at once; C is killed, A's and B's workers fail at their next
# all-reduce, and their next round closes at 2 again. Every round's workers
# complete a gloo all-reduce; A's and B's agents run throughout. Assembled
# by tests/gpu/torchrun-carry.sh.
# Needs torch >= 2.5 (the torchrun.handlers entry points).
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TRAIN_EVERY=1 TRAIN_SLEEP=600
PY=$(command -v python3)
"$PY" -c "import torch; print('torch', torch.__version__)"
T=$(mktemp -d)
# That machine has none of our Debian packages: lib/ and pylibs/ hold the
# carried copies of what apt would install (libczmq, libzmq, libcjson, ...),
# and LD_LIBRARY_PATH points only there, never at a build tree. On a Debian
# machine with rdzv installed, none of these variables is needed.
LD_LIBRARY_PATH=$D/lib "$D/bin/rdzvd" --bind tcp://127.0.0.1:29401 --state-dir "$T/state" --no-nccl \
    --port-base 23000 --port-limit 25000 >/dev/null 2>"$OUT/elastic-rdzvd.log" </dev/null &
srv=$!
sleep 1
export PYTHONPATH=$D/pylib RDZV_LIBRARY=$D/pylibs/librdzv.so.0 LD_LIBRARY_PATH=$D/pylibs
node() {   # node NAME LOG
    setsid "$PY" -m torch.distributed.run --rdzv-backend rdzv --rdzv-endpoint 127.0.0.1:29401 \
        --rdzv-id elastic --nnodes 2:3 --nproc-per-node 1 --monitor-interval 1 --max-restarts 5 \
        --rdzv-conf node=$1,last_call_timeout=3 "$D/torchrun_train.py" >"$2" 2>&1 </dev/null &
    echo $!
}
rounds() {  # rounds FILE WORLD: how many ROUND lines of that world
    grep -c "ROUND rank=[0-9]* world=$2 " "$1" 2>/dev/null
}
waitfor() {  # waitfor FILE WORLD COUNT SECONDS
    for i in $(seq "$4"); do [ "$(rounds "$1" "$2")" -ge "$3" ] && return 0; sleep 1; done; return 1
}
st() { LD_LIBRARY_PATH=$D/lib "$D/bin/rdzv" status --server tcp://127.0.0.1:29401; }
t0=$(date +%s)
a=$(node nodeA "$OUT/ea.log"); b=$(node nodeB "$OUT/eb.log")
waitfor "$OUT/ea.log" 2 1 120 && waitfor "$OUT/eb.log" 2 1 60
echo "ELASTIC round of 2: rc=$? after $(( $(date +%s) - t0 )) s"; st
t1=$(date +%s)
c=$(node nodeC "$OUT/ec.log")
waitfor "$OUT/ec.log" 3 1 120 && waitfor "$OUT/ea.log" 3 1 60 && waitfor "$OUT/eb.log" 3 1 60
echo "ELASTIC grown to 3: rc=$? after $(( $(date +%s) - t1 )) s"; st
t2=$(date +%s)
pkill -9 -P "$c"; kill -9 "$c"      # its worker too: it runs in a session of its own
waitfor "$OUT/ea.log" 2 2 120 && waitfor "$OUT/eb.log" 2 2 60
echo "ELASTIC shrunk to 2: rc=$? after $(( $(date +%s) - t2 )) s"; st
alive=0; kill -0 "$a" && kill -0 "$b" && alive=1
echo "ELASTIC agents A and B ran throughout: $alive"
kill -TERM -- -"$a" -"$b" 2>/dev/null; sleep 3; kill -9 -- -"$a" -"$b" 2>/dev/null
for f in ea eb ec; do echo "=== $f"; grep -E "START|ROUND|rdzv torchrun|Error|error|Traceback|restart|membership" "$OUT/$f.log" | head -30; done
kill "$srv"; wait "$srv" 2>/dev/null
echo "=== rdzvd"; grep -E "resize|assign|refuse" "$OUT/elastic-rdzvd.log" | tail -20
