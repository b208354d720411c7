#!/usr/bin/python3
"""What rdzv adds to an engine's start: the time from just before the
engine's process is started (fork/exec) to its first listener bound, for a
bare engine and for the same engine under `rdzv agent -- ENGINE` with the
shim preloaded, as users run it (docs/agent.md; examples/vllm/launch-rank.sh
on bare metal). The runs alternate, bare then agent; each agent run joins a
group of its own, so every start is a real join against the rdzvd this
script starts on loopback (its defaults: journal fsync on).

The engine is a few lines of Python (the same interpreter in both arms): it
takes CLOCK_MONOTONIC at its first line, binds its API port with
SO_REUSEADDR on 0.0.0.0 (RDZV_PORT_API under the agent, which the shim
hands over; a free port bare), listens, and writes both times to a file.
CLOCK_MONOTONIC is one clock for every process on Linux, so the times
compare with the harness's own.

    start_cost.py [--build DIR | --rdzv P --rdzvd P --shim P] [--runs 10]
                  [--world 1] [--python PYTHON] [--json OUT] [--check]

Prints every run, then the medians side by side; exit 77 (skipped) when a
program is missing. --check: exit 1 unless every run started its engine
(the test suite's smoke run; no timing)."""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77
TARGET_MS = 50.0

ENGINE = r"""
import os, sys, time
t_exec = time.monotonic_ns()
import socket
port = int(os.environ.get("RDZV_PORT_API") or os.environ["START_COST_PORT"])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", port))
s.listen(64)
t_listen = time.monotonic_ns()
with open(sys.argv[1], "w") as f:
    f.write("%d %d %d\n" % (t_exec, t_listen, port))
s.close()
"""


def default_build():
    """tree/ beside this script (a device-carry.sh tree), else build-bench
    of the source tree."""
    here = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.join(here, "tree")
    if os.path.isdir(tree):
        return tree
    return os.path.join(os.path.dirname(os.path.dirname(here)), "build-bench")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Rdzvd:
    def __init__(self, exe, d, port_base, port_limit):
        self.d = d
        ep_file = os.path.join(d, "endpoint")
        self.log = open(os.path.join(d, "rdzvd.log"), "w")
        self.proc = subprocess.Popen(
            [exe, "--bind", "tcp://127.0.0.1:*", "--endpoint-file", ep_file,
             "--state-dir", os.path.join(d, "state"), "--port-base", str(port_base),
             "--port-limit", str(port_limit)], stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.proc.poll() is None:
            if os.path.exists(ep_file) and open(ep_file).read().strip():
                self.endpoint = open(ep_file).read().strip()
                return
            time.sleep(0.01)
        self.stop()
        raise SystemExit("start_cost: rdzvd did not start:\n"
                         + open(os.path.join(d, "rdzvd.log")).read()[-2000:])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# The agent's own lines that mark its steps: the join answered, then the
# plan's ports reserved and checked (printed right before CMD is started).
AGENT_STEPS = (("joined", "rdzv agent: group "), ("serving", "rdzv agent: serving "))


def s_stamp_lines(pipe, log, stamps):
    """Copies pipe to log, and notes when each of AGENT_STEPS' lines came."""
    for line in iter(pipe.readline, b""):
        now = time.monotonic_ns()
        for step, prefix in AGENT_STEPS:
            if step not in stamps and line.decode(errors="replace").startswith(prefix):
                stamps[step] = now
        log.write(line)
    pipe.close()


def start_ranks(argvs, envs, logs, stamped=False):
    """Starts one process per rank; returns the start time, the processes
    and, when stamped, one dict per rank that fills with AGENT_STEPS' times."""
    t0 = time.monotonic_ns()
    procs, stamps, readers = [], [], []
    for a, e, l in zip(argvs, envs, logs):
        err = subprocess.PIPE if stamped else l
        procs.append(subprocess.Popen(a, env=e, stdout=l, stderr=err, stdin=subprocess.DEVNULL))
        stamps.append({})
        if stamped:
            readers.append(threading.Thread(target=s_stamp_lines,
                                            args=(procs[-1].stderr, l, stamps[-1])))
            readers[-1].start()
    return t0, procs, stamps, readers


def finish(t0, procs, stamps, readers, outs, timeout):
    """Waits for every rank; returns a dict of ms from t0 to the last rank's
    first listener ("listen"), engine's first line ("exec") and, under the
    agent, each of AGENT_STEPS; or an error string."""
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
                q.wait()
            return "timed out after %.0f s" % timeout
    for r in readers:
        r.join()
    bad = [p.returncode for p in procs if p.returncode != 0]
    if bad:
        return "exit status %s" % bad
    try:
        times = [tuple(int(x) for x in open(o).read().split()[:2]) for o in outs]
    except (OSError, ValueError) as e:
        return "no engine times: %s" % e
    got = {"listen": (max(t[1] for t in times) - t0) / 1e6,
           "exec": (max(t[0] for t in times) - t0) / 1e6}
    for step, _ in AGENT_STEPS:
        if readers and all(step in st for st in stamps):
            got[step] = (max(st[step] for st in stamps) - t0) / 1e6
    return got


def engine_argv(a, out):
    return a.engine_prefix + [a.python, "-I", "-S", "-c", ENGINE, out]


def bare_run(a, d, k, ports):
    outs = [os.path.join(d, "bare-%d-%d.out" % (k, r)) for r in range(a.world)]
    logs = [open(os.path.join(d, "bare-%d-%d.log" % (k, r)), "wb") for r in range(a.world)]
    envs = [dict(os.environ, START_COST_PORT=str(ports[r])) for r in range(a.world)]
    started = start_ranks([engine_argv(a, o) for o in outs], envs, logs)
    return finish(*started, outs, a.timeout)


def agent_run(a, d, k, endpoint):
    group = "startcost-%d-%d" % (os.getpid(), k)
    outs = [os.path.join(d, "agent-%d-%d.out" % (k, r)) for r in range(a.world)]
    logs = [open(os.path.join(d, "agent-%d-%d.log" % (k, r)), "wb") for r in range(a.world)]
    argvs = [[a.rdzv, "agent", "--server", endpoint, "--group", group,
              "--world", str(a.world), "--rank", str(r), "--host", "127.0.0.1",
              "--node", "startcost", "--socket", os.path.join(d, "%s-%d.sock" % (group, r)),
              "--port-range", "%d-%d" % (a.port_base, a.port_limit), "--shim", a.shim,
              "--timeout", str(int(a.timeout)), "--"] + engine_argv(a, outs[r])
             for r in range(a.world)]
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "RDZV_AGENT_SOCKET", "RDZV_PORT_RANGE")}
    started = start_ranks(argvs, [env] * a.world, logs, stamped=True)
    return finish(*started, outs, a.timeout)


