#!/usr/bin/env python3
"""Router registration with a real HAProxy (Debian's, started here on
loopback with an admin socket, `balance roundrobin` and an empty backend).
Four ranks under `rdzv agent --router haproxy:///SOCK#engines`, each running
a small HTTP engine on its plan's api port that counts the requests it
serves. rdzvd (--router-allow) registers the four as they turn serving;
1,137 requests through HAProxy land as 285 + 284 x 3 (+-1), and
`rdzv status --group` shows all four registered and serving. Then:
an engine killed is taken off within the health interval plus a
reconcile, and every request after that succeeds on the others; an
engine whose /health says 500 is drained and removed; a graceful stop
(SIGTERM to the agent) leaves the router before the engine stops, with no
request failing meanwhile; a restarted HAProxy (empty again) and a
restarted rdzvd both converge again; a router that is down is reported in
status and rdzv_router_errors_total and never blocks a rendezvous; and bad
router URLs are refused at start, a router rdzvd was not allowed at the
join. One line per check (rdzvtest). Without haproxy the test skips,
saying so. Needs RDZVD, RDZV, RDZV_SHIM and RDZV_LIBRARY (the Python
package on PYTHONPATH)."""
import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import rdzv as rdzvpy
import rdzvtest
from engines import COUNTING as ENGINE
from haproxy_router import Haproxy, haproxy_exe, server_name


WORLD = 4
INTERVAL = 1          # the agents' --health-interval and rdzvd's --router-interval
DEAD_AFTER = 4


