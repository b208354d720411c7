#!/bin/bash
# The seed's layout (docs/gpu.md), P Pods x G GPUs, N full starts with rdzv
# and the same N without it (negative control). Root, on a machine with P*G
# GPUs.
#
#   rdzvd in netns rdzv8-srv (10.78.0.1); Pod p in netns rdzv8-p<p>
#   (10.78.0.<p+2>), all on bridge rdzv8br; Pod p has GPUs p*G..p*G+G-1.
#   Per Pod one `rdzv agent` as sidecar (no CMD): group seed-<i>, world P
#   (one DP rank per Pod, as vLLM's external DP), RDZV_NCCL_IDS=1+P rdzvd-
#   made IDs per epoch: ID 0 the EP world (P*G ranks), ID 1+p Pod p's TP
#   group (G ranks). Once the agent's socket exists (= assignment in hand)
#   the Pod's G engine processes start under the shim with VLLM_PORT=19500
#   (examples/torch/seed_layout.py: DP TCPStore on the plan's DP master
#   port, TP store from vLLM's get_open_port, EP and TP ProcessGroupNCCL,
#   all-reduce/all-gather/reduce-scatter checked).
#   Every KILL_EVERY-th start: once all ranks are up, Pod k's engine is
#   SIGKILLed; its agent rejoins (new session), the group moves to a new
#   epoch with new IDs; the other Pods' engines see RDZV_EPOCH change in
#   their env file and re-initialise in process; Pod k's engine is started
#   again from the new assignment.
#   Control (bare): the same engines, no rdzvd, no agents, no shim, all Pods
#   in one namespace (rdzv8-shared), VLLM_PORT=19500 everywhere, DP master
#   127.0.0.1:19500; the kill starts bump DIR/epoch instead.
#
# Usage: tests/gpu/seed-layout.sh [BIN]
#   env: P (2) G (1) N (50) KILL_EVERY (5: 10 of 50) START_TIMEOUT (30)
#        BUDGET_RDZV / BUDGET_BARE (seconds; no new start after; 0 = none)
#        MODES ("rdzv bare")
# Writes seed.log, seed-results.jsonl, seed-logs.tar.gz under $OUT (or /tmp).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(cd "${1:-$ROOT/.device/gpu}" && pwd)
P=${P:-2} G=${G:-1} N=${N:-50} KILL_EVERY=${KILL_EVERY:-5}
START_TIMEOUT=${START_TIMEOUT:-30}
BUDGET_RDZV=${BUDGET_RDZV:-0} BUDGET_BARE=${BUDGET_BARE:-0}
MODES=${MODES:-rdzv bare}
OUTDIR=${OUT:-/tmp/rdzv-seed-out}
mkdir -p "$OUTDIR"
W=$(mktemp -d /tmp/rdzv-seed.XXXXXX)
exec > >(tee "$OUTDIR/seed.log") 2>&1

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Across network namespaces NCCL 2.28's cuMem handles (abstract unix
# sockets) do not reach: docs/gpu.md. RAS would bind 28028 inside the range.
export NCCL_CUMEM_ENABLE=0 NCCL_RAS_ENABLE=0
export PYTHONUNBUFFERED=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export LD_LIBRARY_PATH=$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ -d "$BIN/extra" ] && ldd "$BIN/rdzvd" | grep -q 'not found'; then
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$BIN/extra
fi
PY=$(command -v python3)
ENGINE=$ROOT/examples/torch/seed_layout.py
RESULTS=$OUTDIR/seed-results.jsonl
: >"$RESULTS"
T0=$(date +%s.%N)
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
say() { printf '[%ss] %s\n' "$(since "$T0")" "$*"; }
ipx() { "$BIN/ip" "$@"; }
NSS="rdzv8-srv rdzv8-shared"; for p in $(seq 0 $((P - 1))); do NSS="$NSS rdzv8-p$p"; done
RDZVD_PID=

cleanup() {
    [ -n "$RDZVD_PID" ] && kill "$RDZVD_PID" 2>/dev/null && wait "$RDZVD_PID" 2>/dev/null
    for ns in $NSS; do ipx netns del "$ns" 2>/dev/null; done
    ipx link del rdzv8br 2>/dev/null
    tar -C "$W" -czf "$OUTDIR/seed-logs.tar.gz" . 2>/dev/null
}
trap cleanup EXIT

