#!/usr/bin/env python3
"""From "assigned" to "serving": two ranks under `rdzv agent` on one node
(so that their plans, and their api ports, differ), each running
a small HTTP engine under the shim on its plan's api port, whose /health
answers what a file says (200, 500, a hang, or a closed connection). rdzvd's status follows
what the agents' health checks see: serving once both answer, degraded
naming the rank whose engine stops answering (500, a hang or a close: never a
stuck agent, whose heartbeats go on), serving again, and degraded with the
rank dead once its engine exits; `rdzv status --group` and /metrics say
the same, and so do the HTTP documents for routers and monitoring:
/v1/groups/G/endpoints (the serving ranks' URLs) and /v1/sd, which a real
Prometheus (Debian's, started here on loopback with the bearer token)
uses to discover and scrape every rank; without prometheus installed that
check skips, saying so. One line per check (rdzvtest). Needs RDZVD, RDZV
and RDZV_SHIM."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import rdzvtest

# The engine: an HTTP server on RDZV_PORT_API (bound under the shim, which
# takes the port from the agent); /health answers what HEALTH_FILE says.
ENGINE = r"""
import http.server, os, socket, time
path = os.environ["HEALTH_FILE"] + os.environ["RDZV_RANK"]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        try:
            what = open(path).read().strip()
        except OSError:
            what = "200"
        if what == "hang":
            time.sleep(30)
            return
        if what == "close":                     # the connection ends, no answer
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self.send_response(int(what))
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["RDZV_PORT_API"])), H)
s.daemon_threads = True
s.serve_forever()
"""

INTERVAL = 1
DEAD_AFTER = 3


def s_prometheus(workdir, http_port, token, apis):
    """Debian's prometheus on loopback with rdzvd's /v1/sd as its HTTP
    service discovery (type: Bearer spelled out: without it Debian's
    Prometheus 2.42 sends the bare token as its http_sd Authorization): (whether every rank's API was discovered with its
    labels and scraped up within 60 s, what it saw), or None without
    prometheus."""
    exe = shutil.which("prometheus")
    if not exe:
        return None
    port = rdzvtest.free_port()
    cfg = os.path.join(workdir, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("""global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: llm
    http_sd_configs:
      - url: http://127.0.0.1:%d/v1/sd
        refresh_interval: 1s
        authorization:
          type: Bearer
          credentials_file: %s
