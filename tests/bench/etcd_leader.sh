#!/bin/sh
# rdzvd --etcd ARGS..., for rdzv-bench's --rdzvd: the endpoint file that
# rdzv-bench waits for appears only once this rdzvd leads (its /readyz says
# 200), so that no timed join meets a standby. Signals reach rdzvd.
#   RDZVD_REAL=PATH etcd_leader.sh [rdzvd arguments, with --endpoint-file F]...
rdzvd=${RDZVD_REAL:?the rdzvd to run}
ep=""
out=""
for a in "$@"; do
    if [ "$out" = next ]; then ep=$a; out=""; set -- "$@" "$a.pending"; shift; continue; fi
    [ "$a" = --endpoint-file ] && out=next
    set -- "$@" "$a"; shift
done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$rdzvd" "$@" --http "$port" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid; exit 0' TERM INT
i=0
until curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
    kill -0 $pid 2>/dev/null || exit 1
    i=$((i + 1)); [ $i -gt 600 ] && { kill $pid; exit 1; }
    sleep 0.05
done
mv "$ep.pending" "$ep"
wait $pid