# --- namespaces ---------------------------------------------------------
for ns in $NSS; do ipx netns del "$ns" 2>/dev/null; done
ipx link del rdzv8br 2>/dev/null
ipx link add rdzv8br type bridge && ipx link set rdzv8br up || { say "no bridge"; exit 1; }
i=1
for ns in rdzv8-srv $(for p in $(seq 0 $((P - 1))); do echo rdzv8-p$p; done) rdzv8-shared; do
    ipx netns add "$ns" || exit 1
    ipx link add "r8h$i" type veth peer name eth0 netns "$ns" || exit 1
    ipx link set "r8h$i" master rdzv8br up
    ipx -n "$ns" addr add "10.78.0.$i/24" dev eth0
    ipx -n "$ns" link set eth0 up; ipx -n "$ns" link set lo up
    i=$((i + 1))
done
say "namespaces: rdzv8-srv 10.78.0.1, Pods rdzv8-p0.. from 10.78.0.2, rdzv8-shared (control)"
pod_addr() { echo "10.78.0.$(($1 + 2))"; }
pod_gpus() { seq -s, $(($1 * G)) $(($1 * G + G - 1)); }

# --- rdzvd ----------------------------------------------------------------
"$BIN/ip" netns exec rdzv8-srv "$BIN/rdzvd" --bind tcp://10.78.0.1:29400 \
    --state-dir "$W/state" --endpoint-file "$W/endpoint" \
    --nccl-helper "$BIN/rdzv-nccl-root" --nccl-root-timeout 60 --insecure-bind-any \
    >"$W/rdzvd.log" 2>&1 &
RDZVD_PID=$!
for _ in $(seq 100); do [ -s "$W/endpoint" ] && break; sleep 0.1; done
[ -s "$W/endpoint" ] || { say "rdzvd did not start"; cat "$W/rdzvd.log"; exit 1; }
EP=tcp://10.78.0.1:29400
say "rdzvd up; P=$P G=$G N=$N kill every $KILL_EVERY; start timeout ${START_TIMEOUT}s"

# record START MODE KILLED STATUS T_ASSIGN_LIST START_S: one summary JSON line,
# with every engine's RESULT lines of this start attached.
record() {
    local i=$1 mode=$2 killed=$3 status=$4 assign=$5 secs=$6 d=$7
    "$PY" - "$i" "$mode" "$killed" "$status" "$assign" "$secs" "$d" >>"$RESULTS" <<'EOF'
import glob, json, sys
i, mode, killed, status, assign, secs, d = sys.argv[1:]
res = []
for f in sorted(glob.glob(d + "/e*.out")):
    for line in open(f, errors="replace"):
        if line.startswith("RESULT "):
            try: res.append(json.loads(line[7:]))
            except ValueError: pass
shim_ids = 0
for f in glob.glob(d + "/e*.err"):
    shim_ids += sum("the epoch's ID from RDZV_NCCL_UNIQUE_IDS" in l for l in open(f, errors="replace"))
print(json.dumps({"start": int(i), "mode": mode, "killed": killed == "1", "status": status,
                  "assign_s": [float(x) for x in assign.split()] if assign else [],
                  "wall_s": float(secs), "shim_ids": shim_ids, "ranks": res}))
EOF
}

# engine MODE POD LOCAL DIR RUN HOLD [ENVFILE SOCK]: starts one engine in the
# background, its pid in $EPID (python itself: ip netns exec and env exec).
engine() {
    local mode=$1 pod=$2 loc=$3 d=$4 run=$5 hold=$6 envf=${7:-} sock=${8:-} ns gpus
    gpus=$(pod_gpus "$pod")
    local tag="e$pod.$loc.$(date +%s%N)"
    if [ "$mode" = rdzv ]; then
        ns=rdzv8-p$pod
        "$BIN/ip" netns exec "$ns" env CUDA_VISIBLE_DEVICES="$gpus" VLLM_PORT=19500 \
            LD_PRELOAD="$BIN/librdzv_shim.so" RDZV_AGENT_SOCKET="$sock" \
            RDZV_SHIM_NCCL_VERBOSE=1 \
            "$PY" "$ENGINE" --mode rdzv --pods "$P" --gpus "$G" --pod "$pod" --local "$loc" \
            --addr "$(pod_addr "$pod")" --env-file "$envf" --run "$run" --hold "$hold" \
            >"$d/$tag.out" 2>"$d/$tag.err" &
    else
        "$BIN/ip" netns exec rdzv8-shared env CUDA_VISIBLE_DEVICES="$gpus" VLLM_PORT=19500 \
            "$PY" "$ENGINE" --mode bare --pods "$P" --gpus "$G" --pod "$pod" --local "$loc" \
            --dir "$d" --run "$run" --hold "$hold" \
            >"$d/$tag.out" 2>"$d/$tag.err" &
    fi
    EPID=$!
}

