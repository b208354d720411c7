#!/bin/sh
# Starts one vLLM data-parallel rank with its rdzv assignment, in a Pod or on
# bare metal:
#
#   launch-rank.sh MODEL [more `vllm serve` arguments...]
#
# - RDZV_AGENT_SOCKET=PATH set (a Pod whose `rdzv agent` sidecar serves PATH):
#   waits for PATH and PATH.env, reads the assignment from PATH.env and runs
#   vLLM under librdzv_shim.so.
# - Otherwise, on bare metal: starts `rdzv agent` for this rank (RDZV_SERVER,
#   RDZV_GROUP, RDZV_WORLD, RDZV_RANK as for `rdzv join`), which runs this
#   script again as its command, under the shim, with the socket set, and
#   runs it again at each new epoch of the group (--restart).
# - RDZV_NO_AGENT=1: only `rdzv join --format env`; the plan is still the
#   rank's own, but nothing holds its ports until vLLM binds them.
#
# vLLM gets its data-parallel flags from the assignment's RDZV_VLLM_ARGS
# (size, rank, rank 0's address, the DP RPC port named in rank 0's plan,
# and --port, the API port of this rank's own plan) and VLLM_PORT, where its
# port scans start in this rank's probe pool:
# no port is computed here (docs/torchrun-lws.md).
#
# Settings (environment): TP (tensor parallel size, 2), EP (1: expert
# parallel), RDZV_SHIM (/opt/rdzv/lib/librdzv_shim.so), RDZV_WAIT (seconds to
# wait for the agent, 600), VLLM (the vllm command), RDZV (the rdzv command).
set -eu

: "${TP:=2}" "${EP:=1}" "${RDZV_WAIT:=600}"
: "${RDZV_SHIM:=/opt/rdzv/lib/librdzv_shim.so}" "${VLLM:=vllm}" "${RDZV:=rdzv}"

die() { echo "launch-rank: $*" >&2; exit 1; }

[ $# -ge 1 ] || die "usage: launch-rank.sh MODEL [vllm serve arguments...]"
model=$1
shift

wait_for_agent() {
    waited=0
    while [ ! -S "$RDZV_AGENT_SOCKET" ] || [ ! -f "$RDZV_AGENT_SOCKET.env" ]; do
        [ "$waited" -lt "$RDZV_WAIT" ] ||
            die "no agent at $RDZV_AGENT_SOCKET after ${RDZV_WAIT}s (RDZV_AGENT_SOCKET, RDZV_WAIT)"
        sleep 1
        waited=$((waited + 1))
    done
    set -a
    . "$RDZV_AGENT_SOCKET.env"
    set +a
    case ":${LD_PRELOAD:-}:" in
    *librdzv_shim.so*) ;;
    *)
        [ -f "$RDZV_SHIM" ] || die "no shim at $RDZV_SHIM (RDZV_SHIM)"
        export LD_PRELOAD="$RDZV_SHIM${LD_PRELOAD:+:$LD_PRELOAD}"
        ;;
    esac
}

join_only() {
    env_file=$(mktemp)
    trap 'rm -f "$env_file"' EXIT
    "$RDZV" join --format env --timeout "$RDZV_WAIT" >"$env_file" ||
        die "rdzv join failed (RDZV_SERVER, RDZV_GROUP, RDZV_WORLD, RDZV_RANK)"
    set -a
    . "$env_file"
    set +a
    rm -f "$env_file"
    trap - EXIT
}

if [ -n "${RDZV_AGENT_SOCKET:-}" ]; then
    wait_for_agent
elif [ "${RDZV_NO_AGENT:-0}" = 1 ]; then
    join_only
else
    run_dir=${XDG_RUNTIME_DIR:-/tmp}
    sock="$run_dir/rdzv-${RDZV_GROUP:?set RDZV_GROUP}-${RDZV_RANK:?set RDZV_RANK}.sock"
    # --restart: a rank restarting elsewhere, or a resize, moves the group to
    # a new epoch; vLLM's DP group cannot change under it, so the agent
    # starts it again with the new epoch's assignment.
    exec "$RDZV" agent --socket "$sock" --timeout "$RDZV_WAIT" --restart -- "$0" "$model" "$@"
fi

[ -n "${RDZV_VLLM_ARGS:-}" ] ||
    die "the assignment has no RDZV_VLLM_ARGS: rdzvd is older than this rdzv"
# Shell words, quoted by rdzv where a shell would split them.
eval "set -- $RDZV_VLLM_ARGS --tensor-parallel-size \"\$TP\" \"\$@\""
[ "$EP" = 1 ] && set -- --enable-expert-parallel "$@"
exec $VLLM serve "$model" "$@"
