#!/usr/bin/env python3
"""A routed group grows 4 -> 6 -> 4 behind a real HAProxy (Debian's, on
loopback, as router_haproxy_test) while requests keep coming, and none is
lost. Four elastic agents (--elastic) run counting engines; `rdzv group
resize --world 6` moves the group to its next epoch, two new agents join
with --world 6, and their engines reach HAProxy only once they serve. The
four keep their engines and stay registered throughout. `rdzv group
resize --world 4` then drops ranks 4 and 5: status lists them as leaving,
the router drains and removes them while their engines still answer, and
only then do their agents stop the engines (exit 4). Load runs from before
the first resize to after the last agent exits; every request must be
answered 200, and ranks 4 and 5 must have served some. One line per check
(rdzvtest). Without haproxy the test skips, saying so. Needs RDZVD, RDZV and
RDZV_SHIM."""
import collections
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import rdzvtest
from engines import COUNTING as ENGINE
from haproxy_router import Haproxy, haproxy_exe, server_name

INTERVAL = 1          # the agents' --health-interval and rdzvd's --router-interval


def main():
    rdzvd, rdzv, shim = os.environ["RDZVD"], os.environ["RDZV"], os.environ["RDZV_SHIM"]
    exe = haproxy_exe()
    if not exe:
        return rdzvtest.skip_all("haproxy is not installed (apt-get install haproxy)")
    tmp = tempfile.TemporaryDirectory()
    hap = Haproxy(exe, tmp.name)
    router = "haproxy://%s#engines" % hap.sock
    base = 25000 + os.getpid() % 40 * 48
    d = rdzvtest.Rdzvd(rdzvd, tmp.name, "--no-nccl", "--port-base", str(base),
                       "--ports-per-rank", "16", "--port-limit", str(base + 512),
                       "--dead-after", "4", "--router-allow", "haproxy://" + hap.sock,
                       "--router-interval", str(INTERVAL), "--router-drain", "10")
    health = os.path.join(tmp.name, "health-")
    report = rdzvtest.Report()
    agents = {}

    def agent(rank, world):
        agents[rank] = subprocess.Popen(
            [rdzv, "agent", "--server", d.endpoint, "--group", "g", "--world", str(world),
             "--rank", str(rank), "--host", "127.0.0.1", "--node", "host-a",
             "--socket", os.path.join(tmp.name, "a%d.sock" % rank), "--shim", shim,
             "--port-range", "%d-%d" % (base, base + 512), "--heartbeat", "1",
             "--health-interval", str(INTERVAL), "--router", router, "--drain-timeout", "20",
             "--elastic", "--on-epoch-exec", "true",
             "--", sys.executable, "-c", ENGINE],
            env=dict(os.environ, HEALTH_FILE=health), stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(tmp.name, "agent%d.log" % rank), "w"), text=True)

    def until(pred, what, timeout=30):
        return rdzvtest.until_status(rdzv, d.endpoint, "g", pred, what, timeout)

    def resize(world):
        return subprocess.run([rdzv, "group", "resize", "--server", d.endpoint, "--group", "g",
                               "--world", str(world)], capture_output=True, text=True,
                              timeout=30)

    def count(api):
        with urllib.request.urlopen("http://%s/count" % api, timeout=5) as r:
            return int(r.read())

    # The load: two clients, one request after another, from before the
    # first resize to after the shrink is over; which rank answered each.
    stop = threading.Event()
    codes, ranks = collections.Counter(), collections.Counter()

    def load():
        while not stop.is_set():
            code, body = hap.get()
            codes[code] += 1
            if code == 200:
                ranks[body] += 1
    threads = [threading.Thread(target=load) for _ in range(2)]

    try:
        for r in range(4):
            agent(r, 4)
        g, took = until(lambda s: s.get("registered_count") == 4 and s.get("state") == "serving",
                        "four ranks registered", timeout=60)
        report.ok(g["epoch"] == 1 and sorted(hap.servers()) == sorted(server_name("g", r)
                                                                      for r in range(4)),
                  "four elastic ranks serving and registered in HAProxy (%.1f s)" % took,
                  (g, hap.servers()))
        for t in threads:
            t.start()
        time.sleep(1)

        # Grow: the four move to epoch 2 and stay registered; the two new
        # ranks are added once their engines answer.
        watching, seen = threading.Event(), []

        def watch():
            while not watching.is_set():
                seen.append(set(hap.servers()))
                time.sleep(0.05)
        watcher = threading.Thread(target=watch)
        watcher.start()
        p = resize(6)
        # The new ranks do not come at once: the group forms, naming them,
        # and the four go on serving the old epoch's requests meanwhile.
        time.sleep(3 * INTERVAL)
        g = rdzvtest.group_status(rdzv, d.endpoint, "g")
        report.ok(p.returncode == 0 and not g["complete"] and g["missing"] == [4, 5]
                  and g["registered_count"] == 4 and codes.get(None, 0) == 0,
                  "rdzv group resize --world 6, ranks 4 and 5 not started yet: epoch 2 forming "
                  "with them missing, ranks 0-3 still registered and answering (%d requests so "
                  "far)" % sum(codes.values()), (g, codes))
        agent(4, 6)
        agent(5, 6)
        g, took = until(lambda s: s.get("epoch") == 2 and s.get("registered_count") == 6
                        and s.get("state") == "serving", "six ranks registered", timeout=60)
        watching.set()
        watcher.join()
        first4 = {server_name("g", r) for r in range(4)}
        report.ok(p.returncode == 0 and sorted(hap.servers()) == sorted(
                      server_name("g", r) for r in range(6))
                  and all(first4 <= s for s in seen),
                  "grown to 6: epoch 2, ranks 4 and 5 registered once serving (%.1f s); ranks "
                  "0-3 never left HAProxy (%d looks)" % (took, len(seen)),
                  (p.stdout, p.stderr, g, [s for s in seen if not first4 <= s][:3]))
        apis = {m["rank"]: "127.0.0.1:%d" % (m["ports"][0] + 2) for m in g["members"]}
        before = {r: count(apis[r]) for r in (4, 5)}
        t0 = time.monotonic()
        time.sleep(2)
        # However slowly the load runs here, until both have served some.
        try:
            rdzvtest.wait_for(lambda: all(count(apis[r]) > before[r] for r in (4, 5)),
                              "ranks 4 and 5 to serve", timeout=30, step=0.1)
        except rdzvtest.Fail:
            pass
        served = {r: count(apis[r]) - before[r] for r in (4, 5)}
        report.ok(all(n > 0 for n in served.values()),
                  "ranks 4 and 5 answer their share: %d and %d requests in %.1f s"
                  % (served[4], served[5], time.monotonic() - t0), served)

        # Shrink: ranks 4 and 5 leave the router before their engines stop.
        t0 = time.monotonic()
        p = resize(4)
        g = rdzvtest.group_status(rdzv, d.endpoint, "g")
        leaving = sorted(l["rank"] for l in g.get("leaving", []))
        table = subprocess.run([rdzv, "status", "--server", d.endpoint, "--group", "g"],
                               capture_output=True, text=True).stdout
        rows = re.findall(r"^ +([45]) +\(leaving\) +127\.0\.0\.1:(\d+) +yes +- +draining", table,
                          re.M)
        report.ok(p.returncode == 0 and g["world"] == 4 and leaving == [4, 5]
                  and rows == [("4", str(apis[4].split(":")[1])), ("5", apis[5].split(":")[1])],
                  "rdzv group resize --world 4: status lists ranks 4 and 5 as leaving (rdzv "
                  "status --group: \"(leaving)\", draining)", (p.stdout, p.stderr, g.get("leaving"),
                                                                table))
        exits = [agents[r].wait(timeout=40) for r in (4, 5)]
        took = time.monotonic() - t0
        logs = [open(os.path.join(tmp.name, "agent%d.log" % r)).read() for r in (4, 5)]
        servers = hap.servers()
        report.ok(exits == [4, 4] and all("the router let this rank go" in l for l in logs)
                  and sorted(servers) == sorted(first4),
                  "shrunk to 4: ranks 4 and 5 drained and removed from HAProxy, then their "
                  "agents stopped their engines and exited 4 (%.1f s)" % took,
                  (exits, [l[-400:] for l in logs], servers))
        g, took = until(lambda s: s.get("epoch") == 3 and s.get("state") == "serving"
                        and s.get("registered_count") == 4 and not s.get("leaving"),
                        "epoch 3 of four, serving", timeout=30)
        time.sleep(1)
        # The load's count is the machine's speed: let a slow one reach it.
        try:
            rdzvtest.wait_for(lambda: sum(list(codes.values())) > 100, "over 100 requests",
                              timeout=30, step=0.1)
        except rdzvtest.Fail:
            pass
        stop.set()
        for t in threads:
            t.join()
        total = sum(codes.values())
        report.ok(set(codes) == {200} and total > 100
                  and all(ranks[str(r)] > 0 for r in range(6)),
                  "4 -> 6 -> 4 under load: %d requests, all answered 200, by ranks %s"
                  % (total, " ".join("%s:%d" % kv for kv in sorted(ranks.items()))),
                  (codes, ranks))
    finally:
        stop.set()
        for t in threads:
            if t.is_alive():
                t.join()
        for a in agents.values():
            rdzvtest.stop_agent(a)
        d.stop()
        hap.stop()
    return report.done()


if __name__ == "__main__":
    sys.exit(main())
