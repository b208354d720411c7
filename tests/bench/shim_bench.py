#!/usr/bin/python3
"""The shim micro-benchmark: ns per bind()+close() on a pass-through port
without the shim, with it preloaded and RDZV_AGENT_SOCKET unset, and with it
set but the port outside the managed range (also bind() and close() of fd
-1, where only the shim and a bare system call remain); then µs per managed probe,
port-0 probe and listener hand-over through a real `rdzv agent` and rdzvd.
Prints one JSON object (medians over --repeat runs for the pass-through).

    shim_bench.py --build DIR [--repeat 5] [--iterations 200000]
                  [--port-base 15000] [--plan 512] [--handovers 2000]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run_json(argv, env, timeout=120):
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        raise SystemExit("%s failed (%d): %s %s" % (argv, p.returncode, p.stdout, p.stderr))
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="meson build directory")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=200000)
    ap.add_argument("--port-base", type=int, default=15000)
    ap.add_argument("--plan", type=int, default=512)
    ap.add_argument("--handovers", type=int, default=2000)
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless every bind succeeded and every figure is there "
                         "(the test suite's smoke run; no timing)")
    a = ap.parse_args()
    b = os.path.abspath(a.build)
    exe = os.path.join(b, "tests/bench/rdzv-shim-bench")
    shim = os.path.join(b, "shim/librdzv_shim.so")
    rdzvd = os.path.join(b, "rendezvous/rdzvd")
    rdzv = os.path.join(b, "client/rdzv")
    base, limit = a.port_base, a.port_base + a.plan
    clean = {k: v for k, v in os.environ.items()
             if k not in ("LD_PRELOAD", "RDZV_AGENT_SOCKET", "RDZV_PORT_RANGE")}
    settings = {
        "no_shim": dict(clean),
        "shim_unset": dict(clean, LD_PRELOAD=shim),
        "shim_outside_range": dict(clean, LD_PRELOAD=shim,
                                   RDZV_AGENT_SOCKET="/nonexistent/rdzv-agent.sock",
                                   RDZV_PORT_RANGE="%d-%d" % (base, limit)),
    }
    # Per setting: bind+close of a real socket, and bind / close of fd -1,
    # where the system call is short enough for the shim's own ns to show.
    fields = {"": "ns_per_bind_close", "bind_ebadf_": "ns_per_bind_ebadf",
              "close_ebadf_": "ns_per_close_ebadf"}
    ns = {(f, k): [] for f in fields for k in settings}
    for _ in range(a.repeat):
        for k, env in settings.items():
            r = run_json([exe, "passthrough", str(a.iterations)], env)
            for f, field in fields.items():
                ns[(f, k)].append(r[field])
    out = {"iterations": a.iterations, "repeat": a.repeat}
    for (f, k), v in ns.items():
        out["ns_%s%s" % (f, k)] = round(statistics.median(v), 1)
        out["ns_%s%s_runs" % (f, k)] = v
    for f in fields:
        for k in ("unset", "outside_range"):
            out["ns_%soverhead_%s" % (f, k)] = round(
                out["ns_%sshim_%s" % (f, k)] - out["ns_%sno_shim" % f], 1)

    with tempfile.TemporaryDirectory(prefix="rdzv-shim-bench-") as d:
        ep_file = os.path.join(d, "endpoint")
        srv = subprocess.Popen(
            [rdzvd, "--bind", "tcp://127.0.0.1:*", "--endpoint-file", ep_file,
             "--state-dir", os.path.join(d, "state"), "--port-base", str(base),
             "--ports-per-rank", str(a.plan), "--port-limit", str(limit), "--no-nccl",
             "--no-fsync"], stderr=open(os.path.join(d, "rdzvd.log"), "w"))
        try:
            for _ in range(500):
                if os.path.exists(ep_file) and open(ep_file).read().strip():
                    break
                time.sleep(0.01)
            ep = open(ep_file).read().strip()
            agent = [rdzv, "agent", "--server", ep, "--group", "shimbench", "--world", "1",
                     "--rank", "0", "--host", "127.0.0.1", "--node", "n", "--socket",
                     os.path.join(d, "agent.sock"), "--port-range", "%d-%d" % (base, limit),
                     "--shim", shim, "--timeout", "20", "--",
                     exe, "managed", str(a.handovers)]
            m = run_json(agent, dict(clean))
        finally:
            srv.terminate()
            srv.wait()
    out["managed"] = m
    print(json.dumps(out))
    if a.check:
        want = ["probe", "port0_probe", "handover", "handover_close"]
        problems = ["managed: %s failed" % m.get("failed")] if m.get("failed") != 0 else []
        problems += ["managed: no %s" % k for k in want if not m.get(k, {}).get("n")]
        problems += ["%s missing" % k for k in ("ns_no_shim", "ns_bind_ebadf_overhead_unset",
                                               "ns_close_ebadf_overhead_outside_range")
                     if k not in out]
        for p in problems:
            print("shim_bench: " + p, file=sys.stderr)
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