# Each step of a start as (name, from, to), from the run's times in ms.
STEPS = {
    "bare": [("process start to the engine's first line", None, "exec"),
             ("first line to first listener", "exec", "listen")],
    "agent": [("rdzv starts and joins (assignment in hand)", None, "joined"),
              ("reserves and checks the plan's ports", "joined", "serving"),
              ("starts CMD, to the engine's first line", "serving", "exec"),
              ("first line to first listener (shim: hand-over)", "exec", "listen")],
}


def help_run(a):
    """ms for `rdzv agent --help`: the agent's program loaded with its
    libraries, started and ended, with no join."""
    t0 = time.monotonic_ns()
    p = subprocess.run([a.rdzv, "agent", "--help"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return (time.monotonic_ns() - t0) / 1e6 if p.returncode == 0 else None


def summary(runs, world):
    """Medians of the runs, and of each step's share."""
    med = lambda arm, key: statistics.median(r[key] for r in runs[arm])
    bare, agent = med("bare", "listen"), med("agent", "listen")
    steps = {arm: [(name, round(statistics.median(r[b] - (r[a] if a else 0) for r in rs), 2))
                   for name, a, b in STEPS[arm] if all(b in r for r in rs)]
             for arm, rs in runs.items() if arm in STEPS}
    return {"world": world, "runs": len(runs["bare"]),
            "bare_ms": round(bare, 2), "agent_ms": round(agent, 2),
            "added_ms": round(agent - bare, 2), "ratio": round(agent / bare, 2),
            "bare_exec_ms": round(med("bare", "exec"), 2),
            "agent_exec_ms": round(med("agent", "exec"), 2),
            "steps": steps, "target_added_ms": TARGET_MS, "every_run": runs,
            "rdzv_help_ms": round(statistics.median(runs["help"]), 2) if runs["help"] else None}


def report(s):
    print("\nworld %d, medians of %d runs each, ms from just before fork/exec:"
          % (s["world"], s["runs"]))
    print("  %-48s %8s %8s" % ("", "bare", "agent"))
    print("  %-48s %8.1f %8.1f" % ("the engine's first line", s["bare_exec_ms"],
                                    s["agent_exec_ms"]))
    print("  %-48s %8.1f %8.1f" % ("the first listener bound", s["bare_ms"], s["agent_ms"]))
    print("  added by rdzv: %.1f ms (%.2fx); target: under %.0f ms"
          % (s["added_ms"], s["ratio"], TARGET_MS))
    print("each step, the median of its share in each run (ms):")
    for arm in ("bare", "agent"):
        for name, ms in s["steps"][arm]:
            print("  %-5s %-50s %7.1f" % (arm, name, ms))
    if s["rdzv_help_ms"] is not None:
        print("  (`rdzv agent --help`, the program's start alone, between the runs: %.1f ms)"
              % s["rdzv_help_ms"])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=default_build(),
                    help="a meson build directory or a device-carry.sh tree/ (default: "
                         "tree/ beside this script, else build-bench)")
    ap.add_argument("--rdzv", help="default: BUILD/client/rdzv")
    ap.add_argument("--rdzvd", help="default: BUILD/rendezvous/rdzvd")
    ap.add_argument("--shim", help="default: BUILD/shim/librdzv_shim.so")
    ap.add_argument("--runs", type=int, default=10, help="runs of each arm (default 10)")
    ap.add_argument("--world", type=int, default=1, help="ranks started at once (default 1)")
    ap.add_argument("--python", default=sys.executable, help="the engine's interpreter")
    ap.add_argument("--port-base", type=int, default=20000)
    ap.add_argument("--port-limit", type=int, default=32000)
    ap.add_argument("--timeout", type=float, default=60, help="seconds per run")
    ap.add_argument("--json", help="write the figures and every run here")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless every run started (no timing)")
    a = ap.parse_args()
    b = os.path.abspath(a.build)
    a.rdzv = os.path.abspath(a.rdzv or os.path.join(b, "client/rdzv"))
    a.rdzvd = os.path.abspath(a.rdzvd or os.path.join(b, "rendezvous/rdzvd"))
    a.shim = os.path.abspath(a.shim or os.path.join(b, "shim/librdzv_shim.so"))
    missing = [p for p in (a.rdzv, a.rdzvd, a.shim) if not os.path.exists(p)]
    if not shutil.which(a.python):
        missing.append(a.python)
    if missing:
        print("start_cost: skipped: %s missing (--build, --rdzv, --rdzvd, --shim, --python)"
              % ", ".join(missing))
        return SKIP
    # A device-carry.sh wrapper sets LD_LIBRARY_PATH for rdzv, and the agent
    # passes it on to the engine, which would then load the carried
    # libraries: both arms' engines start through env without it.
    a.engine_prefix = []
    with open(a.rdzv, "rb") as f:
        if f.read(2) == b"#!" and shutil.which("env"):
            a.engine_prefix = [shutil.which("env"), "-u", "LD_LIBRARY_PATH"]
            print("start_cost: %s is a wrapper; both arms start the engine through "
                  "`env -u LD_LIBRARY_PATH`" % a.rdzv)
    plans = (a.port_limit - a.port_base) // 32
    if a.world * (a.runs + 1) > plans:
        raise SystemExit("start_cost: %d-%d holds %d plans of 32 ports; %d runs of %d ranks "
                         "need %d" % (a.port_base, a.port_limit, plans, a.runs + 1, a.world,
                                      a.world * (a.runs + 1)))

    runs = {"bare": [], "agent": [], "help": []}
    failures = []
    ports = [free_port() for _ in range(a.world)]
    with tempfile.TemporaryDirectory(prefix="rdzv-start-cost-") as d:
        srv = Rdzvd(a.rdzvd, d, a.port_base, a.port_limit)
        try:
            # Run 0 of each arm warms the page cache and is not counted.
            for k in range(a.runs + 1):
                for arm in ("bare", "agent"):
                    got = bare_run(a, d, k, ports) if arm == "bare" else \
                        agent_run(a, d, k, srv.endpoint)
                    if isinstance(got, str):
                        log = os.path.join(d, "%s-%d-0.log" % (arm, k))
                        failures.append("%s run %d: %s\n%s" % (arm, k, got,
                                                               open(log).read()[-1500:]))
                        continue
                    print("%-5s run %2d: first listener %7.2f ms (engine's first line %7.2f ms)"
                          % (arm, k, got["listen"], got["exec"])
                          + (" (warm-up)" if k == 0 else ""), flush=True)
                    if k:
                        runs[arm].append(got)
                help_ms = help_run(a)
                if k and help_ms is not None:
                    runs["help"].append(help_ms)
        finally:
            srv.stop()
    for f in failures:
        print("start_cost: " + f, file=sys.stderr)
    if not runs["bare"] or not runs["agent"]:
        return 1
    s = summary(runs, a.world)
    report(s)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(s, f, indent=1)
    return 1 if a.check and failures else 0


if __name__ == "__main__":
    sys.exit(main())
