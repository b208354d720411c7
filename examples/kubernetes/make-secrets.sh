#!/bin/sh
# Makes the CURVE keys and the group token the manifests mount, as Secrets:
#   rdzv-server-curve  server.key_secret            (rdzvd --curve-secret)
#   rdzv-clients       client.key, client-*.key     (rdzvd --clients DIR)
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
#       HTTP token alone. Only a Secret the API server calls NotFound counts
#       as missing: any other kubectl error stops it with nothing changed.
#       --rotate makes all five anew; restart rdzvd and the rank Pods after.
#   make-secrets.sh --rotate-client-key [KUBECTL ARGS]
#       Phase 1 of a client key rotation without restarting rdzvd: a new
#       client key pair, its public key added to rdzv-clients beside the
#       ones there (as client-TIME.key), and its secret key in place of
#       rdzv-client-curve's client.key_secret. rdzvd re-reads --clients, so
#       it accepts the old and the new key while the rank Pods roll.
#   make-secrets.sh --retire-old-client-keys [KUBECTL ARGS]
#       Phase 2, once every rank Pod has restarted: rdzv-clients keeps only
#       the public key of rdzv-client-curve's client.key_secret.
#   make-secrets.sh --print
#       Writes them as one YAML stream on stdout, kubectl or not: from the
#       image, `docker run --rm IMAGE rdzv-make-secrets --print > secrets.yaml`,
#       then `kubectl apply -n NAMESPACE -f secrets.yaml` (as often as you
#       like: the file does not change).
# Needs `rdzv` (beside this script, on PATH, or RDZV=path): `rdzv keygen`
# writes the czmq certificates that rdzvd --clients and librdzv read.
set -eu

usage() { sed -n '10,31p' "$0" | sed 's/^# \{0,1\}//'; }
keys="rdzv-server-curve rdzv-clients rdzv-client-curve rdzv-group-token"
make_keys=1
make_http=1
mode=apply
rotate=0
while [ $# -gt 0 ]; do
    case $1 in
    --print) mode=print; shift ;;
    --rotate) rotate=1; shift ;;
    --rotate-client-key) mode=rotate-client; shift ;;
    --retire-old-client-keys) mode=retire-clients; shift ;;
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
if [ "$mode" != print ] && [ $have_kubectl = 0 ]; then
    echo "make-secrets.sh: kubectl not found; use --print to write the Secrets to stdout" >&2
    exit 2
fi

die() {
    echo "make-secrets.sh: $*" >&2
    exit 1
}

# secret_exists NAME KUBECTL-ARGS...: true if the Secret is there, false if
# the API server says NotFound. Any other failure (RBAC, an API server
# that cannot be reached, a timeout) stops the script: taking it for
# "missing" would make fresh keys under a running deployment.
secret_exists() {
    name=$1
    shift
    # --ignore-not-found: NotFound alone is exit 0 with nothing printed.
    if ! got=$(kubectl "$@" get secret "$name" --ignore-not-found -o name); then
        die "cannot tell whether Secret $name exists (kubectl get failed, above); changed nothing"
    fi
    [ -n "$got" ]
}

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

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

# The public key a czmq certificate (public or secret) holds.
public_key() {
    sed -n 's/^[[:space:]]*public-key = "\(.*\)"[[:space:]]*$/\1/p' "$1"
}

