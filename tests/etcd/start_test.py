#!/usr/bin/env python3
"""rdzvd --etcd started while etcd cannot serve it. A 3-member etcd with two
members killed (no quorum: the last one takes calls and answers none):
rdzvd logs that it tries again, with back-off, instead of exiting; once the
members are back it comes up, leads and serves a join. Without quorum for
good it gives up at its bound (12 leases) with exit 1 and says why. A
wrong address is no passing trouble: it still exits at once. One line per
check (rdzvtest).

Needs RDZVD, RDZV and etcd (Debian's etcd-server); skips without."""
import os
import sys
import tempfile
import time

import etcd_cluster
import rdzvtest
from replicas import Replica, skipped, rdzv
from rdzvtest import wait_for

LEASE_S = 2
# rdzvd's bound at start is 12 leases; a margin for the last call and the exit.
GIVE_UP_S = 12 * LEASE_S + 15
RETRY = "etcd is electing a leader or has no quorum: trying again"


def exited(replica, timeout):
    """The replica's exit status once it exits, None if it runs on."""
    try:
        return replica.proc.wait(timeout=timeout)
    except Exception:  # subprocess.TimeoutExpired
        return None


def comes_up_with_quorum(tap, d, etcd):
    etcd.kill(1)
    etcd.kill(2)
    r = Replica(os.path.join(d, "a"), etcd.endpoints, "/rdzv-start", lease=LEASE_S)
    r.spawn()
    wait_for(lambda: RETRY in r.log_since() or not r.alive(), "rdzvd to try etcd again", timeout=30)
    tap.ok(r.alive() and RETRY in r.log_since(),
           "without quorum at start rdzvd logs that it tries again, and keeps running",
           r.log_since()[-600:])
    retries = r.log_since().count(RETRY)
    etcd.start(1)
    etcd.start(2)
    wait_for(lambda: r.ready() or not r.alive(), "rdzvd to lead once etcd has quorum", timeout=60)
    tap.ok(r.ready(), "quorum restored: it comes up and leads (/readyz 200)", r.log_since()[-600:])
    rc, err = None, "it never served"
    if r.ready():
        rc, _, err = rdzv("join", "--server", open(r.ep_file).read().strip(), "--group", "s",
                          "--world", "1", "--rank", "0", "--timeout", "20")
    tap.ok(rc == 0, "and serves a join", err)
    tap.note(f"{retries} retries logged before etcd had quorum again")
    return r


def gives_up_at_its_bound(tap, d, etcd):
    etcd.kill(1)
    etcd.kill(2)
    r = Replica(os.path.join(d, "b"), etcd.endpoints, "/rdzv-start-b", lease=LEASE_S)
    t0 = time.monotonic()
    r.spawn()
    status = exited(r, GIVE_UP_S)
    took = time.monotonic() - t0
    log = r.log_since()
    tap.ok(status == 1 and "giving up" in log and RETRY in log,
           "without quorum for good it exits 1 at its bound, saying why (%.1f s)" % took,
           f"status {status}: {log[-600:]}")
    if status is None:
        r.stop()
    etcd.start(1)
    etcd.start(2)


def wrong_address_fails_at_once(tap, d):
    r = Replica(os.path.join(d, "c"), "http://127.0.0.1:1", "/rdzv-start-c", lease=LEASE_S)
    r.spawn()
    status = exited(r, 30)
    tap.ok(status == 1 and RETRY not in r.log_since(),
           "a wrong --etcd address is not tried again: exit 1 at once",
           f"status {status}: {r.log_since()[-400:]}")
    if status is None:
        r.stop()


def main():
    if skipped():
        return rdzvtest.SKIP
    tap = rdzvtest.Report()
    with tempfile.TemporaryDirectory(prefix="rdzv-etcd-start-") as d, \
            etcd_cluster.EtcdCluster(members=3, workdir=os.path.join(d, "etcd")) as etcd:
        up = None
        try:
            up = comes_up_with_quorum(tap, d, etcd)
            gives_up_at_its_bound(tap, d, etcd)
            wrong_address_fails_at_once(tap, d)
        finally:
            if up:
                up.stop()
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
