#!/usr/bin/env python3
"""Router registration over the worker API of vLLM's and SGLang's routers
(GET /list_workers, POST /add_worker?url=, POST /remove_worker?url=, with a
bearer token). No such router can be installed here (neither is a Debian
package, and nothing can be downloaded), so the router is a stand-in
written to the API as those routers' sources define it: it checks the
token, answers 500 or refuses on demand, and records every call. What
this test shows is rdzvd's side of that API, not a real router's
acceptance of it. Two ranks under `rdzv agent --router http://...` with
counting engines (router_haproxy_test's): both registered as they turn
serving; a worker the operator added by hand stays; a killed engine is
removed; a wrong token (401), a router answering 500 and a router that is
down, and one too slow to answer are reported in status and
rdzv_router_errors_total with the right reason and retried until the
router is back, when it converges.
Needs RDZVD, RDZV and RDZV_SHIM."""
import http.server
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

import rdzvtest
from engines import COUNTING as ENGINE

TOKEN = "router-s3cret"
INTERVAL = 1


class Router:
    """The stand-in: workers in a list, calls in a log; mode "ok", "500" or
    "down" (not listening)."""

    def __init__(self):
        self.workers, self.calls, self.token = ["http://10.9.9.9:8000"], [], TOKEN
        self.status = 200
        self.delay = 0         # seconds each answer waits: a slow router
        self.lock = threading.Lock()
        router = self

        class H(http.server.BaseHTTPRequestHandler):
            def answer(self, code, doc):
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass      # rdzvd gave up on a slow answer

            def handle_call(self):
                time.sleep(router.delay)
                url = urllib.parse.urlsplit(self.path)
                worker = urllib.parse.parse_qs(url.query).get("url", [None])[0]
                with router.lock:
                    router.calls.append((self.command, url.path, worker))
                    if self.headers.get("Authorization") != "Bearer " + router.token:
                        return self.answer(401, {"error": "unauthorized"})
                    if router.status != 200:
                        return self.answer(router.status, {"error": "injected"})
                    if (self.command, url.path) == ("GET", "/list_workers"):
                        return self.answer(200, {"urls": list(router.workers)})
                    if (self.command, url.path) == ("POST", "/add_worker") and worker:
                        if worker in router.workers:
                            return self.answer(400, {"error": "worker already exists"})
                        router.workers.append(worker)
                        return self.answer(200, {"message": "added " + worker})
                    if (self.command, url.path) == ("POST", "/remove_worker") and worker:
                        if worker not in router.workers:
                            return self.answer(404, {"error": "no such worker"})
                        router.workers.remove(worker)
                        return self.answer(200, {"message": "removed " + worker})
                    return self.answer(404, {"error": "not found"})

            do_GET = do_POST = handle_call

            def log_message(self, *args):
                pass

        self.handler = H
        self.port = rdzvtest.free_port()
        self.thread = None
        self.up()

    def up(self):
        if self.thread is None:
            http.server.ThreadingHTTPServer.allow_reuse_address = True
            self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), self.handler)
            self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
            self.thread.start()

    def down(self):
        if self.thread is None:
            return
        self.server.shutdown()
        self.server.server_close()
        self.thread = None

    def listed(self):
        with self.lock:
            return list(self.workers)


