#!/usr/bin/env python3
"""The etcd harness itself, before any rdzvd test trusts it: a real 3-member
cluster on loopback keeps acknowledging writes with one member killed,
refuses them (within the client's timeout, not by hanging) with two killed,
has kept what it acknowledged once the two restart, and leaves no process
or directory behind. Also pins the JSON-gateway behaviours the etcd journal
leans on, so that another etcd release that changes them fails here first.
One line per check (rdzvtest), each as it happens, so a hang still shows
how far it got. Needs only etcd (Debian's etcd-server); skips without it."""
import os
import signal
import sys
import time

import rdzvtest
from etcd_cluster import EtcdCluster, GatewayError, b64, etcd_available

OVERALL_S = 150       # the whole test, start to last member reaped
PLAN = 12


class Timeout(Exception):
    pass


def on_alarm(signum, frame):
    raise Timeout(f"the test ran past {OVERALL_S} s")


def put_until_acknowledged(c, key, value, within):
    """Puts until one is acknowledged; (seconds taken, last error). Each try
    gives up after 2 s: a put that reaches a follower while the leader is
    dead is dropped, and etcd would only answer 'request timed out' after
    its own 7 s, though a new leader is there in about 2."""
    t0, err = time.monotonic(), None
    while time.monotonic() - t0 < within:
        try:
            c.put(key, value, timeout=2)
            return time.monotonic() - t0, None
        except GatewayError as e:
            err = e
            time.sleep(0.2)
    return None, err


def txn_create(c, key, value):
    """The journal's fencing primitive: put key only if it does not exist."""
    return c.call("kv/txn", {
        "compare": [{"target": "CREATE", "key": b64(key), "create_revision": "0"}],
        "success": [{"request_put": {"key": b64(key), "value": b64(value)}}]})


def processes_under(path):
    """Pids of the processes whose command line names path (the members'
    data dirs are in it), read from /proc."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if path.encode() in f.read():
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


def exercise(c, tap, pids):
    """The checks while the cluster runs; pids collects every member process."""
    pids.update(m.proc.pid for m in c.members)
    tap.ok(c.healthy_members() == [0, 1, 2] and c.endpoints.count("http://127.0.0.1:") == 3,
           "3 members healthy on loopback: " + c.endpoints)

    rev = c.put("/harness/a", "1")
    tap.ok(c.get("/harness/a") == b"1" and c.get("/harness/absent") is None and rev > 1,
           "a put is read back through the gateway; an absent key is None")
    c.put("/harness/b", b"\x00\xff")
    c.put("/harnessX", "outside the prefix")
    got = c.get_prefix("/harness/")
    tap.ok(got == [("/harness/a", b"1"), ("/harness/b", b"\x00\xff")],
           "get_prefix: the keys under the prefix only, in order, values as bytes", got)

    first, second = txn_create(c, "/harness/lock", "x"), txn_create(c, "/harness/lock", "y")
    tap.ok(first.get("succeeded") is True and "succeeded" not in second
           and isinstance(first["header"]["revision"], str) and c.get("/harness/lock") == b"x",
           "gateway: a txn whose compare fails leaves 'succeeded' out; int64 comes as a string",
           f"{first}\n{second}")

    leader = c.leader()
    down1 = leader if leader is not None else 0
    c.kill(down1)
    took, err = put_until_acknowledged(c, "/harness/during", "2 of 3", within=30)
    tap.ok(took is not None, f"member {down1} (the leader: {leader is not None}) killed: "
           f"a put is acknowledged by the other two ({took or 0:.1f} s)", err)
    tap.ok(c.healthy_members() == [i for i in range(3) if i != down1],
           "healthy_members names the two left", c.healthy_members())

    down2 = c.running_members()[0]
    c.kill(down2)
    t0 = time.monotonic()
    try:
        c.put("/harness/lost", "1 of 3", timeout=2)
        refused, err = False, "acknowledged without a quorum"
    except GatewayError as e:
        refused, err = True, e
    took = time.monotonic() - t0
    tap.ok(refused and took < 4 and c.healthy_members() == [],
           f"a second killed: a put fails within its 2 s timeout ({took:.1f} s: {err})", err)

    t0 = time.monotonic()
    c.start(down1)
    c.start(down2)
    pids.update(m.proc.pid for m in c.members)
    tap.ok(c.healthy_members() == [0, 1, 2],
           f"both restarted on their data dirs: 3 healthy again ({time.monotonic() - t0:.1f} s)")
    tap.ok(all(c.get("/harness/during", member=i) == b"2 of 3" for i in range(3)),
           "what was acknowledged with one member down is read back from every member")
    took, err = put_until_acknowledged(c, "/harness/after", "3 of 3", within=30)
    tap.ok(took is not None and c.get("/harness/after") == b"3 of 3",
           f"and puts are acknowledged again ({took or 0:.1f} s)", err)


def main():
    have, why = etcd_available()
    if not have:
        return rdzvtest.skip_all(why)
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(OVERALL_S)
    t0 = time.monotonic()
    tap, pids, workdir, why = rdzvtest.Report(PLAN), set(), None, "an earlier check failed"
    try:
        with EtcdCluster(members=3) as c:
            workdir = c.workdir
            exercise(c, tap, pids)
    except Exception as e:     # Timeout, EtcdClusterError (with the member logs), ...
        why = f"{type(e).__name__}: {e}"
    finally:
        signal.alarm(0)
    if tap.n == PLAN - 2:
        left = [p for p in pids if os.path.exists(f"/proc/{p}")] + processes_under(workdir)
        tap.ok(not left, f"no member left running ({len(pids)} started)", left)
        tap.ok(not os.path.exists(workdir), "the temporary workdir is removed", workdir)
    tap.note(f"{time.monotonic() - t0:.1f} s in all")
    return tap.done(why)


if __name__ == "__main__":
    sys.exit(main())
