#!/bin/bash
# The GPU proof of NCCL unique IDs (docs/gpu.md), run on a machine with two
# GPUs as root: rdzvd and one `rdzv agent` per rank, each in its own network
# namespace (10.77.0.0/24 on a bridge), one GPU per rank.
#   a1  examples/nccl/allreduce under `rdzv agent`, rdzvd-made ID
#   a2  examples/nccl/allreduce under `rdzv join --nccl-id rank0` (rank 0's
#       rdzv process makes the ID through librdzv and keeps its root alive);
#       rank 1 starts 2 s earlier and must wait for rank 0
#   a3  the same under `rdzv agent` with RDZV_NCCL_ID=rank0 (root in the agent)
#   b1  examples/torch/dp_allreduce.py under `rdzv agent` and the shim with
#       RDZV_SHIM_NCCL=1 and 2 rdzvd-made IDs per epoch
#   c*  negative control: two one-rank jobs in one shared namespace with one
#       VLLM_PORT and no rdzv (c1), the same under rdzv agents (c2), and the
#       vLLM-like probe-then-bind engines of tests/race (c3, if present)
# Falls back to the root namespace and 127.0.0.1 when `ip netns` fails.
#
# ONLY=a1,b1r,c2 (comma list of a1 a2 a3 b1 b1r c1 c2 c3) runs just those
# steps; HANG_S (default 50) is when dp_allreduce.py dumps its stacks and
# exits; 8 s before that DIAG lists every TCP listener of the namespaces with
# its process and the torch processes' threads (diag-*.txt).
# Usage: tests/gpu/run-on-device.sh [BIN]   (BIN default .device/gpu: rdzvd,
# rdzv-nccl-root, rdzv, librdzv.so.0, librdzv_shim.so, allreduce, ip and the
# libraries they need). Writes gpu.log and logs.tar.gz under $OUT (or /tmp).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(cd "${1:-$ROOT/.device/gpu}" && pwd)
OUTDIR=${OUT:-/tmp/rdzv-gpu-out}
mkdir -p "$OUTDIR"
W=$(mktemp -d /tmp/rdzv-gpu.XXXXXX)
exec > >(tee "$OUTDIR/gpu.log") 2>&1

# Never NVLink multicast on these machines (KINDS.md); every child inherits.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export LD_LIBRARY_PATH=$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# rdzvd's HTTP endpoint needs libmicrohttpd (carried) and GnuTLS: BIN/extra
# holds Debian 12's GnuTLS chain, used only where the machine lacks one.
if [ -d "$BIN/extra" ] && ldd "$BIN/rdzvd" | grep -q 'not found'; then
    echo "using $BIN/extra for: $(ldd "$BIN/rdzvd" | grep 'not found' | awk '{print $1}' | tr '\n' ' ')"
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$BIN/extra
fi
PY=$(command -v python3)
ONLY=${ONLY:-}
HANG_S=${HANG_S:-50}
want() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }
T0=$(date +%s.%N)
NS=1
SRV=10.77.0.1
RDZVD_PID=

since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
say() { printf '[%ss] %s\n' "$(since "$T0")" "$*"; }
ipx() { "$BIN/ip" "$@"; }
# inns NS CMD...: CMD in namespace NS (or here when namespaces are off).
inns() {
    local ns=$1; shift
    if [ "$NS" = 1 ]; then ipx netns exec "$ns" "$@"; else "$@"; fi
}

cleanup() {
    [ -n "$RDZVD_PID" ] && kill "$RDZVD_PID" 2>/dev/null && wait "$RDZVD_PID" 2>/dev/null
    if [ "$NS" = 1 ]; then
        for ns in rdzv-srv rdzv-r0 rdzv-r1 rdzv-shared; do ipx netns del "$ns" 2>/dev/null; done
        ipx link del rdzvbr 2>/dev/null
    fi
    tar -C "$W" -czf "$OUTDIR/logs.tar.gz" . 2>/dev/null
}
trap cleanup EXIT