# wait_pids DEADLINE PID...: 0 all ended, 1 the deadline passed (all killed).
wait_pids() {
    local dl=$1 p alive; shift
    while :; do
        alive=0; for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && { for p in "$@"; do wait "$p" 2>/dev/null; done; return 0; }
        if awk -v a="$(now)" -v b="$dl" 'BEGIN { exit !(a > b) }'; then
            for p in "$@"; do kill -9 "$p" 2>/dev/null; done
            for p in "$@"; do wait "$p" 2>/dev/null; done
            return 1
        fi
        sleep 0.05
    done
}
count_results() { cat "$1"/e*.out 2>/dev/null | grep -c "^RESULT .*\"epoch\": $2," ; }
env_epoch() { sed -n 's/^RDZV_EPOCH=//p' "$1" 2>/dev/null; }

# one_start MODE I KILL
one_start() {
    local mode=$1 i=$2 kill=$3 d="$W/$1-$2" t ts dl p l status=ok assign="" agents=() \
        engines=() hold=0 victim=$(( ($2 / KILL_EVERY) % P )) epoch1
    local run=seed-$i; [ "$mode" = bare ] && run=bare-$i
    mkdir -p "$d"; echo 1 >"$d/epoch"
    [ "$kill" = 1 ] && hold=20
    t=$(now); dl=$(awk -v a="$t" -v s="$START_TIMEOUT" 'BEGIN { printf "%.3f", a + s }')
    if [ "$mode" = rdzv ]; then
        for p in $(seq 0 $((P - 1))); do
            "$BIN/ip" netns exec "rdzv8-p$p" env RDZV_NCCL_IDS=$((1 + P)) "$BIN/rdzv" agent \
                --server "$EP" --group "seed-$i" --world "$P" --rank "$p" --node "pod$p" \
                --host "$(pod_addr "$p")" --socket "$d/a$p.sock" --heartbeat 1 \
                --shim "$BIN/librdzv_shim.so" >"$d/agent$p.log" 2>&1 &
            agents+=($!)
        done
        # A Pod's engine starts once its agent's socket exists (assignment in hand).
        local started=()
        while [ ${#started[@]} -lt "$P" ]; do
            for p in $(seq 0 $((P - 1))); do
                [[ " ${started[*]} " == *" $p "* ]] && continue
                if [ -S "$d/a$p.sock" ]; then
                    started+=($p); assign="$assign $(since "$t")"
                    for l in $(seq 0 $((G - 1))); do
                        engine rdzv "$p" "$l" "$d" "$run" "$hold" "$d/a$p.sock.env" "$d/a$p.sock"
                        engines+=($EPID); eval "pods_$p=\"\${pods_$p:-} $EPID\""
                    done
                fi
            done
            awk -v a="$(now)" -v b="$dl" 'BEGIN { exit !(a > b) }' && { status=hang-join; break; }
            sleep 0.01
        done
    else
        for p in $(seq 0 $((P - 1))); do
            for l in $(seq 0 $((G - 1))); do
                engine bare "$p" "$l" "$d" "$run" "$hold"
                engines+=($EPID); eval "pods_$p=\"\${pods_$p:-} $EPID\""
            done
        done
    fi
    if [ "$status" = ok ] && [ "$kill" = 1 ]; then
        # Wait for every rank's first start, then kill the victim Pod's engine.
        while [ "$(cat "$d"/e*.out 2>/dev/null | grep -c '^RESULT ')" -lt $((P * G)) ]; do
            awk -v a="$(now)" -v b="$dl" 'BEGIN { exit !(a > b) }' && { status=hang; break; }
            sleep 0.05
        done
        if [ "$status" = ok ] && ! grep -q '"ok": false' "$d"/e*.out; then
            eval "kill -9 \${pods_$victim}"
            ts=$(now)
            if [ "$mode" = rdzv ]; then
                epoch1=$(env_epoch "$d/a$victim.sock.env")
                while [ "$(env_epoch "$d/a$victim.sock.env")" = "$epoch1" ] \
                      || [ -z "$(env_epoch "$d/a$victim.sock.env")" ]; do
                    awk -v a="$(now)" -v b="$dl" 'BEGIN { exit !(a > b) }' && { status=hang-epoch; break; }
                    sleep 0.02
                done
                echo "epoch $epoch1 -> $(env_epoch "$d/a$victim.sock.env") after $(since "$ts")s" >"$d/kill.txt"
            else
                echo 2 >"$d/epoch.tmp" && mv "$d/epoch.tmp" "$d/epoch"
                echo "epoch 1 -> 2 (bare: file)" >"$d/kill.txt"
            fi
            if [ "$status" = ok ]; then
                for l in $(seq 0 $((G - 1))); do
                    engine "$mode" "$victim" "$l" "$d" "$run" 0 \
                        "$d/a$victim.sock.env" "$d/a$victim.sock"
                    engines+=($EPID)
                done
            fi
        fi
    fi
    wait_pids "$dl" "${engines[@]}" || { [ "$status" = ok ] && status=hang; }
    for p in "${agents[@]}"; do kill "$p" 2>/dev/null; done
    wait_pids "$(awk -v a="$(now)" 'BEGIN { printf "%.3f", a + 3 }')" "${agents[@]}"
    for p in $(seq 0 $((P - 1))); do unset "pods_$p"; done
    if [ "$status" = ok ] && grep -q '"ok": false' "$d"/e*.out; then status=failed; fi
    if [ "$status" = ok ] && [ "$(cat "$d"/e*.out | grep -c '^RESULT ')" -lt $((P * G * (1 + kill))) ]; then
        status=missing
    fi
    record "$i" "$mode" "$kill" "$status" "${assign# }" "$(since "$t")" "$d"
    say "$mode start $i kill=$kill: $status ($(since "$t")s)"
}

for mode in $MODES; do
    budget=$BUDGET_RDZV; [ "$mode" = bare ] && budget=$BUDGET_BARE
    tm=$(now); ran=0
    for i in $(seq 0 $((N - 1))); do
        if [ "$budget" != 0 ] && awk -v a="$(since "$tm")" -v b="$budget" 'BEGIN { exit !(a > b) }'; then
            say "$mode: budget of ${budget}s spent after $ran starts"; break
        fi
        k=0; [ $(( (i + 1) % KILL_EVERY )) = 0 ] && k=1
        one_start "$mode" "$i" "$k"
        ran=$((i + 1))
    done
    say "$mode: $ran starts in $(since "$tm")s"
done

echo; echo "=== summary ==="
"$PY" - "$RESULTS" <<'EOF'
import json, statistics as st, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(xs): return "%.0f" % st.median(xs) if xs else "-"
def p90(xs): return "%.0f" % sorted(xs)[int(0.9 * (len(xs) - 1))] if xs else "-"
for mode in ("rdzv", "bare"):
    rs = [r for r in rows if r["mode"] == mode]
    if not rs: continue
    c = collections.Counter(r["status"] for r in rs)
    kinds = collections.Counter(x.get("kind") for r in rs for x in r["ranks"] if not x.get("ok"))
    ok = [x for r in rs for x in r["ranks"] if x.get("ok")]
    first = [x for x in ok if x.get("epoch") in (1,)]
    print(f"{mode}: {len(rs)} starts ({sum(r['killed'] for r in rs)} with a kill): {dict(c)}; failed ranks by kind: {dict(kinds)}")
    assign = [a * 1e3 for r in rs for a in r["assign_s"]]
    print(f"  join->assignment ms: median {med(assign)} p90 {p90(assign)} (n={len(assign)})")
    for k in ("import_ms", "dp_store_ms", "tp_store_ms", "ep_init_ms", "tp_init_ms", "collectives_ms", "start_ms"):
        xs = [x[k] for x in ok if k in x]
        print(f"  {k}: median {med(xs)} p90 {p90(xs)} max {max(xs) if xs else '-'} (n={len(xs)})")
    walls = [r["wall_s"] for r in rs if not r["killed"]]
    wk = [r["wall_s"] for r in rs if r["killed"]]
    print(f"  wall s per start: plain median {st.median(walls) if walls else '-'}; with kill median {st.median(wk) if wk else '-'}")
    re = [x["start_ms"] for r in rs if r["killed"] for x in r["ranks"] if x.get("ok") and x.get("epoch", 1) > 1]
    print(f"  re-init after kill (start_ms of epoch>1): median {med(re)} (n={len(re)})")
    if mode == "rdzv":
        print(f"  shim answered ncclGetUniqueId with an rdzvd ID: {sum(r['shim_ids'] for r in rs)} times")
    for r in rs:
        if r["status"] != "ok":
            errs = [(x.get('pod'), x.get('kind'), x.get('err', '')[:160]) for x in r["ranks"] if not x.get("ok")]
            print(f"  start {r['start']} kill={r['killed']} {r['status']}: {errs}")
EOF
say done