# fetch_secret NAME DIR KUBECTL-ARGS...: each key of an existing Secret as
# a file of DIR; stops if the Secret is missing or cannot be read.
fetch_secret() {
    name=$1
    out=$2
    shift 2
    secret_exists "$name" "$@" || die "Secret $name does not exist: run make-secrets.sh without options first"
    mkdir -p "$out"
    kubectl "$@" get secret "$name" \
        -o go-template='{{range $k, $v := .data}}{{$k}} {{$v}}{{"\n"}}{{end}}' > "$out.list" ||
        die "cannot read Secret $name; changed nothing"
    while read -r k v; do
        case $k in
        ''|*/*|.*) die "Secret $name has a key named '$k', which this script does not write" ;;
        esac
        printf '%s' "$v" | base64 -d > "$out/$k" || die "Secret $name: key $k is not base64"
    done < "$out.list"
}

# replace_secret NAME DIR KUBECTL-ARGS...: the Secret becomes exactly DIR's
# files. Replace, not apply: apply would keep a key that an earlier apply
# did not write. --save-config keeps later applies (--rotate) exact too.
replace_secret() {
    name=$1
    src=$2
    shift 2
    secret_yaml "$name" "$src"/* > "$dir/$name.yaml"
    kubectl "$@" replace --save-config -f "$dir/$name.yaml"
}

if [ "$mode" = rotate-client ]; then
    fetch_secret rdzv-clients "$dir/clients" "$@"
    fetch_secret rdzv-client-curve "$dir/curve" "$@"
    [ -s "$dir/curve/server.key" ] || die "Secret rdzv-client-curve has no server.key"
    "$rdzv" keygen "$dir/new.key" >/dev/null
    # A name no earlier rotation used: rdzvd reads every entry, so the old
    # keys stay accepted until --retire-old-client-keys.
    stamp=$(date -u +%Y%m%dT%H%M%SZ)
    new=client-$stamp.key
    [ ! -e "$dir/clients/$new" ] || die "rdzv-clients already has $new; try again in a second"
    cp "$dir/new.key" "$dir/clients/$new"
    rm -f "$dir/curve/client.key_secret"
    cp "$dir/new.key_secret" "$dir/curve/client.key_secret"
    # rdzvd first: a rank Pod that starts with the new key must find it
    # accepted. Were the second step to fail, the first alone is harmless.
    replace_secret rdzv-clients "$dir/clients" "$@"
    replace_secret rdzv-client-curve "$dir/curve" "$@"
    echo "make-secrets.sh: added $new to rdzv-clients and gave rdzv-client-curve its secret key." >&2
    echo "make-secrets.sh: once rdzvd logs the new key count (\"clients keys=...\"), restart the rank Pods;" >&2
    echo "make-secrets.sh: then run make-secrets.sh --retire-old-client-keys" >&2
    exit 0
fi

if [ "$mode" = retire-clients ]; then
    fetch_secret rdzv-clients "$dir/clients" "$@"
    fetch_secret rdzv-client-curve "$dir/curve" "$@"
    current=$(public_key "$dir/curve/client.key_secret")
    [ -n "$current" ] || die "rdzv-client-curve's client.key_secret holds no public key"
    mkdir "$dir/keep"
    for f in "$dir/clients"/*; do
        [ -f "$f" ] || continue
        if [ "$(public_key "$f")" = "$current" ]; then
            cp "$f" "$dir/keep/"
        else
            echo "make-secrets.sh: retiring $(basename "$f")" >&2
        fi
    done
    # Never leave rdzvd without the key the rank Pods hold: that would
    # lock every rank out.
    [ -n "$(ls "$dir/keep")" ] ||
        die "no key in rdzv-clients matches rdzv-client-curve's client.key_secret; changed nothing"
    replace_secret rdzv-clients "$dir/keep" "$@"
    exit 0
fi

if [ "$mode" = apply ] && [ $rotate = 0 ]; then
    found=0
    for n in $keys; do
        if secret_exists "$n" "$@"; then found=$((found + 1)); fi
    done
    [ $found = 4 ] && make_keys=0
    if secret_exists rdzv-http-token "$@"; then make_http=0; fi
    if [ $make_keys = 0 ] && [ $make_http = 0 ]; then
        echo "make-secrets.sh: the five Secrets exist; kept them (--rotate makes new ones)" >&2
        exit 0
    fi
fi

"$rdzv" keygen "$dir/server.key" >/dev/null
"$rdzv" keygen "$dir/client.key" >/dev/null
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/token"
# Its own directory: the Secret's key is the file's name, token.
http=$(mktemp -d "$dir/http.XXXXXX")
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$http/token"

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
