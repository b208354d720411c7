#!/usr/bin/env python3
"""A resize across a takeover: two rdzvd replicas on a 3-member etcd. A
world-2 group forms; `group_resize` to 3 is recorded; ranks 0 and 1 rejoin
(with the world they were started with) and wait for rank 2. The leader is
killed (SIGKILL) while they wait. The next leader holds one epoch of world
3, forming, rank 2 missing, ranks 0 and 1 on their plans; the waiting
ranks' clients find it by themselves; rank 2 then joins and that one epoch
forms, each rank with the plan it had, the store at its next place in rank
0's plan. One line per check (rdzvtest). Needs RDZVD, RDZV, RDZV_LIBRARY
and etcd; skips without etcd."""
import os
import signal
import sys
import tempfile
import threading

import rdzv
import rdzvtest
import etcd_cluster
from replicas import Replicas, skipped


def main():
    if skipped():
        return rdzvtest.SKIP
    report = rdzvtest.Report()
    with tempfile.TemporaryDirectory() as d, \
            etcd_cluster.EtcdCluster(members=3, workdir=os.path.join(d, "etcd")) as etcd:
        reps = Replicas(d, etcd.endpoints, n=2, extra=("--ports-per-rank", "16"))
        try:
            leader = reps.start()
            servers = reps.servers()
            clients = [rdzv.Client(servers) for _ in range(3)]

            def join_all(ranks, world, out):
                threads = [threading.Thread(target=lambda r=r: out.update(
                    {r: clients[r].join("g", world, r, host="127.0.0.1", node="n",
                                        timeout=90)})) for r in ranks]
                for t in threads:
                    t.start()
                return threads

            first = {}
            for t in join_all((0, 1), 2, first):
                t.join(60)
            rdzvtest.check(len(first) == 2, "epoch 1 formed: %s" % first)
            plans = {r: first[r].ports for r in (0, 1)}

            epoch = clients[2].group_resize("g", 3)
            second = {}
            waiting = join_all((0, 1), 2, second)

            def rejoined():
                g = clients[2].status("g")[0]
                return g if g["epoch"] == 2 and g["joined"] == [0, 1] else None
            rdzvtest.wait_for(rejoined, "ranks 0 and 1 rejoined epoch 2", timeout=30)
            report.ok(epoch == 2 and not second,
                      "resized to 3 (epoch 2); ranks 0 and 1 rejoined and wait for rank 2",
                      (epoch, second))

            leader.stop(signal.SIGKILL)
            new = reps.wait_leader(other_than=leader)
            with rdzv.Client(new.endpoint) as c:
                g = c.status("g")[0]
            ports = {m["rank"]: m["ports"] for m in g["members"]}
            report.ok(g["epoch"] == 2 and g["world"] == 3 and not g["complete"]
                      and g["missing"] == [2] and sorted(ports) == [0, 1]
                      and all(ports[r][0] == plans[r][0] for r in (0, 1)),
                      "leader killed while they wait: the next leader holds epoch 2 of world 3, "
                      "forming, rank 2 missing, ranks 0 and 1 on their plans", g)

            for t in join_all((2,), 3, second):
                t.join(60)
            for t in waiting:
                t.join(60)
            with rdzv.Client(new.endpoint) as c:
                g = c.status("g")[0]
            a = [second.get(r) for r in range(3)]
            report.ok(all(a) and {x.epoch for x in a} == {2} and {x.world for x in a} == {3}
                      and g["epoch"] == 2 and g["complete"]
                      and all(a[r].ports == plans[r] for r in (0, 1))
                      and not set(a[2].ports) & (set(plans[0]) | set(plans[1])),
                      "rank 2 joined: the one epoch 2 formed for all three (none after it), "
                      "ranks 0 and 1 on the plans they had, rank 2 on its own",
                      ([(x.epoch, x.world, x.ports[:2]) for x in a if x], g["epoch"]))
            store = a[0].named_ports.store
            report.ok(all(x.named_ports.store == store == plans[0][0] + 3 for x in a)
                      and first[0].named_ports.store == plans[0][0],
                      "the store moved from rank 0's P (epoch 1) to P+3 (epoch 2): %d -> %d"
                      % (first[0].named_ports.store, store), [x.named_ports for x in a])
            for c in clients:
                c.close()
        except rdzvtest.Fail as e:
            report.ok(False, str(e))
        finally:
            reps.stop()
    return report.done()


if __name__ == "__main__":
    sys.exit(main())