section() { echo; echo "=== $* ==="; }

section versions
uname -r
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -4
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"nccl", ".".join(map(str, torch.cuda.nccl.version())), "gpus", torch.cuda.device_count())'
grep -h '^#define NCCL_\(MAJOR\|MINOR\|PATCH\) ' /usr/include/nccl.h /usr/local/cuda/include/nccl.h 2>/dev/null | tr '\n' ' '; echo
for b in allreduce rdzv-nccl-root; do
    printf '%s: ' "$b"; ldd "$BIN/$b" | grep -E 'nccl|cudart|not found' | tr -s ' \t' ' ' | tr '\n' ';'; echo
done
"$BIN/rdzv" --version
for b in rdzvd rdzv allreduce rdzv-nccl-root librdzv.so.0; do
    ldd "$BIN/$b" | grep -q 'not found' && { echo "MISSING for $b:"; ldd "$BIN/$b" | grep 'not found'; }
done

section "network namespaces"
setup_ns() {
    for ns in rdzv-srv rdzv-r0 rdzv-r1 rdzv-shared; do ipx netns del "$ns" 2>/dev/null; done
    ipx link del rdzvbr 2>/dev/null
    ipx netns add rdzv-srv && ipx netns add rdzv-r0 && ipx netns add rdzv-r1 \
        && ipx netns add rdzv-shared || return 1
    ipx link add rdzvbr type bridge && ipx link set rdzvbr up || return 1
    local i=1 ns
    for ns in rdzv-srv rdzv-r0 rdzv-r1 rdzv-shared; do
        ipx link add "rdzvh$i" type veth peer name eth0 netns "$ns" || return 1
        ipx link set "rdzvh$i" master rdzvbr up || return 1
        ipx -n "$ns" addr add "10.77.0.$i/24" dev eth0 || return 1
        ipx -n "$ns" link set eth0 up && ipx -n "$ns" link set lo up || return 1
        i=$((i + 1))
    done
}
if setup_ns; then
    say "namespaces: rdzv-srv 10.77.0.1, rdzv-r0 10.77.0.2, rdzv-r1 10.77.0.3, rdzv-shared 10.77.0.4"
else
    say "ip netns failed: FALLING BACK to the root namespace and 127.0.0.1"
    ipx netns del rdzv-srv rdzv-r0 rdzv-r1 rdzv-shared 2>/dev/null
    NS=0
    SRV=127.0.0.1
