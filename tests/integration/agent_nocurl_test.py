#!/usr/bin/env python3
"""An agent that cannot load libcurl (it loads it only at its first health
check) still runs its engine and keeps its rank live, says once on stderr
why it checks no health and what to install, and its rank's `serving`
stays unknown (null): the group stays `complete`, listing it in
`not_serving` (a router, which registers serving ranks only, would never
get it; none runs here). Beside it a rank whose agent has libcurl,
running the same engine, is seen serving: the engine answers, only the
check is missing. libcurl is
made unloadable by empty files under its sonames first on
LD_LIBRARY_PATH (dlopen finds them and fails, "file too short"), as a
Pod image without libcurl4 would fail. One line per check (rdzvtest).
Needs RDZVD, RDZV and RDZV_SHIM."""
import os
import subprocess
import sys
import tempfile
import time

import rdzvtest

# The engine: /health answers 200 on RDZV_PORT_API (bound under the shim,
# which takes the port from the agent).
ENGINE = r"""
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(os.environ["RDZV_PORT_API"])), H).serve_forever()
"""

INTERVAL = 1


def main():
    rdzvd, rdzv, shim = os.environ["RDZVD"], os.environ["RDZV"], os.environ["RDZV_SHIM"]
    tmp = tempfile.TemporaryDirectory()
    base = 27000 + os.getpid() % 40 * 64
    d = rdzvtest.Rdzvd(rdzvd, tmp.name, "--no-nccl", "--port-base", str(base),
                       "--ports-per-rank", "16", "--port-limit", str(base + 512))
    report = rdzvtest.Report()
    nocurl = os.path.join(tmp.name, "nocurl")
    os.mkdir(nocurl)
    for name in ("libcurl.so.4", "libcurl-gnutls.so.4"):
        open(os.path.join(nocurl, name), "w").close()
    logs = [os.path.join(tmp.name, "agent%d.log" % r) for r in range(2)]
    agents = []
    try:
        for r in range(2):
            env = dict(os.environ)
            if r == 0:
                env["LD_LIBRARY_PATH"] = ":".join(
                    p for p in (nocurl, os.environ.get("LD_LIBRARY_PATH")) if p)
            agents.append(subprocess.Popen(
                rdzvtest.health_agent_argv(rdzv, d.endpoint, tmp.name, r, shim, base, INTERVAL,
                                           ENGINE),
                env=env, stdout=subprocess.DEVNULL, stderr=open(logs[r], "w")))
        g, took = rdzvtest.until_status(
            rdzv, d.endpoint, "g", lambda s: s["members"] and len(s["members"]) == 2
            and s["members"][1]["serving"] is True, "rank 1 serving")
        report.ok(True, "rank 1, its agent with libcurl: serving (%.1f s)" % took, g)
        # Rank 0's agent says why once it has its assignment, which on a
        # busy machine can come after rank 1 was checked: wait for the line.
        # Were it checking, it would have said so by now too. Give it a few
        # more intervals all the same (time to say it a second time, too).
        try:
            rdzvtest.wait_for(lambda: "libcurl" in open(logs[0]).read(),
                              "rank 0's agent to say why", timeout=30, step=0.1)
        except rdzvtest.Fail:
            pass
        time.sleep(3 * INTERVAL)
        g = rdzvtest.group_status(rdzv, d.endpoint, "g")
        m0 = g["members"][0]
        report.ok(m0["serving"] is None and m0["alive"] and agents[0].poll() is None
                  and g["state"] == "complete" and g["not_serving"] == [0],
                  "rank 0, its agent without libcurl: alive, serving unknown (null); the "
                  "group complete, not serving, listing rank 0 as not serving", g)
        log = open(logs[0]).read()
        said = [l for l in log.splitlines() if "libcurl" in l]
        report.ok(len(said) == 1 and "no health checks of CMD's engine" in said[0]
                  and "file too short" in said[0] and "install libcurl4" in said[0],
                  "... and its agent said why once, naming the package to install", log)
        report.ok("libcurl" not in open(logs[1]).read(),
                  "rank 1's agent said nothing of libcurl", open(logs[1]).read())
    except rdzvtest.Fail as e:
        report.ok(False, str(e))
    finally:
        for a in agents:
            rdzvtest.stop_agent(a)
        d.stop()
    return report.done()


if __name__ == "__main__":
    sys.exit(main())
