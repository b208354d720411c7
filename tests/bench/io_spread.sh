#!/bin/sh
# Connections per libzmq I/O thread of an rdzvd under rdzv-bench: stands in
# for rdzvd (--rdzvd tests/bench/io_spread.sh), runs the real one, and
# samples its epoll sets every 50 ms from /proc/PID/fdinfo. One set per I/O
# thread holds its mailbox, its listeners and its connections; the sizes at
# the sample with the most entries go to $SPREAD_OUT, smallest first.
#
#   SPREAD_RDZVD=build-bench/rendezvous/rdzvd SPREAD_OUT=/tmp/spread \
#     rdzv-bench --rdzvd tests/bench/io_spread.sh --ranks 1024 --straggler 1500
#
# (A straggler keeps every connection open
# long enough to be seen.)
set -u
"${SPREAD_RDZVD:?path of the real rdzvd}" "$@" &
pid=$!
# The bench stops "rdzvd" with SIGTERM: pass it on, or the real one stays.
trap 'kill -TERM "$pid" 2>/dev/null' TERM INT
(
    best=0
    while kill -0 "$pid" 2>/dev/null; do
        # One awk over every fd: a process per fd would take seconds.
        sizes=$(awk 'FNR == 1 { if (n > 1) print n; n = 0 } /^tfd:/ { n++ }
                     END { if (n > 1) print n }' /proc/"$pid"/fdinfo/* 2>/dev/null |
                sort -n | tr '\n' ' ')
        total=$(echo "$sizes" | tr ' ' '\n' | awk '{ s += $1 } END { print s + 0 }')
        if [ "$total" -gt "$best" ]; then
            best=$total
            echo "$sizes" >"${SPREAD_OUT:?file for the sizes}"
        fi
        sleep 0.05
    done
) &
wait "$pid"
rc=$?
# A trapped SIGTERM ends that wait early; this one waits for rdzvd itself.
if kill -0 "$pid" 2>/dev/null; then
    wait "$pid"
    rc=$?
fi
exit "$rc"
