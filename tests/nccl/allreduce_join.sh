#!/bin/sh
# examples/nccl/allreduce, two ranks against a fresh rdzvd: each rank joining
# through librdzv, then both under `rdzv join --`. Without a GPU every rank
# must stop right before ncclCommInitRank and say so; with two GPUs the
# all-reduce must come out right.
# Usage: allreduce_join.sh RDZVD NCCL_HELPER RDZV ALLREDUCE
set -u
rdzvd=$1 helper=$2 rdzv=$3 allreduce=$4
dir=$(mktemp -d)
rdzvd_pid=

cleanup() {
    if [ -n "$rdzvd_pid" ]; then
        kill "$rdzvd_pid" 2>/dev/null
        wait "$rdzvd_pid" 2>/dev/null
    fi
    rm -rf "$dir"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*"
    for f in "$dir"/*.out "$dir"/*.err "$dir"/rdzvd.log; do
        [ -f "$f" ] && { echo "--- $f"; cat "$f"; }
    done
    exit 1
}

field() {  # field NAME FILE: the raw JSON value of NAME in the line in FILE
    sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"}]*\)\"\{0,1\}[,}].*/\1/p" "$2"
}

"$rdzvd" --bind 'tcp://127.0.0.1:*' --endpoint-file "$dir/endpoint" \
    --state-dir "$dir/state" --nccl-helper "$helper" 2>"$dir/rdzvd.log" &
rdzvd_pid=$!
tries=0
while [ ! -s "$dir/endpoint" ]; do
    tries=$((tries + 1))
    [ "$tries" -le 100 ] || fail "rdzvd wrote no endpoint within 10 s"
    sleep 0.1
done
endpoint=$(cat "$dir/endpoint")

# check MODE: both ranks' output in $dir/MODE.R.{out,err,rc}.
check() {
    mode=$1 root=
    for r in 0 1; do
        out="$dir/$mode.$r.out" err="$dir/$mode.$r.err"
        [ "$(cat "$dir/$mode.$r.rc")" = 0 ] || fail "$mode rank $r exited $(cat "$dir/$mode.$r.rc")"
        [ "$(wc -l < "$out")" = 1 ] || fail "$mode rank $r: want one JSON line"
        [ "$(field rank "$out")" = "$r" ] || fail "$mode rank $r: wrong rank"
        [ "$(field epoch "$out")" = 1 ] || fail "$mode rank $r: epoch is not 1"
        this=$(field nccl_root "$out")
        case "$this" in ''|'?'|*:0) fail "$mode rank $r: bad nccl_root '$this'" ;; esac
        [ -z "$root" ] || [ "$root" = "$this" ] || fail "$mode: ranks got different IDs"
        root=$this
        join_ms=$(field join_ms "$out")
        if [ "$mode" = direct ]; then
            [ "$join_ms" != null ] && [ -n "$join_ms" ] || fail "direct rank $r: no join_ms"
        else
            [ "$join_ms" = null ] || fail "rdzv-join rank $r joined a second time"
        fi
        if [ "$(field device "$out")" = null ]; then
            grep -q '^no CUDA device: stopping before ncclCommInitRank' "$err" \
                || fail "$mode rank $r: no device but no notice"
        else
            [ "$(field sum_ok "$out")" = true ] || fail "$mode rank $r: wrong sum"
        fi
    done
    echo "ok: $mode, NCCL root $root"
}

pids=
for r in 0 1; do
    ( "$allreduce" --server "$endpoint" --group direct --world 2 --rank "$r" \
          --timeout 30 --allow-no-gpu >"$dir/direct.$r.out" 2>"$dir/direct.$r.err"
      echo $? >"$dir/direct.$r.rc" ) &
    pids="$pids $!"
done
wait $pids
check direct

pids=
for r in 0 1; do
    ( "$rdzv" join --server "$endpoint" --group joined --world 2 --rank "$r" \
          --timeout 30 -- "$allreduce" --allow-no-gpu \
          >"$dir/joined.$r.out" 2>"$dir/joined.$r.err"
      echo $? >"$dir/joined.$r.rc" ) &
    pids="$pids $!"
done
wait $pids
check joined