fi
# NCCL 2.28's cuMem P2P path passes memory handles over abstract unix
# sockets, which are per network namespace: across namespaces every
# collective fails ("ncclProxyClientGetFd ... failed", seen on 2026-11-29).
# The legacy CUDA IPC path works across them.
[ "$NS" = 1 ] && export NCCL_CUMEM_ENABLE=${NCCL_CUMEM_ENABLE:-0}
# dp_allreduce.py with every thread's stack dumped if it is still running
# after 50 s (a hang under the shim was seen on 2026-11-29).
DP=("$PY" -X faulthandler -c 'import faulthandler, os, runpy, sys
faulthandler.dump_traceback_later(int(os.environ.get("HANG_S", "50")), exit=True)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")' "$ROOT/examples/torch/dp_allreduce.py")
node_arg() { [ "$NS" = 1 ] && echo "--node=$1" || echo "--node=$(hostname)"; }

section rdzvd
# Plain TCP on the namespaces' private bridge: no CURVE keys for this proof.
insecure=
"$BIN/rdzvd" --help 2>&1 | grep -q -- --insecure-bind-any && [ "$NS" = 1 ] \
    && insecure=--insecure-bind-any
# Not through inns (a subshell): $! must be rdzvd itself (ip netns exec execs it).
srv_ns=(); [ "$NS" = 1 ] && srv_ns=("$BIN/ip" netns exec rdzv-srv)
"${srv_ns[@]}" "$BIN/rdzvd" --bind "tcp://$SRV:29400" --state-dir "$W/state" \
    --endpoint-file "$W/endpoint" --nccl-helper "$BIN/rdzv-nccl-root" \
    --nccl-root-timeout 120 $insecure >"$W/rdzvd.log" 2>&1 &
RDZVD_PID=$!
for _ in $(seq 100); do [ -s "$W/endpoint" ] && break; sleep 0.1; done
EP="tcp://$SRV:29400"
if [ ! -s "$W/endpoint" ]; then
    say "rdzvd did not start:"; cat "$W/rdzvd.log"; exit 1
fi
say "rdzvd pid $RDZVD_PID endpoint $(cat "$W/endpoint")"

# result NAME RC START: one summary line.
result() {
    printf 'RESULT %-34s rc=%-3s %ss\n' "$1" "$2" "$(since "$3")" \
        | tee -a "$W/summary"
}
show() { for f in "$@"; do [ -s "$f" ] && { echo "--- $(basename "$f")"; tail -n 25 "$f"; }; done; }
# diag NAME NS...: after HANG_S-8 s, every TCP listener in the namespaces with
# the pid/comm owning it, and the python processes' threads, into $OUTDIR.
diag() {
    local name=$1; shift
    ( sleep $((HANG_S - 8)); for ns in "$@"; do echo "## netns $ns"
        inns "$ns" "$PY" -c '
import os, glob
inode_owner = {}
for fd in glob.glob("/proc/[0-9]*/fd/*"):
    try: t = os.readlink(fd)
    except OSError: continue
    if t.startswith("socket:["):
        pid = fd.split("/")[2]
        try: comm = open("/proc/%s/comm" % pid).read().strip()
        except OSError: comm = "?"
        inode_owner.setdefault(t[8:-1], set()).add("%s/%s" % (pid, comm))
for f in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(f).readlines()[1:]:
        x = line.split()
        st = {"0A": "LISTEN", "01": "ESTAB", "02": "SYN_SENT"}.get(x[3], x[3])
        if st in ("LISTEN", "ESTAB", "SYN_SENT"):
            port = int(x[1].split(":")[1], 16); rport = int(x[2].split(":")[1], 16)
            print(f[10:], st, "local", port, "peer", rport, "rxq/txq", x[4], "owners", sorted(inode_owner.get(x[9], [])))
'; done
      for pid in $(pgrep -f dp_allreduce.py); do echo "## pid $pid threads:"; cat /proc/$pid/task/*/comm | sort | uniq -c | tr '\n' ' '; echo
        echo "## pid $pid wchan per thread:"; for t in /proc/$pid/task/*; do printf '%s:%s ' "$(cat $t/comm)" "$(cat $t/wchan 2>/dev/null)"; done; echo
        command -v cuda-gdb >/dev/null && timeout 25 cuda-gdb -p "$pid" -batch -ex 'thread apply all bt 12' 2>&1 | grep -E '^(Thread|#)' | head -150
      done ) >"$OUTDIR/diag-$name.txt" 2>&1 &
}

section "a1: allreduce under rdzv agent, rdzvd-made ID"
# run_a1 GROUP [VAR=VALUE...]
run_a1() {
    local g=$1 r; shift
    t=$(date +%s.%N)
    for r in 0 1; do
        inns "rdzv-r$r" env CUDA_VISIBLE_DEVICES=$r LOCAL_RANK=0 "$@" timeout 60 \
            "$BIN/rdzv" agent --server "$EP" --group "$g" --world 2 --rank $r "$(node_arg "r$r")" \
            --socket "$W/$g-$r.sock" --shim "$BIN/librdzv_shim.so" -- "$BIN/allreduce" --device 0 \
            >"$W/$g.$r.out" 2>"$W/$g.$r.err" &
    done
    rc=0; for p in $(jobs -p | grep -v "^$RDZVD_PID\$"); do wait "$p" || rc=$?; done
    result "$g-allreduce-agent-server-id${1:+ ($*)}" $rc "$t"
    show "$W/$g".*.out "$W/$g".*.err
}
want a1 && run_a1 a1
if want a1 && [ "$rc" != 0 ]; then
    echo "a1 failed: once more with NCCL_DEBUG=INFO"
    run_a1 a1r NCCL_DEBUG=INFO
fi
id=$(sed -n 's/^RDZV_NCCL_UNIQUE_ID=//p' "$W/a1-0.sock.env" 2>/dev/null)
[ -n "${id:-}" ] && { echo "--- rdzv nccl-id decode (a1's ID)"; "$BIN/rdzv" nccl-id decode "$id"; }

if want a2; then
section "a2: allreduce under rdzv join --nccl-id rank0 (ID made in rank 0's rdzv process)"
# rank 1 starts 2 s early: its join must wait for rank 0's IDs.
t=$(date +%s.%N)
inns rdzv-r1 env CUDA_VISIBLE_DEVICES=1 timeout 60 "$BIN/rdzv" join --server "$EP" \
    --group a2 --world 2 --rank 1 "$(node_arg r1)" --nccl-id rank0 -- "$BIN/allreduce" --device 0 \
    >"$W/a2.1.out" 2>"$W/a2.1.err" &
p1=$!
sleep 2
inns rdzv-r0 env CUDA_VISIBLE_DEVICES=0 timeout 60 "$BIN/rdzv" join --server "$EP" \
    --group a2 --world 2 --rank 0 "$(node_arg r0)" --nccl-id rank0 -- "$BIN/allreduce" --device 0 \
    >"$W/a2.0.out" 2>"$W/a2.0.err" &
p0=$!
rc=0; wait $p1 || rc=$?; wait $p0 || rc=$?
result a2-allreduce-join-rank0-id $rc "$t"
show "$W"/a2.*.out "$W"/a2.*.err
fi

if want a3; then
section "a3: allreduce under rdzv agent with RDZV_NCCL_ID=rank0 (ID made in rank 0's agent)"
t=$(date +%s.%N)
for r in 0 1; do
    inns "rdzv-r$r" env CUDA_VISIBLE_DEVICES=$r LOCAL_RANK=0 RDZV_NCCL_ID=rank0 timeout 60 \
        "$BIN/rdzv" agent --server "$EP" --group a3 --world 2 --rank $r "$(node_arg "r$r")" \
        --socket "$W/a3-$r.sock" --shim "$BIN/librdzv_shim.so" -- "$BIN/allreduce" --device 0 \
        >"$W/a3.$r.out" 2>"$W/a3.$r.err" &
done
rc=0; for p in $(jobs -p | grep -v "^$RDZVD_PID\$"); do wait "$p" || rc=$?; done
result a3-allreduce-agent-rank0-id $rc "$t"
show "$W"/a3.*.out "$W"/a3.*.err
fi

section "b1: torch dp_allreduce.py under rdzv agent + shim, RDZV_SHIM_NCCL=1, 2 IDs"
# run_b1 GROUP [VAR=VALUE...]
run_b1() {
    local g=$1 r; shift
    t=$(date +%s.%N)
    for r in 0 1; do
        inns "rdzv-r$r" env CUDA_VISIBLE_DEVICES=$r LOCAL_RANK=0 RDZV_NCCL_IDS=2 \
            RDZV_SHIM_NCCL=1 RDZV_SHIM_NCCL_VERBOSE=1 "$@" timeout $((HANG_S + 40)) \
            "$BIN/rdzv" agent --server "$EP" --group "$g" --world 2 --rank $r "$(node_arg "r$r")" \
            --socket "$W/$g-$r.sock" --shim "$BIN/librdzv_shim.so" \
            -- "${DP[@]}" >"$W/$g.$r.out" 2>"$W/$g.$r.err" &
    done
    rc=0; for p in $(jobs -p | grep -v "^$RDZVD_PID\$"); do wait "$p" || rc=$?; done
    result "$g-torch-agent-shim-nccl${1:+ ($*)}" $rc "$t"
    show "$W/$g".*.out "$W/$g".*.err
}
rc=0
want b1 && run_b1 b1
if { want b1 && [ "$rc" != 0 ]; } || { [ -n "$ONLY" ] && want b1r; }; then
    echo "b1 failed (or ONLY=b1r): once more with NCCL_DEBUG=INFO"
    diag b1r rdzv-r0 rdzv-r1
    run_b1 b1r NCCL_DEBUG=INFO
    sed -n '/Thread\|File\|Timeout/p' "$W"/b1r.*.err | head -80
fi
grep -h 'RDZV_NCCL_UNIQUE_IDS=' "$W/b1-0.sock.env" 2>/dev/null | awk -F'[=,]' '{print "b1 IDs in the assignment:", NF-1}'

if want c1; then
section "c1: negative control, no rdzv: two one-rank jobs, one namespace, one VLLM_PORT"
t=$(date +%s.%N)
for j in 0 1; do
    inns rdzv-shared env CUDA_VISIBLE_DEVICES=$j LOCAL_RANK=0 VLLM_PORT=29500 \
        MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 RDZV_PORTS=29500,29501,29502,29503 \
        RANK=0 WORLD_SIZE=1 timeout 60 "${DP[@]}" \
        >"$W/c1.$j.out" 2>"$W/c1.$j.err" &
done
rcs=""; for p in $(jobs -p | grep -v "^$RDZVD_PID\$"); do wait "$p"; rcs="$rcs $?"; done
result "c1-no-rdzv-shared-port(rcs:${rcs# })" 0 "$t"
show "$W"/c1.*.out; grep -h -m3 -i 'error\|in use' "$W"/c1.*.err
fi

if want c2; then
diag c2 rdzv-shared
section "c2: the same two jobs under rdzv agents in the shared namespace"
t=$(date +%s.%N)
for j in 0 1; do
    inns rdzv-shared env CUDA_VISIBLE_DEVICES=$j LOCAL_RANK=0 VLLM_PORT=29500 timeout $((HANG_S + 10)) \
        "$BIN/rdzv" agent --server "$EP" --group "c2-$j" --world 1 --rank 0 "$(node_arg shared)" \
        --socket "$W/c2-$j.sock" --shim "$BIN/librdzv_shim.so" \
        -- "${DP[@]}" >"$W/c2.$j.out" 2>"$W/c2.$j.err" &
done
rcs=""; for p in $(jobs -p | grep -v "^$RDZVD_PID\$"); do wait "$p"; rcs="$rcs $?"; done
result "c2-rdzv-shared-ns(rcs:${rcs# })" 0 "$t"
show "$W"/c2.*.out; grep -h -m3 -i 'error' "$W"/c2.*.err
sed -n '/Thread\|File\|Timeout/p' "$W"/c2.*.err | head -80
fi

if want c3 && [ -f "$ROOT/tests/race/reproduce.py" ]; then
    section "c3: vLLM-like probe-then-bind engines (tests/race), shared namespace"
    for mode in bare rdzv; do
        t=$(date +%s.%N)
        timeout 45 "$PY" "$ROOT/tests/race/reproduce.py" --mode $mode --topology shared \
            --engine py --python "$PY" --trials 5 --rdzvd "$BIN/rdzvd" --rdzv "$BIN/rdzv" \
            --shim "$BIN/librdzv_shim.so" >"$W/c3.$mode.out" 2>"$W/c3.$mode.err"
        result "c3-race-$mode" $? "$t"
        show "$W/c3.$mode.out" "$W/c3.$mode.err"
    done
fi

section "rdzvd log (tail)"
tail -n 40 "$W/rdzvd.log"
section summary
cat "$W/summary"
say "done"
