#!/bin/sh
# Makes the CURVE keys and the group token the manifests mount, and stores
# them as Secrets:
#   rdzv-server-curve  server.key_secret           (rdzvd --curve-secret)
#   rdzv-clients       client.key                  (rdzvd --clients DIR)
#   rdzv-client-curve  server.key client.key_secret (RDZV_CURVE_SERVER_PUBLIC,
#                                                    RDZV_CURVE_SECRET)
#   rdzv-group-token   token                       (--group-token, RDZV_GROUP_TOKEN)
# Usage: make-secrets.sh [kubectl args, e.g. -n NAMESPACE]
# Needs the rdzv CLI on PATH (RDZV=path overrides): `rdzv keygen` writes
# czmq certificates, the format rdzvd --clients and librdzv read.
set -eu
rdzv=${RDZV:-rdzv}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$rdzv" keygen "$dir/server.key" >/dev/null
"$rdzv" keygen "$dir/client.key" >/dev/null
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/token"
kubectl "$@" create secret generic rdzv-server-curve --from-file="$dir/server.key_secret"
kubectl "$@" create secret generic rdzv-clients --from-file="$dir/client.key"
kubectl "$@" create secret generic rdzv-client-curve \
    --from-file="$dir/server.key" --from-file="$dir/client.key_secret"
kubectl "$@" create secret generic rdzv-group-token --from-file="$dir/token"
