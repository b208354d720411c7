#!/usr/bin/python3
"""A journal written by an earlier rdzvd replays into the state that rdzvd
itself rebuilt from it. The fixture (journal-0.1.0-825b195.gz) was written
by rdzvd at commit 825b195 and holds every record kind that version wrote,
live and compacted: groups, joins, per-rank "plan" records from compaction
and "plans" from a release after it, epochs, completes, KV, a delete and a
forming group. The expected state beside it is what that rdzvd answered
after a restart on the same journal.

    journal_compat.py check --rdzvd EXE --rdzv EXE FIXTURE
    PYTHONPATH=tests/lib journal_compat.py write --rdzvd OLD_EXE --rdzv OLD_EXE FIXTURE
        (made the fixture)

check is one case (tests/lib/rdzvtest): a TAP line, exit 0 pass, 1 fail."""
import argparse
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import rdzvtest
from rdzvtest import Fail

FLAGS = ["--no-nccl", "--port-base", "24000", "--port-limit", "26000", "--ports-per-rank", "4",
         "--compact-mib", "1"]
# The keys each group had when the fixture was written.
KEYS = {"a": (1, ["k1"] + ["big%d" % i for i in range(1, 21)]), "d": (2, ["kd"]), "e": (1, ["ke"])}


def with_rdzvd(opts, state, fn):
    """fn(endpoint) against an rdzvd on state, stopped after."""
    d = rdzvtest.Rdzvd(opts.rdzvd, os.path.dirname(state), *FLAGS, state=state)
    try:
        return fn(d.endpoint)
    finally:
        d.stop()


def rdzv(opts, *args):
    return subprocess.run([opts.rdzv, *args], capture_output=True, text=True, timeout=30)


def state_of(opts, endpoint):
    """What rdzvd says of its groups and their KV, without what depends on
    the clock (whether a member heartbeat lately) and without the notes
    status derives from that state and the older rdzvd did not make
    (plan_overlaps: the fixture's ranks share 127.0.0.1 under several node
    names; fuzz_core checks that replay derives the same notes; missing,
    which must agree with joined, and age_s, a clock; and the serving
    state, counts and per-rank fields, soft state rebuilt from heartbeats
    that a restart starts without)."""
    st = rdzv(opts, "status", "--json", "--server", endpoint)
    assert st.returncode == 0, st.stderr
    groups = json.loads(st.stdout)["groups"]
    for g in groups:
        g.pop("plan_overlaps", None)
        g.pop("age_s", None)
        for soft in ("state", "live_count", "serving_count", "not_serving", "router_error",
                     "registered_count", "leaving"):
            g.pop(soft, None)
        # Journals of those versions name no router: null now.
        assert g.pop("router", None) is None, g
        left = [r for r in range(g["world"]) if r not in g["joined"]]
        assert g.pop("missing") == left[:64] and g.pop("missing_count") == len(left), g
        for m in g.get("members", []):
            for soft in ("alive", "serving", "last_seen_s", "registered", "draining"):
                m.pop(soft, None)
    kv = {}
    for group, (epoch, keys) in KEYS.items():
        for k in keys:
            r = rdzv(opts, "kv", "get", "--server", endpoint, "--group", group, "--epoch",
                     str(epoch), k)
            # Values up to 60 kB: their length and digest keep the fixture small.
            kv["%s/%d/%s" % (group, epoch, k)] = "%d %s" % (
                len(r.stdout), hashlib.sha256(r.stdout.encode()).hexdigest()[:16]) \
                if r.returncode == 0 else "error %d" % r.returncode
    return {"groups": sorted(groups, key=lambda g: g["group"]), "kv": kv}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["check", "write"])
    ap.add_argument("--rdzvd", required=True)
    ap.add_argument("--rdzv", required=True)
    ap.add_argument("fixture", help="the .gz journal; FIXTURE.expected.json beside it")
    opts = ap.parse_args()
    if opts.mode == "write":
        return write(opts)
    return rdzvtest.run([("replays as rdzvd 825b195 did, before and after compaction",
                          lambda: check(opts))])


def expected_path(opts):
    return opts.fixture[:-len(".gz")] + ".expected.json"


def replayed(opts, tmp):
    """The state an rdzvd rebuilds from the fixture, in tmp/state."""
    state = os.path.join(tmp, "state")
    os.mkdir(state, 0o700)
    with gzip.open(opts.fixture) as src, open(os.path.join(state, "journal"), "wb") as dst:
        shutil.copyfileobj(src, dst)
    return state, with_rdzvd(opts, state, lambda ep: state_of(opts, ep))


def write(opts):
    with tempfile.TemporaryDirectory(prefix="rdzv-compat-") as tmp:
        _, got = replayed(opts, tmp)
    with open(expected_path(opts), "w") as f:
        json.dump(got, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote", expected_path(opts))
    return 0


def check(opts):
    with open(expected_path(opts)) as f:
        want = json.load(f)
    with tempfile.TemporaryDirectory(prefix="rdzv-compat-") as tmp:
        state, got = replayed(opts, tmp)
        same(got, want, "replayed")
        # The journal (1.4 MB) is past --compact-mib 1: the next commit, a
        # new group's join, rewrites it as compaction's records. Replayed
        # again, the state must be the same, with that group beside it.
        join = with_rdzvd(opts, state, lambda ep: rdzv(
            opts, "join", "--server", ep, "--group", "z", "--world", "1", "--rank", "0",
            "--nccl-id", "none"))
        assert join.returncode == 0, join.stderr
        log = open(os.path.join(tmp, "rdzvd.log")).read()
        if "compaction done" not in log:
            raise Fail("no compaction: " + log)
        again = with_rdzvd(opts, state, lambda ep: state_of(opts, ep))
        again["groups"] = [g for g in again["groups"] if g["group"] != "z"]
        same(again, want, "compacted and replayed")
    return "%d groups and %d keys" % (len(want["groups"]), len(want["kv"]))


def same(got, want, what):
    for part in ("groups", "kv"):
        if got[part] != want[part]:
            raise Fail("%s: %s differ\n got  %s\n want %s" % (
                what, part, json.dumps(got[part], sort_keys=True)[:2000],
                json.dumps(want[part], sort_keys=True)[:2000]))


if __name__ == "__main__":
    sys.exit(main())
