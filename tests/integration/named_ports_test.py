#!/usr/bin/env python3
"""A 4-rank group through `rdzv agent`, the ranks on one node as hostNetwork
Pods are: every rank gets the documented port of each role (docs/concepts.md,
"Named ports"), its local ranks and the vLLM flags, in CMD's environment and
in PATH.env alike. Under the shim, rank 0's engine binds the store and DP RPC
ports, each engine runs vLLM's two kinds of scan from VLLM_PORT, and the
agents' status shows who holds what: no listener of one role sits on the
port of another, and no scan reaches a role's port. One line per check
(rdzvtest). Needs RDZVD, RDZV and RDZV_SHIM."""
import json
import os
import shlex
import subprocess
import sys
import tempfile

import rdzvtest

WORLD = 4
PER_RANK = 32
SKIP = 10          # vLLM's get_open_port() skips the ten ports from VLLM_DP_MASTER_PORT

# One engine: rank 0 binds the two role ports as vLLM's front end (the DP
# RPC ROUTER) and a torch-style store do, with SO_REUSEADDR and listen, then
# every rank does what vLLM's API server and executor do with VLLM_PORT set:
# five probes upward from it, then get_open_port(), which also steps over
# the ten ports from VLLM_DP_MASTER_PORT (and would never return if
# VLLM_PORT were among them). A probe is bind and close, nothing else.
ENGINE = r"""
import json, os, socket, sys
env = os.environ
def probe(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        s.bind(("", port))
        return True
    except OSError:
        return False
    finally:
        s.close()
def scan(start, budget=64):
    for port in range(start, start + budget):
        if probe(port):
            return port
    return None
def get_open_port():
    reserved = range(int(env["VLLM_DP_MASTER_PORT"]), int(env["VLLM_DP_MASTER_PORT"]) + 10)
    for _ in range(64):
        port = scan(int(env["VLLM_PORT"]))
        if port is not None and port not in reserved:
            return port
    return None
out = {k: env.get(k) for k in env if k.startswith(("RDZV_", "VLLM_", "LOCAL_", "GROUP_"))
       or k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
listeners = []
if env["RDZV_RANK"] == "0":
    for role in ("RDZV_PORT_STORE", "RDZV_PORT_DP_RPC"):
        l = socket.socket()
        l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        l.bind(("0.0.0.0", int(env[role])))
        l.listen(16)
        c = socket.create_connection(("127.0.0.1", int(env[role])), timeout=5)
        c.close()
        listeners.append([role, l.getsockname()[1]])
ports, nxt = [], int(env["VLLM_PORT"])
for _ in range(5):                     # get_open_ports_list(5)
    p = scan(nxt)
    ports.append(p)
    nxt = p + 1 if p else nxt
out["listeners"], out["ports_list"], out["open_port"] = listeners, ports, get_open_port()
print("ENGINE " + json.dumps(out), flush=True)
"""