def main():
    rdzvd, rdzv, shim = os.environ["RDZVD"], os.environ["RDZV"], os.environ["RDZV_SHIM"]
    tmp = tempfile.TemporaryDirectory()
    router = Router()
    url = "http://127.0.0.1:%d" % router.port
    token = os.path.join(tmp.name, "router-token")
    with open(token, "w") as f:
        f.write(TOKEN + "\n")
    base = 28000 + os.getpid() % 40 * 64
    http_port = rdzvtest.free_port()
    d = rdzvtest.Rdzvd(rdzvd, tmp.name, "--no-nccl", "--port-base", str(base),
                       "--ports-per-rank", "16", "--port-limit", str(base + 512),
                       "--dead-after", "4", "--http", str(http_port), "--router-allow", url,
                       "--router-token", token, "--router-interval", str(INTERVAL))
    report = rdzvtest.Report()
    agents = []

    def status():
        return rdzvtest.group_status(rdzv, d.endpoint, "g")

    def until(pred, what, timeout=30):
        return rdzvtest.until_status(rdzv, d.endpoint, "g", pred, what, timeout)

    def errors(reason):
        m = re.search(r'rdzv_router_errors_total\{group="g",reason="%s"\} (\d+)' % reason,
                      rdzvtest.http_get("http://127.0.0.1:%d/metrics" % http_port))
        return int(m.group(1)) if m else -1

    try:
        def agent(r):
            return subprocess.Popen(
                [rdzv, "agent", "--server", d.endpoint, "--group", "g", "--world", "2",
                 "--rank", str(r), "--host", "127.0.0.1", "--node", "host-a",
                 "--socket", os.path.join(tmp.name, "a%d.sock" % r), "--shim", shim,
                 "--port-range", "%d-%d" % (base, base + 512), "--heartbeat", "1",
                 "--health-interval", str(INTERVAL), "--router", url, "--drain-timeout", "5",
                 # The engine serves on through rank 1's restart (a new epoch).
                 "--elastic", "--", sys.executable, "-c", ENGINE],
                env=dict(os.environ, HEALTH_FILE=os.path.join(tmp.name, "health-")),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for r in range(2):
            agents.append(agent(r))
        g, took = until(lambda s: s.get("registered_count") == 2, "both registered", timeout=60)
        urls = ["http://127.0.0.1:%d" % (m["ports"][0] + 2) for m in g["members"]]
        added = {c[2] for c in router.calls if c[:2] == ("POST", "/add_worker")}
        report.ok(sorted(router.listed()) == sorted(urls + ["http://10.9.9.9:8000"])
                  and added == set(urls),
                  "both ranks added with POST /add_worker?url= and the bearer token "
                  "(%.1f s); the worker added by hand stays" % took, (router.listed(), urls))

        # The engine of rank 1 killed: removed; the hand-added worker stays.
        pids = subprocess.run(["pgrep", "-P", str(agents[1].pid)], capture_output=True,
                              text=True).stdout.split()
        rdzvtest.check(pids, "rank 1's engine")
        t0 = time.monotonic()
        os.kill(int(pids[0]), signal.SIGKILL)
        rdzvtest.wait_for(lambda: urls[1] not in router.listed(), "rank 1 removed", timeout=20)
        report.ok(("POST", "/remove_worker", urls[1]) in router.calls
                  and sorted(router.listed()) == sorted([urls[0], "http://10.9.9.9:8000"]),
                  "rank 1's engine killed: POST /remove_worker %.1f s later, nothing else "
                  "removed" % (time.monotonic() - t0), router.listed())

        # Rank 1 comes back (a new process): epoch 2 forms. Rank 0's engine
        # serves meanwhile and stays registered throughout.
        agents[1].wait(timeout=20)
        calls_before = len(router.calls)
        agents[1] = agent(1)
        listed = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 30:
            listed.append(urls[0] in router.listed())
            g = status()
            if g["epoch"] == 2 and g["registered_count"] == 2:
                break
            time.sleep(0.1)
        report.ok(g["epoch"] == 2 and g["registered_count"] == 2 and all(listed)
                  and ("POST", "/remove_worker", urls[0]) not in router.calls[calls_before:],
                  "rank 1 restarted: while epoch 2 formed rank 0 stayed registered (%d looks), "
                  "and both are registered in epoch 2 (%.1f s)" % (len(listed),
                                                                  time.monotonic() - t0),
                  (g, router.calls[calls_before:]))

        # A wrong token, then a failing router, then none at all.
        for what, reason, breaks, heals in (
                ("a wrong token (401)", "unauthorized",
                 lambda: setattr(router, "token", "other"),
                 lambda: setattr(router, "token", TOKEN)),
                ("a router answering 500", "server_error",
                 lambda: setattr(router, "status", 500),
                 lambda: setattr(router, "status", 200)),
                ("a router that is down", "unreachable", router.down, router.up),
                ("a router slower than rdzvd's 3 s", "timeout",
                 lambda: setattr(router, "delay", 5), lambda: setattr(router, "delay", 0))):
            before = errors(reason)
            breaks()
            g, _ = until(lambda s: s.get("router_error"), "the error in status")
            rdzvtest.wait_for(lambda: errors(reason) > before, "%s counted" % reason,
                              timeout=10)
            join = subprocess.run([rdzv, "join", "--server", d.endpoint, "--group",
                                   "other-" + reason, "--world", "1", "--rank", "0",
                                   "--timeout", "10"], capture_output=True, text=True,
                                  timeout=30)
            with router.lock:
                router.workers.remove(urls[0])       # the router lost it meanwhile
            heals()
            g, took = until(lambda s: s.get("router_error") is None
                            and s.get("registered_count") == 2, "converged again")
            report.ok(join.returncode == 0 and urls[0] in router.listed(),
                      "%s: status says so, rdzv_router_errors_total{reason=\"%s\"} counts it, "
                      "another group's join goes through; healed, the rank is added back "
                      "(%.1f s)" % (what, reason, took), (g, join.stderr))

        # A drain the router cannot answer (it is down) waits its
        # --drain-timeout (5 s); a second SIGTERM cuts it short.
        router.down()
        t0 = time.monotonic()
        agents[0].send_signal(signal.SIGTERM)
        time.sleep(0.5)
        first = agents[0].poll()
        agents[0].send_signal(signal.SIGTERM)
        code = agents[0].wait(timeout=20)
        took = time.monotonic() - t0
        report.ok(first is None and code == 128 + signal.SIGTERM and took < 3,
                  "SIGTERM with the router down: the agent drains (still running 0.5 s later); "
                  "a second SIGTERM stops the engine at once (%.1f s, not the 5 s drain)" % took,
                  (first, code))
    except rdzvtest.Fail as e:
        report.ok(False, str(e))
    finally:
        for a in agents:
            rdzvtest.stop_agent(a)
        d.stop()
        try:
            router.down()
        except OSError:
            pass
    return report.done()


if __name__ == "__main__":
    sys.exit(main())
