#!/usr/bin/python3
"""The harness of the shim's integration cases (integration.py, lease_test.py):
a Pod is a real rdzvd and one real `rdzv agent` on a managed range of the
case's own (BASE + SPAN * index), with the snippets programs under the shim
run, and the runner's command line."""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap

import rdzvtest
from rdzvtest import Fail, Skip, check  # noqa: F401 (the cases import them from here)

PY = "/usr/bin/python3"
BASE = 27000
SPAN = 16
PER_RANK = 8
WAIT_S = 20


def wait_for(pred, what, timeout=WAIT_S):
    return rdzvtest.wait_for(pred, what, timeout=timeout, step=0.05)


def outside_port():
    """A free port outside every case's range: one the kernel picks (the
    ephemeral range lies above the managed ranges)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 0))
    port = s.getsockname()[1]
    s.close()
    check(port >= BASE + SPAN * 64, "the kernel picked %d inside the test ranges" % port)
    return port


class Pod:
    """rdzvd + one agent (sidecar unless cmd is given) for one case."""

    def __init__(self, opts, index, cmd=None, agent_args=(), before_agent=None,
                 agent_prefix=()):
        self.opts = opts
        self.base = BASE + SPAN * index
        self.limit = self.base + SPAN
        self.tmp = tempfile.TemporaryDirectory(prefix="rdzv-shim-")
        d = self.tmp.name
        self.sock = os.path.join(d, "agent.sock")
        self.rdzvd = rdzvtest.Rdzvd(
            opts.rdzvd, d, "--port-base", str(self.base), "--ports-per-rank", str(PER_RANK),
            "--port-limit", str(self.limit), "--no-nccl")
        self.endpoint = self.rdzvd.endpoint
        if before_agent:
            before_agent(self)
        self.agent_log = os.path.join(d, "agent.log")
        argv = [*agent_prefix, opts.rdzv, "agent", "--server", self.endpoint, "--group", "g%d" % index,
                "--world", "1", "--rank", "0", "--host", "127.0.0.1", "--node", "n",
                "--socket", self.sock, "--port-range", "%d-%d" % (self.base, self.limit),
                "--shim", opts.shim, "--heartbeat", "1", "--timeout", "20", *agent_args]
        if cmd:
            argv += ["--", *cmd]
        self.agent = subprocess.Popen(argv, stderr=open(self.agent_log, "w"),
                                      stdout=subprocess.PIPE, text=True)
        if not cmd:
            wait_for(lambda: os.path.exists(self.sock), "the agent's socket")
        self.plan = list(range(self.base, self.base + PER_RANK))

    def env(self, **extra):
        env = dict(os.environ)
        env.pop("RDZV_PORT_RANGE", None)
        env["LD_PRELOAD"] = self.opts.shim
        env["RDZV_AGENT_SOCKET"] = self.sock
        env.update(extra)
        return env

    def run(self, argv, env=None, check_rc=True, timeout=WAIT_S):
        p = subprocess.run(argv, env=env or self.env(), capture_output=True, text=True,
                           timeout=timeout)
        if check_rc and p.returncode != 0:
            raise Fail("%s exited %d: %s%s" % (argv[:2], p.returncode, p.stdout, p.stderr))
        return p

    def py(self, code, env=None, check_rc=True):
        return self.run([PY, "-c", textwrap.dedent(code)], env=env, check_rc=check_rc)

    def py_json(self, code, env=None):
        return json.loads(self.py(code, env=env).stdout.strip().splitlines()[-1])

    def env_file(self):
        """PATH.env as a dict; {} while the agent has withdrawn it."""
        try:
            with open(self.sock + ".env") as f:
                return dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)
        except FileNotFoundError:
            return {}

    def stop_agent(self):
        """SIGTERM to a sidecar agent: it must exit 0, and cleanly."""
        self.agent.send_signal(signal.SIGTERM)
        rc = self.agent.wait(timeout=WAIT_S)
        log = open(self.agent_log).read()
        check(rc == 0 and "Sanitizer" not in log and "runtime error" not in log,
              "the agent exited %d after SIGTERM: %s" % (rc, log))
        check(not os.path.exists(self.sock) and not os.path.exists(self.sock + ".env"),
              "the agent left its socket or env file behind")

    def close(self):
        if self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
            try:
                self.agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait()
        self.rdzvd.stop()
        self.tmp.cleanup()


PROBE = """
import json, os, socket
def probe(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        s.bind(("0.0.0.0", port))
        return s.getsockname()[1]
    except OSError:
        return None
    finally:
        s.close()
def scan(start, n, stop):
    got, port = [], start
    while len(got) < n and port < stop:
        if probe(port):
            got.append(port)
        port += 1
    return got
"""


# For programs under the shim: a SO_REUSEADDR listener on a port, and
# whether a connect to a port is refused. Not create_connection(): its
# getaddrinfo() opens and closes files, and a close() that lands on a number
# the shim still tracks would tell the agent by accident; for the same
# reason the connecting sockets stay open.
LISTEN = """
import ctypes, errno, json, os, socket, subprocess, threading
def listener(port):
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("0.0.0.0", port)); l.listen(); return l
_open = []
def refused(port):
    c = socket.socket(); c.settimeout(2); _open.append(c)
    try:
        c.connect(("127.0.0.1", port)); return False
    except ConnectionRefusedError:
        return True
"""


def case_options(cases):
    """The command line of this runner and lease_test.py: CASE and the
    paths of what it runs; None once `list` has printed the cases."""
    ap = argparse.ArgumentParser()
    for path in ("--rdzvd", "--rdzv", "--shim", "--listener", "--close-race"):
        ap.add_argument(path)
    return rdzvtest.choose(cases, ap)


def run_pod_case(opts, index, case, **pod_args):
    """case(pod) in a fresh Pod; the agent's log on failure."""
    pod = Pod(opts, index, **pod_args)
    try:
        case(pod)
        pod.stop_agent()
    except Exception:
        sys.stderr.write("--- agent log ---\n" + open(pod.agent_log).read())
        raise
    finally:
        pod.close()
