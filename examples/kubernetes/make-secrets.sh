#!/bin/sh
# Makes the CURVE keys and the group token the manifests mount, as Secrets:
#   rdzv-server-curve  server.key_secret            (rdzvd --curve-secret)
#   rdzv-clients       client.key                   (rdzvd --clients DIR)
#   rdzv-client-curve  server.key client.key_secret (RDZV_CURVE_SERVER_PUBLIC,
#                                                    RDZV_CURVE_SECRET)
#   rdzv-group-token   token                        (--group-token, RDZV_GROUP_TOKEN)
#   rdzv-http-token    token                        (rdzvd --http-token)
#
# Usage:
#   make-secrets.sh [--rotate] [KUBECTL ARGS, e.g. -n NAMESPACE]
#       Applies them with kubectl. Run again, it keeps the five it finds and
#       changes nothing; if some of the first four are missing it makes a
#       fresh set of those four (the keys belong together), and a missing
#       HTTP token alone. --rotate makes all five anew; restart rdzvd and
#       the rank Pods after it.
#   make-secrets.sh --print
#       Writes them as one YAML stream on stdout, kubectl or not: from the
#       image, `docker run --rm IMAGE rdzv-make-secrets --print > secrets.yaml`,
#       then `kubectl apply -n NAMESPACE -f secrets.yaml` (as often as you
#       like: the file does not change).
# Needs `rdzv` (beside this script, on PATH, or RDZV=path): `rdzv keygen`
# writes the czmq certificates that rdzvd --clients and librdzv read.
set -eu

usage() { sed -n '10,21p' "$0" | sed 's/^# \{0,1\}//'; }
keys="rdzv-server-curve rdzv-clients rdzv-client-curve rdzv-group-token"
make_keys=1
make_http=1
mode=apply
rotate=0
while [ $# -gt 0 ]; do
    case $1 in
    --print) mode=print; shift ;;
    --rotate) rotate=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) break ;;
    esac
done
here=$(dirname "$0")
if [ -n "${RDZV:-}" ]; then rdzv=$RDZV
elif [ -x "$here/rdzv" ]; then rdzv=$here/rdzv
else rdzv=rdzv
fi
have_kubectl=0
command -v kubectl >/dev/null 2>&1 && have_kubectl=1
if [ "$mode" = apply ]; then
    if [ $have_kubectl = 0 ]; then
        echo "make-secrets.sh: kubectl not found; use --print to write the Secrets to stdout" >&2
        exit 2
    fi
    if [ $rotate = 0 ]; then
        found=0
        for n in $keys; do
            kubectl "$@" get secret "$n" >/dev/null 2>&1 && found=$((found + 1))
        done
        [ $found = 4 ] && make_keys=0
        kubectl "$@" get secret rdzv-http-token >/dev/null 2>&1 && make_http=0
        if [ $make_keys = 0 ] && [ $make_http = 0 ]; then
            echo "make-secrets.sh: the five Secrets exist; kept them (--rotate makes new ones)" >&2
            exit 0
        fi
    fi
fi

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$rdzv" keygen "$dir/server.key" >/dev/null
"$rdzv" keygen "$dir/client.key" >/dev/null
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/token"
# Its own directory: the Secret's key is the file's name, token.
http=$(mktemp -d "$dir/http.XXXXXX")
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$http/token"

# One Secret as YAML: NAME FILE...; kubectl's own rendering where there is
# one, else the same object written here (the image has no kubectl).
secret_yaml() {
    name=$1
    shift
    if [ $have_kubectl = 1 ]; then
        set -- $(for f in "$@"; do printf -- '--from-file=%s\n' "$f"; done)
        kubectl create secret generic "$name" "$@" --dry-run=client -o yaml
        return
    fi
    printf 'apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\ntype: Opaque\ndata:\n' "$name"
    for f in "$@"; do
        printf '  %s: %s\n' "$(basename "$f")" "$(base64 -w0 < "$f")"
    done
}

all_secrets() {
    if [ $make_keys = 1 ]; then
        secret_yaml rdzv-server-curve "$dir/server.key_secret"
        echo ---
        secret_yaml rdzv-clients "$dir/client.key"
        echo ---
        secret_yaml rdzv-client-curve "$dir/server.key" "$dir/client.key_secret"
        echo ---
        secret_yaml rdzv-group-token "$dir/token"
    fi
    if [ $make_keys = 1 ] && [ $make_http = 1 ]; then
        echo ---
    fi
    if [ $make_http = 1 ]; then
        secret_yaml rdzv-http-token "$http/token"
    fi
}

if [ "$mode" = print ]; then
    all_secrets
else
    all_secrets > "$dir/secrets.yaml"
    kubectl "$@" apply -f "$dir/secrets.yaml"
fi