""" % (http_port, token))
    log = open(os.path.join(workdir, "prometheus.log"), "w")
    p = subprocess.Popen([exe, "--config.file", cfg, "--storage.tsdb.path",
                          os.path.join(workdir, "tsdb"), "--web.listen-address",
                          "127.0.0.1:%d" % port], stdout=log, stderr=log)
    seen = []
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and p.poll() is None:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/api/v1/targets" % port,
                                            timeout=5) as r:
                    targets = json.loads(r.read())["data"]["activeTargets"]
            except (OSError, ValueError, KeyError):
                targets = []
            seen = [(t["labels"].get("instance"), t["labels"].get("group"),
                     t["labels"].get("rank"), t["health"]) for t in targets]
            want = sorted((a, "g", str(r), "up") for r, a in enumerate(apis))
            if sorted(seen) == want:
                return True, seen
            time.sleep(0.5)
        return False, (seen, open(log.name).read()[-1500:])
    finally:
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
        log.close()


def main():
    rdzvd, rdzv, shim = os.environ["RDZVD"], os.environ["RDZV"], os.environ["RDZV_SHIM"]
    tmp = tempfile.TemporaryDirectory()
    base = 26000 + os.getpid() % 40 * 64
    http_port = rdzvtest.free_port()
    token = os.path.join(tmp.name, "http-token")
    with open(token, "w") as f:
        f.write("s3cret-for-the-test\n")
    d = rdzvtest.Rdzvd(rdzvd, tmp.name, "--no-nccl", "--port-base", str(base),
                       "--ports-per-rank", "16", "--port-limit", str(base + 512),
                       "--dead-after", str(DEAD_AFTER), "--http", str(http_port),
                       "--http-token", token)
    health = os.path.join(tmp.name, "health-")
    report = rdzvtest.Report()
    agents = []

    def status():
        return rdzvtest.group_status(rdzv, d.endpoint, "g")

    def until(pred, what, timeout=30):
        return rdzvtest.until_status(rdzv, d.endpoint, "g", pred, what, timeout)

    def get(path, auth=True):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (http_port, path))
        if auth:
            req.add_header("Authorization", "Bearer s3cret-for-the-test")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def say(rank, what):
        with open(health + str(rank), "w") as f:
            f.write(what)

    try:
        env = dict(os.environ, HEALTH_FILE=health)
        for r in range(2):
            agents.append(subprocess.Popen(
                rdzvtest.health_agent_argv(rdzv, d.endpoint, tmp.name, r, shim, base, INTERVAL,
                                           ENGINE),
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        g, took = until(lambda s: s.get("state") == "serving", "the group serving")
        report.ok(g["serving_count"] == 2 and g["live_count"] == 2 and g["not_serving"] == []
                  and all(m["serving"] is True for m in g["members"]),
                  "both engines answer: state serving, 2 of 2 serving (%.1f s)" % took, g)
        table = subprocess.run([rdzv, "status", "--server", d.endpoint, "--group", "g"],
                               capture_output=True, text=True).stdout
        api1 = g["members"][1]["ports"][0] + 2
        report.ok(re.search(r"^g +2 +2 +2/2 +1 +\S+ +serving +-$", table, re.M)
                  and re.search(r"^ +1 +host-a +127\.0\.0\.1:%d +yes +yes +- +\d+s ago$" % api1,
                                table, re.M),
                  "rdzv status --group: 2/2 serving, and rank 1 on its api port %d" % api1, table)
        apis = ["127.0.0.1:%d" % (m["ports"][0] + 2) for m in g["members"]]
        code, body = get("/v1/groups/g/endpoints")
        doc = json.loads(body) if code == 200 else {}
        report.ok(code == 200 and [e["url"] for e in doc["endpoints"]]
                  == ["http://" + a for a in apis] and doc["state"] == "serving"
                  and all(e["epoch"] == 1 for e in doc["endpoints"]),
                  "GET /v1/groups/g/endpoints: both ranks' API URLs", body)
        code, body = get("/v1/groups/g/endpoints", auth=False)
        report.ok(code == 401, "... and without the bearer token 401", (code, body))
        code, body = get("/v1/groups/nosuch/endpoints")
        report.ok(code == 404, "... and of a group that does not exist 404", (code, body))
        code, body = get("/v1/sd")
        sd = json.loads(body) if code == 200 else []
        report.ok(code == 200 and sorted(t["targets"][0] for t in sd) == sorted(apis)
                  and all(set(t["labels"]) == {"group", "rank", "epoch", "node"} for t in sd),
                  "GET /v1/sd: a target per rank's API port, labels group, rank, epoch, node",
                  body)
        scraped = s_prometheus(tmp.name, http_port, token, apis)
        if scraped is None:
            report.skip("Prometheus discovers both ranks through /v1/sd and scrapes them",
                        "prometheus is not installed (apt-get install prometheus)")
        else:
            report.ok(scraped[0], "a real Prometheus discovers both ranks through /v1/sd "
                      "(with the bearer token) and scrapes them: up, with their labels",
                      scraped[1])

        say(1, "500")
        g, took = until(lambda s: s.get("state") == "degraded", "rank 1 not serving")
        report.ok(g["not_serving"] == [1] and g["serving_count"] == 1 and g["live_count"] == 2
                  and g["members"][1]["serving"] is False,
                  "rank 1's engine answers 500: degraded, rank 1 named, still alive "
                  "(%.1f s, health checks every %d s)" % (took, INTERVAL), g)
        code, body = get("/v1/groups/g/endpoints")
        report.ok(code == 200 and [e["rank"] for e in json.loads(body)["endpoints"]] == [0],
                  "... and /v1/groups/g/endpoints lists rank 0 alone", body)

        say(1, "hang")
        time.sleep(3 * INTERVAL + 2)
        g = status()
        report.ok(g["state"] == "degraded" and g["live_count"] == 2
                  and g["members"][1]["alive"] is True and g["members"][1]["last_seen_s"] <= 2,
                  "rank 1's engine hangs: not serving, and its agent's heartbeats go on", g)

        say(1, "200")
        g, took = until(lambda s: s.get("state") == "serving", "rank 1 serving again")
        report.ok(g["serving_count"] == 2, "rank 1 answers again: serving (%.1f s)" % took, g)

        say(1, "close")
        g, took = until(lambda s: s.get("state") == "degraded", "rank 1 closing")
        report.ok(g["not_serving"] == [1] and g["members"][1]["alive"] is True,
                  "rank 1's /health closes the connection unanswered: not serving (%.1f s), "
                  "its agent alive" % took, g)
        say(1, "200")
        until(lambda s: s.get("state") == "serving", "rank 1 serving after the closes")

        metrics = get("/metrics")[1]
        report.ok('rdzv_group_ranks_live{group="g"} 2' in metrics
                  and 'rdzv_group_ranks_serving{group="g"} 2' in metrics,
                  "/metrics: rdzv_group_ranks_live and rdzv_group_ranks_serving are 2",
                  "\n".join(l for l in metrics.splitlines() if "ranks_" in l))

        # The engine goes: the agent ends with it, the heartbeats stop.
        engine = subprocess.run(["pgrep", "-P", str(agents[1].pid)], capture_output=True,
                                text=True).stdout.split()
        rdzvtest.check(engine, "rank 1's engine process")
        os.kill(int(engine[0]), 9)
        agents[1].wait(timeout=20)
        g, took = until(lambda s: s.get("live_count") == 1, "rank 1 dead", timeout=DEAD_AFTER + 20)
        report.ok(g["state"] == "degraded" and g["not_serving"] == [1]
                  and g["members"][1]["alive"] is False and g["serving_count"] == 1,
                  "rank 1's engine killed: its agent exits, and %.1f s later (--dead-after %d) "
                  "the group is degraded with rank 1 dead" % (took, DEAD_AFTER), g)
    except rdzvtest.Fail as e:
        report.ok(False, str(e))
    finally:
        for a in agents:
            if a.poll() is None:
                a.terminate()
                try:
                    a.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    a.kill()
        d.stop()
    return report.done()


if __name__ == "__main__":
    sys.exit(main())