def main():
    rdzvd, rdzv, shim = os.environ["RDZVD"], os.environ["RDZV"], os.environ["RDZV_SHIM"]
    exe = haproxy_exe()
    if not exe:
        return rdzvtest.skip_all("haproxy is not installed (apt-get install haproxy)")
    tmp = tempfile.TemporaryDirectory()
    hap = Haproxy(exe, tmp.name)
    router = "haproxy://%s#engines" % hap.sock
    base = 27000 + os.getpid() % 40 * 64
    http_port = rdzvtest.free_port()
    d = rdzvtest.Rdzvd(rdzvd, tmp.name, "--no-nccl", "--port-base", str(base),
                       "--ports-per-rank", "16", "--port-limit", str(base + 512),
                       "--dead-after", str(DEAD_AFTER), "--http", str(http_port),
                       "--router-allow", "haproxy://" + hap.sock,
                       "--router-interval", str(INTERVAL), "--router-drain", "5")
    health = os.path.join(tmp.name, "health-")
    report = rdzvtest.Report()
    agents = {}

    def status():
        return rdzvtest.group_status(rdzv, d.endpoint, "g")

    def until(pred, what, timeout=30):
        return rdzvtest.until_status(rdzv, d.endpoint, "g", pred, what, timeout)

    def agent(rank, *extra):
        return subprocess.Popen(
            [rdzv, "agent", "--server", d.endpoint, "--group", "g", "--world", str(WORLD),
             "--rank", str(rank), "--host", "127.0.0.1", "--node", "host-a",
             "--socket", os.path.join(tmp.name, "a%d.sock" % rank), "--shim", shim,
             "--port-range", "%d-%d" % (base, base + 512), "--heartbeat", "1",
             "--health-interval", str(INTERVAL), "--router", router, "--drain-timeout", "5",
             *extra,
             "--", sys.executable, "-c", ENGINE],
            env=dict(os.environ, HEALTH_FILE=health), stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(tmp.name, "agent%d.log" % rank), "w"), text=True)

    def engine_pid(rank):
        pids = subprocess.run(["pgrep", "-P", str(agents[rank].pid)], capture_output=True,
                              text=True).stdout.split()
        rdzvtest.check(pids, "rank %d's engine process" % rank)
        return int(pids[0])

    def count(api):
        with urllib.request.urlopen("http://%s/count" % api, timeout=5) as r:
            return int(r.read())

    def name(rank):
        return server_name("g", rank)

    try:
        for r in range(WORLD):
            agents[r] = agent(r)
        g, took = until(lambda s: s.get("registered_count") == WORLD
                        and s.get("state") == "serving", "all four registered", timeout=60)
        apis = ["127.0.0.1:%d" % (m["ports"][0] + 2) for m in g["members"]]
        servers = hap.servers()
        report.ok(all(servers.get(name(r), ("", ""))[0] == apis[r] for r in range(WORLD))
                  and all(m["registered"] for m in g["members"]) and g["router_error"] is None,
                  "the four ranks turn serving and are registered in HAProxy's backend, each "
                  "at its api port (%.1f s after start)" % took, (servers, g))
        table = subprocess.run([rdzv, "status", "--server", d.endpoint, "--group", "g"],
                               capture_output=True, text=True).stdout
        rows = re.findall(r"^ +\d +host-a +127\.0\.0\.1:\d+ +yes +yes +yes +\d+s ago$", table,
                          re.M)
        report.ok(len(rows) == WORLD and ("router: %s (4 registered)" % router) in table,
                  "rdzv status --group g: four ranks alive, serving and registered", table)

        before = [count(a) for a in apis]
        failed = [b for s, b in (hap.get() for _ in range(1137)) if s != 200]
        served = sorted(count(a) - b for a, b in zip(apis, before))
        report.ok(not failed and sum(served) == 1137 and served[-1] - served[0] <= 2
                  and abs(served[-1] - 285) <= 1 and all(abs(n - 284) <= 1 for n in served[:3]),
                  "1,137 requests through HAProxy: %s per rank (285 + 284 x 3, +-1), none failed"
                  % " + ".join(map(str, served)), failed[:3])

        metrics = rdzvtest.http_get("http://127.0.0.1:%d/metrics" % http_port)
        report.ok('rdzv_group_ranks_registered{group="g"} 4' in metrics
                  and 'rdzv_router_errors_total{group="g",reason="unreachable"} 0' in metrics,
                  "/metrics: rdzv_group_ranks_registered 4, no router errors",
                  "\n".join(l for l in metrics.splitlines() if "router" in l or "registered" in l))

        # An engine killed: its agent exits saying so, the router lets it go.
        t0 = time.monotonic()
        os.kill(engine_pid(1), signal.SIGKILL)
        agents[1].wait(timeout=20)
        rdzvtest.wait_for(lambda: name(1) not in hap.servers(), "rank 1 off HAProxy",
                          timeout=20, step=0.05)
        took = time.monotonic() - t0
        # rdzvd tells its core after HAProxy has done it: status follows.
        g, _ = until(lambda s: s["members"][1]["registered"] is False, "rank 1 unregistered")
        report.ok(g["members"][1]["registered"] is False and g["registered_count"] == 3
                  and g["state"] == "degraded" and 1 in g["not_serving"],
                  "rank 1's engine killed: removed from HAProxy %.1f s later (health every %d s, "
                  "reconcile every %d s); status says degraded, rank 1 not registered"
                  % (took, INTERVAL, INTERVAL), g)
        table = subprocess.run([rdzv, "status", "--server", d.endpoint, "--group", "g"],
                               capture_output=True, text=True).stdout
        report.ok(re.search(r"^ +1 +host-a +\S+ +(yes|no) +no +no +\d+s ago$", table, re.M)
                  and "(3 registered)" in table,
                  "... and rdzv status --group g says rank 1 serves no more and is not "
                  "registered", table)
        results = collections.Counter(hap.get() for _ in range(300))
        report.ok(all(s == 200 for s, _ in results) and set(b for _, b in results) == {"0", "2", "3"},
                  "the 300 requests after that all succeed, on ranks 0, 2 and 3", results)

        # An engine whose health check fails: drained, then removed.
        with open(health + "2", "w") as f:
            f.write("500")
        rdzvtest.wait_for(lambda: name(2) not in hap.servers(), "rank 2 off HAProxy",
                          timeout=20, step=0.1)
        g, _ = until(lambda s: s["members"][2]["registered"] is False, "rank 2 unregistered")
        report.ok(g["members"][2]["serving"] is False and g["members"][2]["alive"] is True
                  and g["members"][2]["registered"] is False,
                  "rank 2's /health answers 500: drained and removed, its agent still alive", g)
        os.unlink(health + "2")
        g, took = until(lambda s: s["members"][2]["registered"], "rank 2 registered again")
        report.ok(hap.servers().get(name(2), ("", ""))[0] == apis[2],
                  "rank 2 answers 200 again: registered again (%.1f s)" % took, hap.servers())

        # HAProxy restarted with its empty backend: rdzvd puts the ranks back.
        hap.stop()
        g, _ = until(lambda s: s.get("router_error"), "the router error in status")
        join = subprocess.run([rdzv, "join", "--server", d.endpoint, "--group", "other",
                               "--world", "1", "--rank", "0", "--timeout", "10"],
                              capture_output=True, text=True, timeout=30)
        metrics = rdzvtest.http_get("http://127.0.0.1:%d/metrics" % http_port)
        unreachable = re.search(r'rdzv_router_errors_total\{group="g",reason="unreachable"\} (\d+)',
                                metrics)
        report.ok(join.returncode == 0 and unreachable and int(unreachable.group(1)) > 0
                  and "cannot connect" in g["router_error"],
                  "HAProxy down: status says why (%s), rdzv_router_errors_total{reason="
                  "\"unreachable\"} counts it, and another group's join goes through"
                  % g["router_error"], (join.stderr, unreachable and unreachable.group(0)))
        hap.start()
        t0 = time.monotonic()
        rdzvtest.wait_for(lambda: all(name(r) in hap.servers() for r in (0, 2, 3)),
                          "ranks 0, 2, 3 back in HAProxy", timeout=60, step=0.1)
        report.ok(name(1) not in hap.servers(),
                  "HAProxy restarted with an empty backend: ranks 0, 2 and 3 registered again "
                  "%.1f s later (back-off after the errors), rank 1 not" % (time.monotonic() - t0),
                  hap.servers())

        # rdzvd killed and restarted: registration is soft state, found again.
        watching, seen = threading.Event(), []

        def watch():
            while not watching.is_set():
                seen.append(sorted(hap.servers()))
                time.sleep(0.05)
        watcher = threading.Thread(target=watch)
        watcher.start()
        d.restart()
        g, took = until(lambda s: s.get("registered_count") == 3, "registrations after restart")
        time.sleep(2 * INTERVAL)
        watching.set()
        watcher.join()
        kept = [name(r) for r in (0, 2, 3)]
        report.ok([m["registered"] for m in g["members"]] == [True, False, True, True]
                  and g["router"] == router and all(s == kept for s in seen),
                  "rdzvd killed and restarted: it knows the group's router from its journal, "
                  "finds ranks 0, 2, 3 registered again (%.1f s), and never took them off "
                  "meanwhile (%d looks at HAProxy)" % (took, len(seen)),
                  (g, [s for s in seen if s != kept][:3]))

        # A graceful stop: the agent leaves the router before its engine stops.
        stop = threading.Event()
        during = collections.Counter()

        def load():
            while not stop.is_set():
                during[hap.get()[0]] += 1
        threads = [threading.Thread(target=load) for _ in range(2)]
        for t in threads:
            t.start()
        t0 = time.monotonic()
        agents[3].send_signal(signal.SIGTERM)
        code = agents[3].wait(timeout=40)
        took = time.monotonic() - t0
        stop.set()
        for t in threads:
            t.join()
        log = open(os.path.join(tmp.name, "agent3.log")).read()
        report.ok(name(3) not in hap.servers() and "the router let this rank go" in log
                  and set(during) == {200} and sum(during.values()) > 20,
                  "SIGTERM to rank 3's agent: it leaves HAProxy first, then stops its engine "
                  "(%.1f s, exit %d); %d requests meanwhile, all answered 200"
                  % (took, code, sum(during.values())), (during, log[-600:]))

        # Sidecar mode, as in a Kubernetes Pod: the engine is not the agent's
        # CMD but runs beside it; the agent still checks its health, and its
        # stop hook asks for the drain by creating PATH.drain.
        sock = os.path.join(tmp.name, "side.sock")
        agents["side"] = subprocess.Popen(
            [rdzv, "agent", "--server", d.endpoint, "--group", "side", "--world", "1",
             "--rank", "0", "--host", "127.0.0.1", "--node", "host-a", "--socket", sock,
             "--port-range", "%d-%d" % (base, base + 512), "--heartbeat", "1",
             "--health-interval", str(INTERVAL), "--router", router, "--drain-timeout", "10"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp.name, "agent-side.log"), "w"))
        rdzvtest.wait_for(lambda: os.path.exists(sock + ".env"), "the sidecar's env file")
        env = dict(os.environ, HEALTH_FILE=health, LD_PRELOAD=shim, RDZV_AGENT_SOCKET=sock)
        env.update(l.split("=", 1) for l in open(sock + ".env").read().splitlines()
                   if "=" in l and not l.startswith("#"))
        engine = subprocess.Popen([sys.executable, "-c", ENGINE], env=env)
        try:
            rdzvtest.wait_for(lambda: server_name("side", 0) in hap.servers(), "the sidecar's engine "
                              "registered", timeout=30, step=0.1)
            report.ok(hap.servers()[server_name("side", 0)][0] == "127.0.0.1:" + env["RDZV_PORT_API"],
                      "sidecar mode: the agent checks the engine beside it, which is registered",
                      hap.servers())
            t0 = time.monotonic()
            open(sock + ".drain", "w").close()
            rdzvtest.wait_for(lambda: not os.path.exists(sock + ".drain"), "the drain done",
                              timeout=20, step=0.05)
            took = time.monotonic() - t0
            log = open(os.path.join(tmp.name, "agent-side.log")).read()
            report.ok(server_name("side", 0) not in hap.servers() and engine.poll() is None
                      and "the router let this rank go" in log,
                      "PATH.drain created (a stop hook's request): the rank leaves HAProxy and "
                      "the file goes %.1f s later, while the engine still runs" % took,
                      (hap.servers(), log[-400:]))
            # The drained engine goes (its container restarts): the next
            # one, of the epoch the agent joins then, is registered again.
            engine.terminate()
            engine.wait(timeout=20)
            rdzvtest.wait_for(lambda: os.path.exists(sock + ".env") and "RDZV_EPOCH=2"
                              in open(sock + ".env").read(), "the sidecar's epoch 2", timeout=30)
            env.update(l.split("=", 1) for l in open(sock + ".env").read().splitlines()
                       if "=" in l and not l.startswith("#"))
            engine = subprocess.Popen([sys.executable, "-c", ENGINE], env=env)
            rdzvtest.wait_for(lambda: server_name("side", 0) in hap.servers(),
                              "the next engine registered", timeout=30, step=0.1)
            got = hap.servers().get(server_name("side", 0))
            report.ok(got and got[0] == "127.0.0.1:" + env["RDZV_PORT_API"]
                      and got[1] not in ("MAINT", "DRAIN"),
                      "the drained engine restarts: the agent is no longer drained, and the "
                      "next engine is registered again", got)
        finally:
            engine.terminate()
            engine.wait(timeout=20)

        # A rank that comes back at another address keeps its server, whose
        # address changes in place: rank 0 of group "moved" on 127.0.0.1,
        # killed outright (no drain), then started on 127.0.0.2.
        def moved_agent(host):
            return subprocess.Popen(
                [rdzv, "agent", "--server", d.endpoint, "--group", "moved", "--world", "1",
                 "--rank", "0", "--host", host, "--node", "host-a",
                 "--socket", os.path.join(tmp.name, "moved.sock"), "--shim", shim,
                 "--port-range", "%d-%d" % (base, base + 512), "--heartbeat", "1",
                 "--health-interval", str(INTERVAL), "--router", router,
                 "--", sys.executable, "-c", ENGINE],
                env=dict(os.environ, HEALTH_FILE=health, ENGINE_HOST="0.0.0.0"),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        moved = server_name("moved", 0)
        agents["moved"] = moved_agent("127.0.0.1")
        rdzvtest.wait_for(lambda: hap.servers().get(moved, ("",))[0].startswith("127.0.0.1:"),
                          "group moved registered", timeout=30, step=0.1)
        port = hap.servers()[moved][0].split(":")[1]
        engine_of = subprocess.run(["pgrep", "-P", str(agents["moved"].pid)],
                                   capture_output=True, text=True).stdout.split()
        agents["moved"].kill()
        agents["moved"].wait()
        for pid in engine_of:
            os.kill(int(pid), signal.SIGKILL)
        agents["moved"] = moved_agent("127.0.0.2")
        looks = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 30:
            got = hap.servers().get(moved)
            looks.append(got)
            if got and got[0] == "127.0.0.2:" + port and got[1] not in ("MAINT", "DRAIN"):
                break
            time.sleep(0.05)
        report.ok(looks[-1] and looks[-1][0] == "127.0.0.2:" + port and all(looks),
                  "rank 0 of group moved comes back on 127.0.0.2: its server's address "
                  "changes in place (%.1f s), the server never gone meanwhile"
                  % (time.monotonic() - t0), looks[-3:])
        rdzvtest.stop_agent(agents.pop("moved"))

        # A hostile client's host is text that would be HAProxy commands.
        evil_host = "127.0.0.1; shutdown frontend fe; set server engines/x state maint"
        with rdzvpy.Client(d.endpoint, router=router) as evil:
            a = evil.join("evil", 1, 0, host=evil_host, node="n-evil", timeout=20)
            # Three router passes at least, and until one has said why (a
            # pass can come late on a busy machine).
            end = time.monotonic() + 30
            for i in range(1000):
                evil.heartbeat("evil", 0, a.epoch, serving=True)
                time.sleep(INTERVAL)
                g = evil.status("evil")[0]
                if i >= 2 and (g["router_error"] or time.monotonic() > end):
                    break
        report.ok(hap.get()[0] == 200 and server_name("evil", 0) not in hap.servers()
                  and "neither an IP address nor a DNS name" in (g["router_error"] or ""),
                  "a rank whose host is command text is never handed to HAProxy: the frontend "
                  "serves on, the rank is not registered, status says why",
                  (g["router_error"], hap.servers()))
    except rdzvtest.Fail as e:
        logs = "".join(open(os.path.join(tmp.name, f)).read()[-300:] for f in
                       sorted(os.listdir(tmp.name)) if f.startswith("agent"))
        report.ok(False, str(e), "status: %s\nagents: %s\nrdzvd: %s" % (
            subprocess.run([rdzv, "status", "--server", d.endpoint, "--group", "g"],
                           capture_output=True, text=True).stdout, logs, d.log()[-1500:]))
    finally:
        for a in agents.values():
            rdzvtest.stop_agent(a)
        d.stop()
        hap.stop()

    # Bad input, each refused with a clear error and nothing recorded.
    bad = [("haproxy://x.sock#b", "must name the socket's absolute path"),
           ("haproxy:///x.sock", "must name the backend"),
           ("ftp://host/x", "unknown scheme"),
           ("http://host:99999", "port outside"),
           ("http://host/x?y=1", "no query")]
    for url, why in bad:
        p = subprocess.run([rdzv, "agent", "--server", "127.0.0.1:1", "--group", "g",
                            "--world", "1", "--rank", "0", "--socket",
                            os.path.join(tmp.name, "bad.sock"), "--router", url],
                           capture_output=True, text=True, timeout=20)
        report.ok(p.returncode == 2 and why in p.stderr,
                  "rdzv agent --router %s: usage error (exit 2), %s" % (url, why), p.stderr)
    p = subprocess.run([rdzv, "join", "--server", "127.0.0.1:1", "--group", "g", "--world", "1",
                        "--rank", "0", "--router", "gopher://x"], capture_output=True,
                       text=True, timeout=20)
    report.ok(p.returncode == 2 and "unknown scheme" in p.stderr,
              "rdzv join --router gopher://x: usage error (exit 2) before any request", p.stderr)
    os.mkdir(os.path.join(tmp.name, "d2"))
    d2 = rdzvtest.Rdzvd(rdzvd, os.path.join(tmp.name, "d2"), "--no-nccl", "--router-allow",
                        "haproxy:///allowed.sock")
    try:
        p = subprocess.run([rdzv, "agent", "--server", d2.endpoint, "--group", "h",
                            "--world", "1", "--rank", "0", "--socket",
                            os.path.join(tmp.name, "h.sock"), "--timeout", "10",
                            "--router", "haproxy:///other.sock#b"],
                           capture_output=True, text=True, timeout=30)
        st = json.loads(subprocess.run([rdzv, "status", "--json", "--server", d2.endpoint],
                                       capture_output=True, text=True).stdout)
        report.ok(p.returncode == 4 and "--router-allow" in p.stderr and st["groups"] == [],
                  "a join naming a router rdzvd was not allowed: refused (exit 4), no group "
                  "made", (p.returncode, p.stderr[-300:], st))
    finally:
        d2.stop()
    return report.done()


if __name__ == "__main__":
    sys.exit(main())
