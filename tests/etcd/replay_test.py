#!/usr/bin/env python3
"""The file journal and the etcd journal replay one stream of records into
one state. Table-driven: each case drives the same requests through the CLI
into an rdzvd on a file journal and an rdzvd on etcd, then restarts both
(each replays its journal) and compares what `rdzv status --json` and
`rdzv kv get` show: before and after the restart, and file against etcd.
One case writes enough to make both compact (--compact-mib 1), so that the
etcd snapshot's replay is covered too. One line per check (rdzvtest).

Needs RDZVD, RDZV and etcd (Debian's etcd-server); skips without."""
import json
import os
import sys
import tempfile

import etcd_cluster
import rdzvtest
from replicas import RDZVD, Replica, skipped, rdzv, spawn_join

# Fields that say how the process is now, not what was recorded: the
# clock's, the serving state the heartbeats make and what the router holds
# (soft, never journaled).
VOLATILE = {"age_s", "alive", "nccl_root", "seen_s", "last_seen_s", "serving", "state",
            "live_count", "serving_count", "not_serving", "registered", "draining",
            "router_error", "registered_count", "leaving"}


def joins(server, group, world, ranks, timeout=30):
    """Ranks of group joining at once; their assignments (None: a group
    left forming, whose joins time out)."""
    ps = [spawn_join(server, group, world, r, timeout) for r in ranks]
    out = [p.communicate(timeout=60) for p in ps]
    bad = [err for p, (_, err) in zip(ps, out) if p.returncode != 0]
    if bad and timeout < 30:
        return None
    if bad:
        raise rdzvtest.Fail("join failed: " + bad[0][-300:])
    return [json.loads(o) for o, _ in out]


def kv_put(server, group, epoch, key, value):
    rc, _, err = rdzv("kv", "put", "--server", server, "--group", group, "--epoch", str(epoch),
                      key, value)
    if rc != 0:
        raise rdzvtest.Fail("kv put failed: " + err)


def case_groups(s):
    joins(s, "a", 2, [0, 1])
    joins(s, "b", 3, [0, 1, 2])
    joins(s, "c", 4, [0, 2], timeout=1)   # forming: two of four


def case_epochs(s):
    joins(s, "e", 2, [0, 1])
    joins(s, "e", 2, [0, 1])          # new sessions: the next epoch
    kv_put(s, "e", 2, "k", "v")


def case_kv_and_delete(s):
    joins(s, "k", 1, [0])
    for i in range(20):
        kv_put(s, "k", 1, f"key{i}", f"value{i}")
    joins(s, "gone", 1, [0])
    rc, _, err = rdzv("group", "delete", "--server", s, "--group", "gone")
    if rc != 0:
        raise rdzvtest.Fail("group delete failed: " + err)


def case_compaction(s):
    joins(s, "big", 1, [0])
    for i in range(40):               # 40 x 60 KiB: past --compact-mib 1, twice
        kv_put(s, "big", 1, f"blob{i}", ("%02d" % i) * 30000)
    joins(s, "after", 2, [0, 1])


CASES = [
    ("groups complete and forming", case_groups, ()),
    ("an epoch moved on, KV in it", case_epochs, ()),
    ("KV values and a deleted group", case_kv_and_delete, ()),
    ("compacted into a snapshot", case_compaction, ("--compact-mib", "1")),
]
if os.environ.get("RDZV_REPLAY_CASE"):
    CASES = [c for c in CASES if os.environ["RDZV_REPLAY_CASE"] in c[0]]


def strip(doc):
    if isinstance(doc, dict):
        return {k: strip(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [strip(v) for v in doc]
    return doc


def first_difference(a, b):
    """Where two states first differ, for the failure message."""
    (ga, ka), (gb, kb) = a, b
    if ga != gb:
        for x, y in zip(ga + [None] * len(gb), gb + [None] * len(ga)):
            if x != y:
                return "group %s != %s" % (json.dumps(x)[:300], json.dumps(y)[:300])
    keys = sorted(set(ka) | set(kb))
    for k in keys:
        if ka.get(k) != kb.get(k):
            return "KV %s: %s != %s" % (k, (ka.get(k) or "missing")[:40], (kb.get(k) or "missing")[:40])
    return "equal"


def state(server):
    """What the server holds: its groups, and every KV value of them."""
    rc, out, err = rdzv("status", "--server", server, "--json")
    if rc != 0:
        raise rdzvtest.Fail("status failed: " + err)
    groups = strip(json.loads(out))["groups"]
    kv = {}
    for g in groups:
        for key in [f"key{i}" for i in range(20)] + [f"blob{i}" for i in range(40)] + ["k"]:
            rc, value, _ = rdzv("kv", "get", "--server", server, "--group", g["group"],
                                "--epoch", str(g["epoch"]), key)
            if rc == 0:
                kv[(g["group"], key)] = value
    return groups, kv


def main():
    if skipped():
        return rdzvtest.SKIP
    tap = rdzvtest.Report()
    with tempfile.TemporaryDirectory(prefix="rdzv-etcd-replay-") as d, \
            etcd_cluster.EtcdCluster(members=1, workdir=os.path.join(d, "etcd")) as etcd:
        for n, (name, drive, extra) in enumerate(CASES):
            file_d = rdzvtest.Rdzvd(RDZVD, os.path.join(d, f"file{n}"), "--no-nccl", *extra,
                                    start=False)
            os.makedirs(os.path.join(d, f"file{n}"), exist_ok=True)
            etcd_d = Replica(os.path.join(d, f"etcd{n}"), etcd.endpoints, f"/replay{n}", *extra)
            try:
                file_d.start()
                etcd_d.start()
                rdzvtest.wait_for(etcd_d.ready, "the etcd rdzvd to lead")
                drive(file_d.endpoint)
                drive(etcd_d.endpoint)
                before = state(file_d.endpoint), state(etcd_d.endpoint)
                file_d.restart(sig=9)
                etcd_d.restart(sig=9)
                rdzvtest.wait_for(etcd_d.ready, "the etcd rdzvd to lead again", timeout=30)
                after = state(file_d.endpoint), state(etcd_d.endpoint)
                tap.ok(before[0] == after[0], f"{name}: the file journal replays its state",
                       first_difference(before[0], after[0]))
                tap.ok(before[1] == after[1], f"{name}: the etcd journal replays its state",
                       first_difference(before[1], after[1]))
                tap.ok(after[0] == after[1] and after[0][0],
                       f"{name}: both hold the same state ({len(after[0][0])} groups, "
                       f"{len(after[0][1])} KV values)", first_difference(after[0], after[1]))
                if extra:
                    compacted = ("compaction done" in file_d.log(), "compaction done" in etcd_d.log())
                    tap.ok(all(compacted), f"{name}: both compacted (file, etcd): {compacted}")
                    # 40 puts and 3 joins were values of their own: the snapshot replaced most.
                    logs = len(etcd.get_prefix(f"/replay{n}/log/"))
                    heads = len(etcd.get_prefix(f"/replay{n}/head"))
                    tap.ok(heads == 1 and logs < 20, f"{name}: etcd holds a head and {logs} log "
                           "values after it, not every value put")
            finally:
                file_d.stop()
                etcd_d.stop()
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
