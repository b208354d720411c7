#!/usr/bin/python3
"""The shim micro-benchmark. First the pass-through calls an engine makes
that are not the shim's to take: bind() of a port outside the managed
range, bind() of port 0 on 127.0.0.1 (NCCL's and Gloo's listeners), bind()
of port 0 on 0.0.0.0 with SO_REUSEADDR (ZeroMQ's), close() of a socket the
shim never handed over. Median ns per call in three settings, in turns:
no shim; the shim preloaded with RDZV_AGENT_SOCKET unset; the shim as an
engine gets it from a real `rdzv agent` (RDZV_AGENT_SOCKET and
RDZV_PORT_RANGE set, one listener already handed over). In the shim's
settings each call through the shim is paired with the same call straight
to libc in the same process: "in-process" is their difference, the
shim's own share apart from the system call's noise. Then µs per managed
probe, port-0 probe and listener hand-over through the same rdzvd.

Prints the table on stderr and one JSON object on stdout (medians over
--repeat runs; each run's figure is the median of --iterations calls).

    shim_bench.py --build DIR [--repeat 5] [--iterations 20000]
                  [--port-base 15000] [--plan 512] [--handovers 2000]
                  [--baseline-shim OLD.so]

--baseline-shim adds the settings of another build of the shim (before a
change), run in the same turns."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

OPS = [("bind_outside", "bind(), port outside the range"),
       ("bind_port0", "bind(), port 0 on 127.0.0.1"),
       ("bind_port0_any_reuse", "bind(), port 0 on 0.0.0.0, SO_REUSEADDR"),
       ("close_unmanaged", "close() of a socket not handed over")]


def run_json(argv, env, timeout=300):
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        raise SystemExit("%s failed (%d): %s %s" % (argv, p.returncode, p.stdout, p.stderr))
    return json.loads(lines[-1])


def start_rdzvd(rdzvd, d, base, limit, plan):
    ep_file = os.path.join(d, "endpoint")
    srv = subprocess.Popen(
        [rdzvd, "--bind", "tcp://127.0.0.1:*", "--endpoint-file", ep_file,
         "--state-dir", os.path.join(d, "state"), "--port-base", str(base),
         "--ports-per-rank", str(plan), "--port-limit", str(limit), "--no-nccl",
         "--no-fsync"], stderr=open(os.path.join(d, "rdzvd.log"), "w"))
    for _ in range(1000):
        if os.path.exists(ep_file) and open(ep_file).read().strip():
            return srv, open(ep_file).read().strip()
        if srv.poll() is not None:
            break
        time.sleep(0.01)
    srv.terminate()
    raise SystemExit("rdzvd did not start: %s" % open(os.path.join(d, "rdzvd.log")).read())


def agent_argv(rdzv, ep, group, sock, base, limit, shim):
    return [rdzv, "agent", "--server", ep, "--group", group, "--world", "1", "--rank", "0",
            "--host", "127.0.0.1", "--node", "n", "--socket", sock,
            "--port-range", "%d-%d" % (base, limit), "--shim", shim, "--timeout", "20",
            "--health-interval", "0"]


def start_sidecar(argv, sock, d):
    """An agent without CMD (a Pod's sidecar); returns it and its PATH.env."""
    log = open(os.path.join(d, "sidecar.log"), "w")
    p = subprocess.Popen(argv, stdout=log, stderr=log)
    for _ in range(2000):
        if os.path.exists(sock) and os.path.exists(sock + ".env"):
            env = dict(l.rstrip("\n").split("=", 1) for l in open(sock + ".env") if "=" in l)
            return p, env
        if p.poll() is not None:
            break
        time.sleep(0.01)
    p.terminate()
    raise SystemExit("the sidecar agent did not serve: %s"
                     % open(os.path.join(d, "sidecar.log")).read())


def table(out, names):
    """The pass-through figures side by side, as text: ns per call in each
    setting, then the shim's share of each call measured in the same
    process, then the difference against the no-shim process (noisier: two
    processes)."""
    shims = [k for k in names if k != "no_shim"]
    rows = [["", "ns per call"] + [""] * (len(names) - 1)
            + ["the shim's ns, in-process"] + [""] * (len(shims) - 1)
            + ["against no_shim"] + [""] * (len(shims) - 1),
            ["call"] + names + shims + shims]
    for op, what in OPS:
        r = out["passthrough"][op]
        rows.append([what] + ["%.0f" % r[k]["ns"] for k in names]
                    + ["%+.0f" % r[k]["in_process_ns"] for k in shims]
                    + ["%+.0f" % r[k]["added_ns"] for k in shims])
    widths = [max(len(row[i]) for row in rows[1:]) for i in range(len(rows[1]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [c.ljust(widths[i]) if i == 0 or n == 0 else c.rjust(widths[i])
                 for i, c in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="meson build directory")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=20000)
    ap.add_argument("--port-base", type=int, default=15000)
    ap.add_argument("--plan", type=int, default=512)
    ap.add_argument("--handovers", type=int, default=2000)
    ap.add_argument("--baseline-shim", help="another librdzv_shim.so to run beside this one")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless every bind succeeded and every figure is there "
                         "(the test suite's smoke run; no timing)")
    a = ap.parse_args()
    b = os.path.abspath(a.build)
    exe = os.path.join(b, "tests/bench/rdzv-shim-bench")
    shim = os.path.join(b, "shim/librdzv_shim.so")
    rdzvd = os.path.join(b, "rendezvous/rdzvd")
    rdzv = os.path.join(b, "client/rdzv")
    # Two plans: the sidecar's (pass-through runs) and the managed run's.
    base, limit = a.port_base, a.port_base + 2 * a.plan
    clean = {k: v for k, v in os.environ.items()
             if k not in ("LD_PRELOAD", "RDZV_AGENT_SOCKET", "RDZV_PORT_RANGE", "RDZV_PORTS")}
    shims = [("", shim)]
    if a.baseline_shim:
        shims.append(("baseline_", os.path.abspath(a.baseline_shim)))

    with tempfile.TemporaryDirectory(prefix="rdzv-shim-bench-") as d:
        srv, ep = start_rdzvd(rdzvd, d, base, limit, a.plan)
        sidecar = None
        try:
            sock = os.path.join(d, "sidecar.sock")
            sidecar, assigned = start_sidecar(
                agent_argv(rdzv, ep, "shimbench-pass", sock, base, limit, shim), sock, d)
            engine = {k: v for k, v in assigned.items() if k.startswith("RDZV_")}
            engine.update(RDZV_AGENT_SOCKET=sock, RDZV_PORT_RANGE="%d-%d" % (base, limit))
            settings = {"no_shim": dict(clean)}
            for prefix, path in shims:
                settings[prefix + "shim_unset"] = dict(clean, LD_PRELOAD=path)
                settings[prefix + "shim_set"] = dict(clean, LD_PRELOAD=path, **engine)
            runs = {k: [] for k in settings}
            for _ in range(a.repeat):
                for k, env in settings.items():
                    runs[k].append(run_json([exe, "passthrough", str(a.iterations)], env))
            agent = agent_argv(rdzv, ep, "shimbench", os.path.join(d, "agent.sock"), base,
                               limit, shim) + ["--", exe, "managed", str(a.handovers)]
            m = run_json(agent, dict(clean))
        finally:
            if sidecar:
                sidecar.terminate()
                sidecar.wait()
            srv.terminate()
            srv.wait()

    names = list(settings)
    med = lambda k, op, f: statistics.median(r["ops"][op][f] for r in runs[k])
    out = {"iterations": a.iterations, "repeat": a.repeat, "settings": names,
           "failed": sum(r["failed"] for v in runs.values() for r in v),
           "handover_held": {k: runs[k][0].get("handover_held", 0) for k in names},
           "passthrough": {}}
    for op, _ in OPS:
        base_ns = med("no_shim", op, "ns")
        r = out["passthrough"][op] = {}
        for k in names:
            r[k] = {"ns": med(k, op, "ns"), "runs": [x["ops"][op]["ns"] for x in runs[k]],
                    "added_ns": round(med(k, op, "ns") - base_ns, 1),
                    "in_process_ns": round(statistics.median(
                        x["ops"][op]["ns"] - x["ops"][op]["libc_ns"] for x in runs[k]), 1)}
    out["managed"] = m
    print("medians of %d runs of %d calls each; in-process: each call through the shim "
          "against the same call straight to libc in one process\n%s"
          % (a.repeat, a.iterations, table(out, names)), file=sys.stderr)
    print(json.dumps(out))
    if a.check:
        want = ["probe", "port0_probe", "handover", "handover_close"]
        problems = ["managed: %s failed" % m.get("failed")] if m.get("failed") != 0 else []
        problems += ["managed: no %s" % k for k in want if not m.get(k, {}).get("n")]
        problems += ["pass-through: %d calls failed" % out["failed"]] if out["failed"] else []
        problems += ["shim_set: no listener handed over before the calls"] \
            if not out["handover_held"].get("shim_set") else []
        for p in problems:
            print("shim_bench: " + p, file=sys.stderr)
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
