#!/usr/bin/env python3
"""examples/kubernetes/make-secrets.sh as users run it: --print without
kubectl (as from the image) makes the same Secrets, valid objects; the keys
and token it makes work together in a real rdzvd on loopback; applied to a
stand-in API server it is idempotent, replaces a partial set of keys whole,
keeps or remakes the HTTP token alone, and --rotate replaces all. One line
per check (rdzvtest).

    test_make_secrets.py --source-root DIR --rdzv EXE --rdzvd EXE"""
import base64
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

import manifests
import rdzvtest

def bare_path(tmp):
    """A PATH with what make-secrets.sh runs but no kubectl, as in the image."""
    d = os.path.join(tmp, "bin")
    os.mkdir(d)
    for tool in ("sh", "mktemp", "head", "od", "tr", "base64", "basename", "dirname", "rm",
                 "sed", "cat", "printf"):
        os.symlink(shutil.which(tool), os.path.join(d, tool))
    return d


def check_secrets_print_without_kubectl(ctx):
    """--print as from the image: no kubectl, the same five Secrets, and valid objects."""
    with tempfile.TemporaryDirectory() as tmp:
        docs = ctx.print_secrets(bare_path(tmp))
    made = {d["metadata"]["name"]: set(d["data"]) for d in docs}
    assert made == ctx.secrets, f"without kubectl: {made}, with: {ctx.secrets}"
    k8s = os.path.join(ctx.root, "tests", "ops", "k8s")
    if os.path.isdir(os.path.join(k8s, "node_modules")):
        p = subprocess.run(["node", os.path.join(k8s, "validate.mjs")], input=yaml.safe_dump_all(docs),
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr


def check_secrets_work_together(ctx):
    """The printed keys and token as the manifests mount them: a real rdzvd
    with them admits a join with the client's keys and refuses another key."""
    docs = {d["metadata"]["name"]: d["data"] for d in ctx.print_secrets()}
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in docs.items():
            os.mkdir(os.path.join(tmp, name))
            for key, value in data.items():
                with open(os.path.join(tmp, name, key), "wb") as f:
                    f.write(base64.b64decode(value))
        d = rdzvtest.Rdzvd(ctx.rdzvd, tmp, "--no-nccl",
                           "--curve-secret", os.path.join(tmp, "rdzv-server-curve", "server.key_secret"),
                           "--clients", os.path.join(tmp, "rdzv-clients"),
                           "--group-token", os.path.join(tmp, "rdzv-group-token", "token"))
        endpoint = d.endpoint
        try:
            subprocess.run([ctx.rdzv, "keygen", os.path.join(tmp, "stranger.key")], check=True,
                           capture_output=True)

            def join(secret):
                env = dict(os.environ,
                           RDZV_CURVE_SERVER_PUBLIC=os.path.join(tmp, "rdzv-client-curve", "server.key"),
                           RDZV_CURVE_SECRET=secret,
                           RDZV_GROUP_TOKEN=os.path.join(tmp, "rdzv-group-token", "token"))
                return subprocess.run([ctx.rdzv, "join", "--server", endpoint, "--group", "s",
                                       "--world", "1", "--rank", "0", "--timeout", "3"],
                                      env=env, capture_output=True, text=True, timeout=30)
            ok = join(os.path.join(tmp, "rdzv-client-curve", "client.key_secret"))
            assert ok.returncode == 0, "the client's keys were refused: " + ok.stderr
            bad = join(os.path.join(tmp, "stranger.key_secret"))
            assert bad.returncode != 0, "a key rdzvd does not list was admitted"
        finally:
            d.stop()


# A stand-in for the API server's part of kubectl (there is no cluster
# here): Secrets are files of $STORE, one per Secret. `get secret NAME`
# answers as kubectl does: NotFound on stderr and exit 1 for a Secret that
# is not there (exit 0 and nothing printed under --ignore-not-found), and
# $FAULTS ("NAME=forbidden NAME=refused") makes it fail as kubectl does on
# an RBAC refusal or an API server it cannot reach; its -o output is the
# real kubectl's, rendered from the stored object (patch --local). `apply`
# merges as kubectl's client-side apply does for a Secret's data: keys its
# last apply wrote and this one lacks go, others stay. `replace` stores the
# object as given, with the last-applied annotation only under
# --save-config. Everything else (create --dry-run=client) is the real
# kubectl. Each call is logged to $STORE/../calls.
KUBECTL_STANDIN = r"""#!/bin/sh
store=$STORE
echo "$*" >> "$store/../calls"
while [ "${1:-}" = -n ]; do shift 2; done
fault() {
    for f in ${FAULTS:-}; do
        [ "${f%%=*}" = "$1" ] || continue
        case ${f#*=} in
        forbidden) echo "Error from server (Forbidden): secrets \"$1\" is forbidden: User \"ci\" cannot get resource \"secrets\" in API group \"\" in the namespace \"llm\"" >&2 ;;
        refused) echo "The connection to the server 10.0.0.1:6443 was refused - did you specify the right host or port?" >&2 ;;
        esac
        exit 1
    done
}
case "$1 $2" in
"get secret")
    name=$3
    shift 3
    fault "$name"
    if [ ! -f "$store/$name" ]; then
        case " $* " in *" --ignore-not-found "*) exit 0 ;; esac
        echo "Error from server (NotFound): secrets \"$name\" not found" >&2
        exit 1
    fi
    out=
    while [ $# -gt 0 ]; do
        case $1 in
        -o) out=$2; shift 2 ;;
        -o*) out=${1#-o}; shift ;;
        *) shift ;;
        esac
    done
    if [ -z "$out" ]; then
        printf 'NAME   TYPE     DATA   AGE\n%s   Opaque   1      1m\n' "$name"
        exit 0
    fi
    exec "$REAL_KUBECTL" patch --local -f "$store/$name" --type merge -p '{}' -o "$out"
    ;;
"apply -f"|"replace -f"|"replace --save-config")
    exec python3 - "$store" "$@" <<'PY'
import json, os, sys, yaml
store, verb, args = sys.argv[1], sys.argv[2], sys.argv[3:]
LAST = "kubectl.kubernetes.io/last-applied-configuration"
for d in yaml.safe_load_all(open(args[args.index("-f") + 1])):
    if not d:
        continue
    name = d["metadata"]["name"]
    path = os.path.join(store, name)
    live = yaml.safe_load(open(path)) if os.path.exists(path) else None
    if verb == "replace":
        if live is None:
            sys.exit('Error from server (NotFound): error when replacing: secrets "%s" not found' % name)
        new = d
        if "--save-config" in args:
            d.setdefault("metadata", {}).setdefault("annotations", {})[LAST] = json.dumps(d)
    else:
        new = dict(d, metadata=dict(d["metadata"], annotations={LAST: json.dumps(d)}))
        if live is not None:
            last = json.loads(live["metadata"].get("annotations", {}).get(LAST, "{}"))
            data = {k: v for k, v in live.get("data", {}).items()
                    if k not in last.get("data", {}) or k in d.get("data", {})}
            data.update(d.get("data", {}))
            new["data"] = data
    open(path, "w").write(yaml.safe_dump(new))
    print("secret/%s %s" % (name, "replaced" if verb == "replace" else "configured"))
PY
    ;;
esac
exec "$REAL_KUBECTL" "$@"
"""


class Cluster:
    """make-secrets.sh against the stand-in kubectl: run() it, read the
    stored Secrets, see which kubectl calls it made."""

    def __init__(self, ctx, tmp):
        self.ctx = ctx
        self.store = os.path.join(tmp, "store")
        os.mkdir(self.store)
        self.calls = os.path.join(tmp, "calls")
        bindir = os.path.join(tmp, "bin")
        os.mkdir(bindir)
        with open(os.path.join(bindir, "kubectl"), "w") as f:
            f.write(KUBECTL_STANDIN)
        os.chmod(os.path.join(bindir, "kubectl"), 0o755)
        self.env = dict(os.environ, RDZV=ctx.rdzv, STORE=self.store,
                        REAL_KUBECTL=shutil.which("kubectl"),
                        PATH=bindir + ":" + os.environ["PATH"])

    def run(self, *args, faults="", ok=True):
        """make-secrets.sh ARGS -n llm: the stored Secrets after it, as text;
        with ok=False, its failed run (returncode, stderr) instead."""
        open(self.calls, "w").close()
        p = subprocess.run(["/bin/sh", os.path.join(self.ctx.kdir, "make-secrets.sh"), *args,
                            "-n", "llm"], env=dict(self.env, FAULTS=faults),
                           capture_output=True, text=True, timeout=60)
        if not ok:
            assert p.returncode != 0, f"make-secrets.sh {' '.join(args)} succeeded: {p.stderr}"
            return p
        assert p.returncode == 0, p.stderr
        return self.texts()

    def texts(self):
        return {n: open(os.path.join(self.store, n)).read() for n in sorted(os.listdir(self.store))}

    def data(self, name):
        """A stored Secret's keys, decoded."""
        d = yaml.safe_load(open(os.path.join(self.store, name)))
        return {k: base64.b64decode(v).decode() for k, v in d.get("data", {}).items()}

    def writes(self):
        return [c for c in open(self.calls).read().splitlines()
                if " apply " in " %s " % c or " replace " in " %s " % c]


def public_key(cert):
    m = re.search(r'^\s*public-key = "(.*)"\s*$', cert, re.M)
    assert m, "not a czmq certificate: " + cert[:200]
    return m.group(1)


def check_secrets_apply_idempotent(ctx):
    """Run twice, nothing changes; one key Secret lost, a fresh set of the
    four keys (the HTTP token kept); the HTTP token lost, only it made anew;
    --rotate, a fresh set of all five."""
    with tempfile.TemporaryDirectory() as tmp:
        c = Cluster(ctx, tmp)
        first = c.run()
        assert set(first) == set(ctx.secrets), sorted(first)
        assert c.run() == first, "a second run changed the Secrets"
        assert not c.writes(), "a second run wrote: %s" % c.writes()
        os.unlink(os.path.join(c.store, "rdzv-clients"))
        third = c.run()
        keys = [n for n in first if n != "rdzv-http-token"]
        assert set(third) == set(first) and all(third[n] != first[n] for n in keys), \
            "a partial set of keys was not replaced whole"
        assert third["rdzv-http-token"] == first["rdzv-http-token"], "the HTTP token changed with the keys"
        os.unlink(os.path.join(c.store, "rdzv-http-token"))
        fourth = c.run()
        assert all(fourth[n] == third[n] for n in keys), "a lost HTTP token changed the keys"
        assert fourth["rdzv-http-token"] != third["rdzv-http-token"], "the HTTP token was not made anew"
        fifth = c.run("--rotate")
        assert all(fifth[n] != fourth[n] for n in fourth), "--rotate kept a Secret"


def check_secrets_stop_on_kubectl_errors(ctx):
    """Only NotFound means missing: a Secret kubectl cannot read for any
    other reason (RBAC, no API server) stops the script with exit 1 and a
    message naming it, before it writes anything, so a running
    deployment's keys are never rotated by a passing fault."""
    with tempfile.TemporaryDirectory() as tmp:
        c = Cluster(ctx, tmp)
        first = c.run()
        for fault in ("forbidden", "refused"):
            for name in ("rdzv-clients", "rdzv-http-token"):
                p = c.run(faults="%s=%s" % (name, fault), ok=False)
                assert p.returncode == 1, f"{name}={fault}: exit {p.returncode}"
                assert "Secret %s" % name in p.stderr and "changed nothing" in p.stderr, p.stderr
                assert not c.writes(), f"{name}={fault}: it wrote {c.writes()}"
                assert c.texts() == first, f"{name}={fault} changed the Secrets"
        # The same faults on an empty namespace: still nothing made.
        for n in list(first):
            os.unlink(os.path.join(c.store, n))
        p = c.run(faults="rdzv-group-token=refused", ok=False)
        assert not c.writes() and not c.texts(), "made Secrets past an unreachable API server"
    return "forbidden and connection refused stop it"


def rdzvd_admits(ctx, tmp, clients, server_secret, server_public, token, *client_secrets):
    """For each client secret key: whether a real rdzvd with these
    --clients, --curve-secret and --group-token admits a join with it."""
    d = rdzvtest.Rdzvd(ctx.rdzvd, tmp, "--no-nccl", "--curve-secret", server_secret,
                       "--clients", clients, "--group-token", token)
    try:
        got = []
        for i, secret in enumerate(client_secrets):
            env = dict(os.environ, RDZV_CURVE_SERVER_PUBLIC=server_public,
                       RDZV_CURVE_SECRET=secret, RDZV_GROUP_TOKEN=token)
            p = subprocess.run([ctx.rdzv, "join", "--server", d.endpoint, "--group", "s%d" % i,
                                "--world", "1", "--rank", "0", "--timeout", "3"],
                               env=env, capture_output=True, text=True, timeout=30)
            got.append(p.returncode == 0)
        return got
    finally:
        d.stop()


def write_secret(c, name, where):
    """A stored Secret's keys as files of where/name (a mounted Secret)."""
    d = os.path.join(where, name)
    os.makedirs(d, exist_ok=True)
    for k, v in c.data(name).items():
        with open(os.path.join(d, k), "w") as f:
            f.write(v)
    return d


def check_client_key_rotation(ctx):
    """--rotate-client-key adds a new public key to rdzv-clients beside the
    old one and gives rdzv-client-curve the new secret key, the server's
    public key and the other Secrets untouched: a real rdzvd with that
    rdzv-clients admits the old and the new client. --retire-old-client-keys
    then keeps only the current key: the old client is refused, the new one
    admitted. A later --rotate leaves one key, not the ones rotation added."""
    with tempfile.TemporaryDirectory() as tmp:
        c = Cluster(ctx, tmp)
        first = c.run()
        old = c.data("rdzv-client-curve")
        old_dir = write_secret(c, "rdzv-client-curve", os.path.join(tmp, "old"))
        phase1 = c.run("--rotate-client-key")
        clients = c.data("rdzv-clients")
        new = c.data("rdzv-client-curve")
        added = [k for k in clients if k != "client.key"]
        assert "client.key" in clients and len(added) == 1, sorted(clients)
        assert re.fullmatch(r"client-\d{8}T\d{6}Z\.key", added[0]), added
        assert public_key(clients[added[0]]) == public_key(new["client.key_secret"]), \
            "the added public key is not the new secret key's"
        assert public_key(clients["client.key"]) == public_key(old["client.key_secret"])
        assert new["server.key"] == old["server.key"], "the server's public key changed"
        assert new["client.key_secret"] != old["client.key_secret"]
        for n in ("rdzv-server-curve", "rdzv-group-token", "rdzv-http-token"):
            assert phase1[n] == first[n], f"{n} changed"
        # rdzvd's list first: a Pod that starts with the new key finds it there.
        order = [os.path.basename(w.split(" -f ")[1]) for w in c.writes()]
        assert order == ["rdzv-clients.yaml", "rdzv-client-curve.yaml"], c.writes()
        server = write_secret(c, "rdzv-server-curve", tmp)
        token = os.path.join(write_secret(c, "rdzv-group-token", tmp), "token")
        cur = write_secret(c, "rdzv-client-curve", os.path.join(tmp, "new"))

        def admits(sub):
            w = os.path.join(tmp, sub)
            os.mkdir(w)
            return rdzvd_admits(ctx, w, write_secret(c, "rdzv-clients", w),
                                os.path.join(server, "server.key_secret"),
                                os.path.join(cur, "server.key"), token,
                                os.path.join(old_dir, "client.key_secret"),
                                os.path.join(cur, "client.key_secret"))
        assert admits("phase1") == [True, True], "phase 1: old and new client not both admitted"
        c.run("--retire-old-client-keys")
        assert list(c.data("rdzv-clients")) == added, sorted(c.data("rdzv-clients"))
        assert c.data("rdzv-client-curve") == new, "phase 2 changed rdzv-client-curve"
        assert admits("phase2") == [False, True], "phase 2: want the old refused, the new admitted"
        # Twice in a row: two added, then one left.
        c.run("--rotate-client-key")
        assert len(c.data("rdzv-clients")) == 2
        c.run("--rotate")
        assert list(c.data("rdzv-clients")) == ["client.key"], sorted(c.data("rdzv-clients"))
    return "old and new admitted in phase 1, the old refused after phase 2"


def check_client_key_rotation_refusals(ctx):
    """The rotation steps change nothing where they cannot be safe: before
    the Secrets exist, when kubectl cannot read them, and (phase 2) when no
    key in rdzv-clients is the one the rank Pods hold, which would lock
    every rank out."""
    with tempfile.TemporaryDirectory() as tmp:
        c = Cluster(ctx, tmp)
        for opt in ("--rotate-client-key", "--retire-old-client-keys"):
            p = c.run(opt, ok=False)
            assert "does not exist" in p.stderr and not c.texts(), p.stderr
        first = c.run()
        p = c.run("--rotate-client-key", faults="rdzv-client-curve=forbidden", ok=False)
        assert not c.writes() and c.texts() == first, c.writes()
        # rdzv-clients without the current key.
        path = os.path.join(c.store, "rdzv-clients")
        d = yaml.safe_load(open(path))
        subprocess.run([ctx.rdzv, "keygen", os.path.join(tmp, "other.key")], check=True,
                       capture_output=True)
        d["data"] = {"client.key": base64.b64encode(open(os.path.join(tmp, "other.key"), "rb")
                                                     .read()).decode()}
        open(path, "w").write(yaml.safe_dump(d))
        before = c.texts()
        p = c.run("--retire-old-client-keys", ok=False)
        assert "no key in rdzv-clients matches" in p.stderr, p.stderr
        assert not c.writes() and c.texts() == before


def check_usage_names_every_option(ctx):
    """--help lists every option the script takes."""
    p = subprocess.run(["/bin/sh", os.path.join(ctx.kdir, "make-secrets.sh"), "--help"],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 0
    script = open(os.path.join(ctx.kdir, "make-secrets.sh")).read()
    opts = set(re.findall(r"^\s+(--[a-z-]+)\)", script, re.M))
    missing = [o for o in opts if o not in p.stdout]
    assert opts and not missing, f"--help lacks {missing}"


CHECKS = [check_secrets_print_without_kubectl, check_secrets_work_together,
          check_secrets_apply_idempotent, check_secrets_stop_on_kubectl_errors,
          check_client_key_rotation, check_client_key_rotation_refusals,
          check_usage_names_every_option]


if __name__ == "__main__":
    sys.exit(manifests.run([], whole=CHECKS))
