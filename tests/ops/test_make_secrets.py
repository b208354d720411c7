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
# here): `get secret NAME` and `apply -f FILE` on a directory, one file per
# Secret; anything else goes to the real kubectl (create --dry-run=client).
KUBECTL_STANDIN = """#!/bin/sh
store=$STORE
while [ "${1:-}" = -n ]; do shift 2; done
case "$1 $2" in
"get secret") test -f "$store/$3"; exit ;;
"apply -f")
    python3 - "$store" "$3" <<'PY'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[2])):
    if d:
        open("%s/%s" % (sys.argv[1], d["metadata"]["name"]), "w").write(yaml.safe_dump(d))
        print("secret/%s configured" % d["metadata"]["name"])
PY
    exit ;;
esac
exec "$REAL_KUBECTL" "$@"
"""


def check_secrets_apply_idempotent(ctx):
    """Run twice, nothing changes; one key Secret lost, a fresh set of the
    four keys (the HTTP token kept); the HTTP token lost, only it made anew;
    --rotate, a fresh set of all five."""
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        os.mkdir(store)
        bindir = os.path.join(tmp, "bin")
        os.mkdir(bindir)
        with open(os.path.join(bindir, "kubectl"), "w") as f:
            f.write(KUBECTL_STANDIN)
        os.chmod(os.path.join(bindir, "kubectl"), 0o755)
        env = dict(os.environ, RDZV=ctx.rdzv, STORE=store, REAL_KUBECTL=shutil.which("kubectl"),
                   PATH=bindir + ":" + os.environ["PATH"])

        def run(*args):
            p = subprocess.run(["/bin/sh", os.path.join(ctx.kdir, "make-secrets.sh"), *args, "-n", "llm"],
                               env=env, capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, p.stderr
            return {n: open(os.path.join(store, n)).read() for n in sorted(os.listdir(store))}
        first = run()
        assert set(first) == set(ctx.secrets), sorted(first)
        assert run() == first, "a second run changed the Secrets"
        os.unlink(os.path.join(store, "rdzv-clients"))
        third = run()
        keys = [n for n in first if n != "rdzv-http-token"]
        assert set(third) == set(first) and all(third[n] != first[n] for n in keys), \
            "a partial set of keys was not replaced whole"
        assert third["rdzv-http-token"] == first["rdzv-http-token"], "the HTTP token changed with the keys"
        os.unlink(os.path.join(store, "rdzv-http-token"))
        fourth = run()
        assert all(fourth[n] == third[n] for n in keys), "a lost HTTP token changed the keys"
        assert fourth["rdzv-http-token"] != third["rdzv-http-token"], "the HTTP token was not made anew"
        fifth = run("--rotate")
        assert all(fifth[n] != fourth[n] for n in fourth), "--rotate kept a Secret"


CHECKS = [check_secrets_print_without_kubectl, check_secrets_work_together,
          check_secrets_apply_idempotent]


if __name__ == "__main__":
    sys.exit(manifests.run([], whole=CHECKS))
