#!/usr/bin/env python3
"""rdzvd on a 3-member etcd that loses members. One member killed during a
rendezvous: the group still forms. Two killed: requests fail cleanly with
"unavailable" instead of hanging or being acknowledged unrecorded. Both
back: rdzvd serves again, and everything acknowledged before is there.
One line per check (rdzvtest).

Needs RDZVD, RDZV and etcd (Debian's etcd-server); skips without."""
import os
import sys
import tempfile
import time

import etcd_cluster
import rdzvtest
from replicas import Replicas, http_status, skipped, rdzv, spawn_join
from rdzvtest import wait_for


def main():
    if skipped():
        return rdzvtest.SKIP
    tap = rdzvtest.Report()
    with tempfile.TemporaryDirectory(prefix="rdzv-etcd-quorum-") as d, \
            etcd_cluster.EtcdCluster(members=3, workdir=os.path.join(d, "etcd")) as etcd:
        reps = Replicas(d, etcd.endpoints, n=2, prefix="/rdzv-quorum")
        try:
            leader = reps.start()
            servers = leader.endpoint     # it stays the leader throughout
            first = [spawn_join(servers, "q", 4, r) for r in (0, 1)]
            time.sleep(0.5)
            etcd.kill(2)
            rest = [spawn_join(servers, "q", 4, r) for r in (2, 3)]
            results = [p.communicate(timeout=90) + (p.returncode,) for p in first + rest]
            tap.ok(all(rc == 0 for _, _, rc in results),
                   "one etcd member killed during a rendezvous: all 4 ranks assigned",
                   [err[-200:] for _, err, rc in results if rc])
            rc, _, err = rdzv("kv", "put", "--server", servers, "--group", "q", "--epoch", "1",
                              "a", "1")
            tap.ok(rc == 0, "with 2 of 3 members a put is acknowledged", err)

            etcd.kill(1)
            t0 = time.monotonic()
            rc, _, err = rdzv("kv", "put", "--server", servers, "--group", "q", "--epoch", "1",
                              "--timeout", "8", "b", "2", timeout=60)
            tap.ok(rc != 0 and "unavailable" in err,
                   "with 1 of 3 members a put fails with unavailable (%.1f s)"
                   % (time.monotonic() - t0), f"rc {rc}: {err.strip()[-300:]}")
            rc, _, err = rdzv("join", "--server", servers, "--group", "q2", "--world", "1",
                              "--rank", "0", "--timeout", "8", timeout=60)
            tap.ok(rc != 0 and "unavailable" in err, "and so does a join", f"rc {rc}: {err[-300:]}")
            tap.ok(leader.alive(), "the leader keeps running without a quorum")
            # Its commit has waited for seconds by now: that is etcd's failure, and a
            # liveness probe that restarted rdzvd for it would not help.
            tap.ok(http_status(leader.http_port, "/healthz") == 200,
                   "and its /healthz stays 200 (nothing for the kubelet to restart)")

            etcd.start(1)
            etcd.start(2)
            wait_for(lambda: len(etcd.healthy_members()) == 3, "etcd to be whole again", timeout=60)
            rc, out, err = rdzv("kv", "get", "--server", servers, "--group", "q", "--epoch", "1",
                                "--timeout", "30", "a", timeout=60)
            tap.ok(rc == 0 and out.strip() == "1",
                   "members back: what was acknowledged before is there", f"rc {rc}: {out}{err}")
            rc, _, err = rdzv("kv", "put", "--server", servers, "--group", "q", "--epoch", "1",
                              "--timeout", "30", "c", "3", timeout=60)
            tap.ok(rc == 0, "and puts are acknowledged again", err)
            rc, out, err = rdzv("join", "--server", servers, "--group", "q3", "--world", "1",
                                "--rank", "0", "--timeout", "30", timeout=60)
            tap.ok(rc == 0 and '"epoch":1' in out, "and a new group forms", err)
        finally:
            reps.stop()
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
