#!/usr/bin/env python3
"""Router registration across a takeover: two rdzvd replicas on a 3-member
etcd, both allowed to drive a real HAProxy (Debian's, on loopback). Two
ranks join with the router named and heartbeat through every replica, the
Python client saying their engines serve; the leader registers both. The
leader is killed (SIGKILL): the next leader knows the group's router from
the journal in etcd, keeps the two registered, and when rank 1 says its
engine stopped serving, drains and removes it while rank 0 stays. Only the
leader drives: the standby never calls the router. One line per check
(rdzvtest). Needs RDZVD, RDZV, RDZV_LIBRARY, etcd and haproxy; skips
without either."""
import os
import signal
import sys
import tempfile
import threading
import time

import rdzv
import rdzvtest
import etcd_cluster
from haproxy_router import Haproxy, haproxy_exe, server_name
from replicas import Replicas, skipped


def main():
    if skipped():
        return rdzvtest.SKIP
    exe = haproxy_exe()
    if not exe:
        return rdzvtest.skip_all("haproxy is not installed (apt-get install haproxy)")
    report = rdzvtest.Report()
    with tempfile.TemporaryDirectory() as d, \
            etcd_cluster.EtcdCluster(members=3, workdir=os.path.join(d, "etcd")) as etcd:
        hap = Haproxy(exe, d)
        router = "haproxy://%s#engines" % hap.sock
        reps = Replicas(d, etcd.endpoints, n=2,
                        extra=("--router-allow", "haproxy://" + hap.sock,
                               "--router-interval", "1", "--router-drain", "3"))
        serving = {0: True, 1: True}
        quiet = set()          # ranks whose heartbeats are held back
        stop = threading.Event()
        try:
            leader = reps.start()
            servers = reps.servers()
            clients = [rdzv.Client(servers, router=router) for _ in range(2)]
            got = {}
            joins = [threading.Thread(target=lambda r=r: got.update(
                {r: clients[r].join("g", 2, r, host="127.0.0.1", node="n%d" % r, timeout=30)}))
                for r in range(2)]
            for t in joins:
                t.start()
            for t in joins:
                t.join(60)
            rdzvtest.check(len(got) == 2, "both ranks joined: %s" % got)

            def beat():
                while not stop.is_set():
                    for r in set(range(2)) - quiet:
                        try:
                            clients[r].heartbeat("g", r, got[r].epoch, serving=serving[r])
                        except rdzv.RdzvError:
                            pass     # the takeover: the next beat finds the new leader
                    stop.wait(0.5)
            beater = threading.Thread(target=beat)
            beater.start()
            names = [server_name("g", 0), server_name("g", 1)]
            apis = ["127.0.0.1:%d" % got[r].named_ports.api for r in range(2)]
            rdzvtest.wait_for(lambda: all(n in hap.servers() for n in names),
                              "both ranks in HAProxy", timeout=30, step=0.1)
            report.ok([hap.servers()[n][0] for n in names] == apis,
                      "the leader registers both ranks at their api ports", hap.servers())
            standby = [r for r in reps.all if r is not leader][0]
            report.ok("router_error" not in standby.log() and "router" not in standby.log_since()
                      .replace("--router", ""),
                      "the standby never drove the router", standby.log_since()[-400:])

            # Rank 1 says nothing across the takeover: the new leader has no
            # word on its engine for its first passes, and must not drop it.
            quiet.add(1)
            t0 = time.monotonic()
            leader.stop(signal.SIGKILL)
            new = reps.wait_leader(other_than=leader)
            took = time.monotonic() - t0
            seen = []
            for _ in range(30):    # 3 s: three passes of the new leader
                seen.append(sorted(hap.servers()))
                time.sleep(0.1)
            quiet.discard(1)
            report.ok(all(s == names for s in seen),
                      "leader killed: %s leads %.1f s later; both ranks stay registered through "
                      "its first passes, rank 1 before its next heartbeat too"
                      % (new.endpoint, took), [s for s in seen if s != names][:3])
            serving[1] = False
            t0 = time.monotonic()
            rdzvtest.wait_for(lambda: names[1] not in hap.servers(), "rank 1 off HAProxy",
                              timeout=30, step=0.1)
            # The leader tells its core after HAProxy has done it: status follows.
            with rdzv.Client(new.endpoint) as c:
                try:
                    rdzvtest.wait_for(lambda: [m["registered"] for m in c.status("g")[0]["members"]]
                                      == [True, False], "rank 1 unregistered in status",
                                      timeout=30, step=0.1)
                except rdzvtest.Fail:
                    pass
                g = c.status("g")[0]
            report.ok(names[0] in hap.servers()
                      and [m["registered"] for m in g["members"]] == [True, False]
                      and g["router"] == router,
                      "after the takeover rank 1 stops serving: the new leader drains and "
                      "removes it (%.1f s), rank 0 stays" % (time.monotonic() - t0), g)
        except rdzvtest.Fail as e:
            report.ok(False, str(e))
        finally:
            stop.set()
            reps.stop()
            hap.stop()
    return report.done()


if __name__ == "__main__":
    sys.exit(main())