def main():
    rdzvd, rdzv, shim = os.environ["RDZVD"], os.environ["RDZV"], os.environ["RDZV_SHIM"]
    tmp = tempfile.TemporaryDirectory()
    base = 24000 + os.getpid() % 40 * 128
    d = rdzvtest.Rdzvd(rdzvd, tmp.name, "--no-nccl", "--port-base", str(base),
                       "--ports-per-rank", str(PER_RANK), "--port-limit", str(base + 1024))
    report = rdzvtest.Report()

    def check(what, cond, detail=""):
        report.ok(cond, what, detail)

    try:
        socks = [os.path.join(tmp.name, "a%d.sock" % r) for r in range(WORLD)]
        agents = [subprocess.Popen(
            [rdzv, "agent", "--server", d.endpoint, "--group", "np", "--world", str(WORLD),
             "--rank", str(r), "--host", "127.0.0.1", "--node", "host-a", "--socket", socks[r],
             "--shim", shim, "--port-range", "%d-%d" % (base, base + 1024), "--timeout", "30",
             "--", sys.executable, "-c", ENGINE],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(WORLD)]
        outs = [a.communicate(timeout=60) for a in agents]
        engines = {}
        for r, (out, err) in enumerate(outs):
            line = [x for x in out.splitlines() if x.startswith("ENGINE ")]
            check("rank %d's agent ran its engine and exited 0" % r,
                  agents[r].returncode == 0 and line, err[-800:])
            if line:
                engines[r] = json.loads(line[-1][len("ENGINE "):])
        if len(engines) != WORLD:
            return report.done()

        plans = {r: [int(p) for p in e["RDZV_PORTS"].split(",")] for r, e in engines.items()}
        store, rpc = plans[0][0], plans[0][1]
        check("every rank's plan has %d ports, disjoint on the one node" % PER_RANK,
              all(len(p) == PER_RANK for p in plans.values())
              and len(set().union(*map(set, plans.values()))) == WORLD * PER_RANK)
        for r, e in engines.items():
            plan = plans[r]
            lo, hi = (int(x) for x in e["RDZV_PORT_PROBE"].split("-"))
            check("rank %d: the store is rank 0's first port, in all three names" % r,
                  int(e["RDZV_PORT_STORE"]) == int(e["MASTER_PORT"]) == int(e["RDZV_MASTER_PORT"])
                  == int(e["VLLM_DP_MASTER_PORT"]) == store, e)
            check("rank %d: the DP RPC port is rank 0's second" % r,
                  int(e["RDZV_PORT_DP_RPC"]) == rpc, e.get("RDZV_PORT_DP_RPC"))
            check("rank %d: the probe pool is its plan from the %dth port, VLLM_PORT its first"
                  % (r, SKIP), (lo, hi) == (plan[SKIP], plan[-1]) and int(e["VLLM_PORT"]) == lo,
                  (lo, hi, e["VLLM_PORT"]))
            check("rank %d: LOCAL_RANK %s of LOCAL_WORLD_SIZE %s, GROUP_RANK %s of %s" %
                  (r, e.get("LOCAL_RANK"), e.get("LOCAL_WORLD_SIZE"), e.get("GROUP_RANK"),
                   e.get("GROUP_WORLD_SIZE")),
                  (e.get("LOCAL_RANK"), e.get("LOCAL_WORLD_SIZE"), e.get("GROUP_RANK"),
                   e.get("GROUP_WORLD_SIZE"), e.get("VLLM_DP_RANK_LOCAL"),
                   e.get("VLLM_DP_SIZE_LOCAL"))
                  == (str(r), str(WORLD), "0", "1", str(r), str(WORLD)))
            api = int(e.get("RDZV_PORT_API", 0))
            check("rank %d: its API port is the third of its own plan" % r, api == plan[2],
                  e.get("RDZV_PORT_API"))
            want = ["--data-parallel-size", str(WORLD), "--data-parallel-rank", str(r),
                    "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(rpc),
                    "--port", str(plan[2])]
            check("rank %d: RDZV_VLLM_ARGS are the four DP flags and the API port" % r,
                  shlex.split(e["RDZV_VLLM_ARGS"]) == want, e["RDZV_VLLM_ARGS"])
            scanned = e["ports_list"] + [e["open_port"]]
            check("rank %d: vLLM's scans got %s, all in its probe pool" % (r, scanned),
                  None not in scanned and all(lo <= p <= hi for p in scanned)
                  and len(set(e["ports_list"])) == 5)
            check("rank %d: no scan reached a role's port" % r,
                  store not in scanned and rpc not in scanned and api not in scanned)
        check("rank 0 bound the store and DP RPC ports under the shim, and they answer",
              engines[0]["listeners"] == [["RDZV_PORT_STORE", store], ["RDZV_PORT_DP_RPC", rpc]],
              engines[0]["listeners"])
        roles = {store: "store", rpc: "dp_rpc"}
        roles.update({plans[r][2]: "api" for r in engines})
        pools = [set(range(plans[r][SKIP], plans[r][-1] + 1)) for r in engines]
        check("no rank's probe pool holds a role's port", not any(roles.keys() & p for p in pools))

        # PATH.env says the same as CMD's environment (the agent keeps it
        # while it runs: read it from an agent that stays up).
        sock = os.path.join(tmp.name, "solo.sock")
        solo = subprocess.Popen([rdzv, "agent", "--server", d.endpoint, "--group", "solo",
                                 "--world", "1", "--rank", "0", "--host", "127.0.0.1",
                                 "--node", "host-a", "--socket", sock, "--shim", shim,
                                 "--port-range", "%d-%d" % (base, base + 1024)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            rdzvtest.wait_for(lambda: os.path.exists(sock + ".env"), "solo's PATH.env")
            text = open(sock + ".env").read()
            sourced = subprocess.run(["sh", "-c", '. "$1" && printf "%s|%s" "$RDZV_VLLM_ARGS" '
                                      '"$VLLM_PORT"', "sh", sock + ".env"],
                                     capture_output=True, text=True)
            first = int(dict(line.split("=", 1) for line in text.splitlines())["RDZV_MASTER_PORT"])
            check("PATH.env sources in sh, with RDZV_VLLM_ARGS and VLLM_PORT",
                  sourced.returncode == 0 and sourced.stdout ==
                  "--data-parallel-size 1 --data-parallel-rank 0 --data-parallel-address "
                  "127.0.0.1 --data-parallel-rpc-port %d --port %d|%d"
                  % (first + 1, first + 2, first + SKIP),
                  sourced.stdout + sourced.stderr)
        finally:
            solo.terminate()
            solo.wait(timeout=20)
    finally:
        d.stop()
    return report.done()


if __name__ == "__main__":
    sys.exit(main())
