#!/usr/bin/python3
"""Integration tests of `rdzv agent` and librdzv_shim.so (docs/agent.md) with a
real rdzvd, a real agent and real programs under LD_PRELOAD, on loopback.

    integration.py CASE --rdzvd EXE --rdzv EXE --shim SO --listener EXE \
        --close-race EXE

Each case starts its own rdzvd and agent on a managed range of its own
(BASE + 16 * index, 16 ports, 8 per rank), so cases may run in parallel.
Exit 0 pass, 1 fail, 77 skip."""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

PY = "/usr/bin/python3"
BASE = 27000
SPAN = 16
PER_RANK = 8
WAIT_S = 20


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import rdzvtest  # noqa: E402
from rdzvtest import Fail, Skip, check  # noqa: E402,F401


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


def case_probe_scan(pod):
    """vLLM scans from VLLM_PORT: two scans of four give eight distinct ports of the plan."""
    vllm_port = int(pod.env_file()["VLLM_PORT"])
    check(vllm_port == pod.plan[0], "VLLM_PORT is the plan's first port")
    got = pod.py_json(PROBE + "print(json.dumps([scan(%d, 4, %d), scan(%d, 4, %d)]))"
                      % (vllm_port, pod.limit, vllm_port, pod.limit))
    check(got[0] == pod.plan[:4] and got[1] == pod.plan[4:8],
          "the scans got %s, not the plan %s in two halves" % (got, pod.plan))


def case_two_processes_scan(pod):
    """Two scans in two live processes of one engine never return the same port."""
    code = PROBE + """
import sys, time
print(json.dumps(scan(%d, 3, %d)), flush=True)
sys.stdin.read()
""" % (pod.plan[0], pod.limit)
    procs = [subprocess.Popen([PY, "-c", code], env=pod.env(), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    lists = [json.loads(p.stdout.readline()) for p in procs]
    for p in procs:
        p.stdin.close()
        p.wait(timeout=WAIT_S)
    ports = lists[0] + lists[1]
    check(len(ports) == 6 and len(set(ports)) == 6 and set(ports) <= set(pod.plan),
          "two scans overlapped or left the plan: %s" % lists)


def case_probe_then_listener(pod):
    """A probed port is bound later by a SO_REUSEADDR listener in the same Pod."""
    got = pod.py_json(PROBE + """
port = scan(%d, 1, %d)[0]
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("", port)); l.listen()
c = socket.create_connection(("127.0.0.1", port), timeout=5)
a, _ = l.accept(); c.sendall(b"tok"); ok = a.recv(3) == b"tok"
print(json.dumps([port, ok]))
""" % (pod.plan[0], pod.limit))
    check(got == [pod.plan[0], True], "probe then listener: %s" % got)


def case_port0_probe(pod):
    """A port-0 probe gets the next free plan port, which a later bind lands on;
    a port-0 bind with SO_REUSEADDR passes through to the kernel."""
    got = pod.py_json(PROBE + """
s = socket.socket(); s.bind(("0.0.0.0", 0)); first = s.getsockname()[1]; s.close()
s = socket.socket(); s.bind(("0.0.0.0", 0)); second = s.getsockname()[1]; s.close()
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", first)); l.listen(); bound = l.getsockname()[1]
k = socket.socket(); k.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
k.bind(("0.0.0.0", 0)); kernel = k.getsockname()[1]
print(json.dumps([first, second, bound, kernel]))
""")
    first, second, bound, kernel = got
    check([first, second] == pod.plan[:2], "port-0 probes got %s" % got)
    check(bound == first, "the later bind did not land on the probed port")
    check(not pod.base <= kernel < pod.limit, "a SO_REUSEADDR port-0 bind was managed")


def case_port0_on_address(pod):
    """NCCL's bootstrap and proxy listeners bind port 0 on the interface's
    address with no flags, then listen: they pass through to the kernel, so
    a store's listener on the master port later gets every connection."""
    got = pod.py_json(PROBE + """
n = socket.socket(); n.bind(("127.0.0.1", 0)); n.listen(); nccl = n.getsockname()[1]
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", %d)); l.listen(16); l.settimeout(5)
reached = 0
for _ in range(8):
    c = socket.create_connection(("127.0.0.1", %d), timeout=5)
    a, _ = l.accept(); a.close(); c.close(); reached += 1
print(json.dumps([nccl, reached]))
""" % (pod.plan[0], pod.plan[0]))
    nccl, reached = got
    check(not pod.base <= nccl < pod.limit,
          "a port-0 listener on one address took managed port %d" % nccl)
    check(reached == 8, "the master-port listener accepted %d of 8 connections" % reached)


def case_probe_that_listens(pod):
    """A wildcard port-0 bind without flags that then listens keeps its plan
    port: a second listener there gets EADDRINUSE, as without the shim, so
    no two listeners share it. Once it is closed, the port serves again."""
    got = pod.py_json(PROBE + """
import errno
import time
p = socket.socket(); p.bind(("0.0.0.0", 0)); p.listen(); port = p.getsockname()[1]
def listener():
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        l.bind(("0.0.0.0", port)); l.listen(); return l, 0
    except OSError as e:
        l.close(); return None, e.errno
_, while_listening = listener()
p.close()
time.sleep(0.2)
l, after_close = listener()
print(json.dumps([port, while_listening, after_close]))
""")
    port, while_listening, after_close = got
    check(pod.base <= port < pod.limit, "the port-0 probe got %d, not a plan port" % port)
    check(while_listening == 98, "a second listener beside a listening probe: errno %d"
          % while_listening)
    check(after_close == 0, "after the probe socket closed, its port: errno %d" % after_close)


def case_exhausted(pod):
    """Once the plan is leased, probes and port-0 probes get EADDRINUSE, and so
    does every other port of the range."""
    got = pod.py_json(PROBE + """
import errno
leased = [probe(0) for _ in range(%d)]
def err(port):
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", port)); return 0
    except OSError as e:
        return e.errno
    finally:
        s.close()
print(json.dumps([leased, err(0), [err(p) for p in range(%d, %d)]]))
""" % (PER_RANK, pod.base, pod.limit))
    leased, port0, rest = got
    check(leased == pod.plan, "port-0 probes leased %s" % leased)
    check(port0 == 98, "a port-0 probe on an exhausted plan: errno %d" % port0)
    check(rest == [98] * SPAN, "probes of the range after exhaustion: %s" % rest)


def case_foreign_listener(pod):
    """A listener on a range port outside the plan gets EADDRINUSE; one outside
    the range passes through."""
    got = pod.py_json("""
import json, socket
def listen(port):
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        l.bind(("0.0.0.0", port)); l.listen(); return 0
    except OSError as e:
        return e.errno
print(json.dumps([listen(%d), listen(%d)]))
""" % (pod.plan[-1] + 1, outside_port()))
    check(got == [98, 0], "foreign listener / outside listener: %s" % got)


def listener_case(mode, port_offset=0):
    def run(pod):
        pod.run([pod.opts.listener, mode, str(pod.plan[port_offset])])
    run.__doc__ = "The C listener in mode %s." % mode
    return run


def case_zmq(pod):
    """libzmq's tcp://*:PORT bind lands on the handed-over socket and serves."""
    got = pod.py_json("""
import json, zmq
ctx = zmq.Context()
r = ctx.socket(zmq.ROUTER); r.bind("tcp://*:%d")
d = ctx.socket(zmq.DEALER); d.connect("tcp://127.0.0.1:%d")
d.send(b"token")
r.RCVTIMEO = 5000
ident, msg = r.recv_multipart()
print(json.dumps(msg.decode()))
r.close(0); d.close(0); ctx.term()
""" % (pod.plan[2], pod.plan[2]))
    check(got == "token", "zmq got %r" % got)
    # The port is taken while that listener lived; a plain bind from outside the shim fails.


def case_other_uid(pod):
    """While the agent holds the plan, binds that do not go through it fail:
    another uid (even with SO_REUSEADDR and SO_REUSEPORT, even with the shim,
    whose agent socket it cannot open), and the same uid without the shim."""
    code = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
try:
    s.bind(("0.0.0.0", %d)); print("bound")
except OSError as e:
    print("errno", e.errno)
""" % pod.plan[0]
    if os.geteuid() != 0:
        raise Skip("needs root to run a program under another uid")
    other = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", PY, "-c", code]
    bare = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "RDZV_AGENT_SOCKET")}
    for env in (bare, pod.env()):
        out = pod.run(other, env=env).stdout.strip()
        check(out == "errno 98", "uid 65534 bind: %s" % out)
    plain = code.replace('s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)', '')
    out = pod.run([PY, "-c", plain], env=bare).stdout.strip()
    check(out == "errno 98", "same uid without the shim: %s" % out)


def case_passthrough(pod):
    """UDP, unix sockets and ports outside the range pass through, without
    the agent (a dead socket path: no message, no failure); with the
    variable unset the shim says so once on stderr."""
    code = """
import os, socket, tempfile
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", %d))
x = socket.socket(socket.AF_UNIX); x.bind(os.path.join(tempfile.mkdtemp(), "s"))
for addr in ("0.0.0.0", "127.0.0.1"):
    t = socket.socket(); t.bind((addr, %d)); t.close()
print("ok")
""" % (pod.plan[0], outside_port())
    env = pod.env(RDZV_AGENT_SOCKET="/nonexistent/agent.sock",
                  RDZV_PORT_RANGE="%d-%d" % (pod.base, pod.limit))
    p = pod.py(code, env=env)
    check(p.stdout.strip() == "ok" and "librdzv_shim" not in p.stderr,
          "pass-through with the range known: %r %r" % (p.stdout, p.stderr))
    env = pod.env()
    del env["RDZV_AGENT_SOCKET"]
    p = pod.py(code, env=env)
    check(p.stdout.strip() == "ok" and p.stderr.count("librdzv_shim") == 1,
          "variable unset: %r" % p.stderr)


def case_close_listener(pod):
    """Closing a handed-over listener tells the agent: no connection is queued
    to it afterwards, and the port takes a new listener."""
    got = pod.py_json(LISTEN + """
l = listener(%(p)d); l.close()
print(json.dumps([refused(%(p)d), listener(%(p)d).getsockname()[1]]))
""" % {"p": pod.plan[1]})
    check(got == [True, pod.plan[1]], "close then listen again: %s" % got)


def replace_case(how):
    """A handed-over listener's descriptor freed by dup2(), dup3() or
    close_range() instead of close(): the agent must hear of it as of a
    close (connections refused, the port takes a new listener). "kept":
    dup2() over it while a dup() still holds it; "unshare": close_range()
    with CLOSE_RANGE_UNSHARE in another thread, which closes it in that
    thread's own table only. Both leave the listener the process's.
    "unshare_alone": the same call with one thread, where the kernel copies
    no table and closes the process's own.
    "vfork": a subprocess started (CPython's vfork(), whose child runs
    close_range() in this process's memory before exec), then close(): the
    child must not have emptied the parent's table."""
    free = {
        "dup2": "os.dup2(null, fd)",
        "dup3": "os.dup2(null, fd, inheritable=False)",
        "close_range": "assert libc.close_range(fd, fd, 0) == 0",
        "kept": "keep = os.dup(fd); os.dup2(null, fd)",
        "unshare": "t = threading.Thread(target=libc.close_range, args=(fd, fd, 2)); "
                   "t.start(); t.join()",
        "unshare_alone": "assert threading.active_count() == 1; "
                         "assert libc.close_range(fd, fd, 2) == 0",
        "vfork": "assert subprocess._USE_VFORK; "
                 "subprocess.run(['/bin/true'], check=True); os.close(fd)",
    }[how]

    def case(pod):
        port = pod.plan[2]
        got = pod.py_json(LISTEN + """
libc = ctypes.CDLL(None, use_errno=True)
fd = listener(%(p)d).detach()
null = os.open("/dev/null", os.O_RDONLY)
%(free)s
no = refused(%(p)d)
try:
    again = listener(%(p)d).getsockname()[1]
except OSError as e:
    again = errno.errorcode[e.errno]
print(json.dumps([no, again]))
""" % {"p": port, "free": free})
        want = [False, "EADDRINUSE"] if how in ("kept", "unshare") else [True, port]
        check(got == want, "%s over the listener, then connect and listen again: %s, not %s"
              % (how, got, want))
    return case


def case_fork_before_first_bind(pod):
    """A process forks before it ever binds (multiprocessing's fork start
    method, say); the child's listener on a plan port is still handed over
    by the agent, and its close() still tells the agent."""
    got = pod.py_json(LISTEN + """
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        listener(%(p)d).close(); out = "ok"
    except OSError as e:
        out = "bind: " + os.strerror(e.errno)
    os.write(w, out.encode()); os._exit(0)
os.waitpid(pid, 0)
print(json.dumps([os.read(r, 200).decode(), refused(%(p)d)]))
""" % {"p": pod.plan[4]})
    check(got == ["ok", True], "a child forked before any bind: %s" % got)


def case_dead_engine_listener(pod):
    """A listener left behind by an engine process that died (its fd still
    open in a forked child) is shut down by the agent: the queued connection
    is reset and new ones are refused, while the child still lives."""
    port = pod.plan[3]
    code = """
import os, socket, sys, time
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", %d)); l.listen(8)
pid = os.fork()
if pid == 0:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.setsid(); time.sleep(30); os._exit(0)
print(pid, flush=True)
""" % port
    p = pod.py(code)
    child = int(p.stdout.strip())
    try:
        check(os.path.exists("/proc/%d" % child), "the forked child is alive")

        def refused():
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return False
            except ConnectionRefusedError:
                return True
        wait_for(refused, "the dead engine's listener to refuse connections", 10)
    finally:
        os.kill(child, signal.SIGKILL)


def case_queued_reset(pod):
    """A connection queued (not accepted) to a listener whose process died is
    reset, not left hanging."""
    port = pod.plan[4]
    code = """
import os, socket, sys, time
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", %d)); l.listen(8)
pid = os.fork()
if pid == 0:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.setsid(); time.sleep(30); os._exit(0)
print(pid, flush=True)
sys.stdin.readline()
""" % port
    eng = subprocess.Popen([PY, "-c", code], env=pod.env(), stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    child = int(eng.stdout.readline())
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        eng.stdin.close()
        eng.wait(timeout=WAIT_S)
        c.settimeout(10)
        try:
            data = c.recv(1)
            check(data == b"", "the queued connection got data")
        except ConnectionResetError:
            pass
        except socket.timeout:
            raise Fail("the queued connection hangs on a dead engine's listener")
    finally:
        os.kill(child, signal.SIGKILL)


def case_new_engine_epoch(pod):
    """A new engine process (after the last one went away) moves the group to a
    new epoch; the env file shows it and the old leases are back in the plan."""
    check(pod.env_file()["RDZV_EPOCH"] == "1", "first epoch")
    first = pod.py_json(PROBE + "print(json.dumps(scan(%d, 2, %d)))" % (pod.base, pod.limit))
    wait_for(lambda: pod.env_file().get("RDZV_EPOCH") == "2", "epoch 2 in the env file")
    second = pod.py_json(PROBE + "print(json.dumps(scan(%d, 2, %d)))" % (pod.base, pod.limit))
    check(first == second == pod.plan[:2], "leases after the engine went: %s %s" % (first, second))
    status = subprocess.run([pod.opts.rdzv, "status", "--server", pod.endpoint],
                            capture_output=True, text=True, timeout=WAIT_S)
    check('"epoch":2' in status.stdout.replace(" ", "") or '"epoch":3' in status.stdout.replace(" ", ""),
          "rdzv status: %s" % status.stdout)


# An engine as the StatefulSet example starts one: it notes the epoch of
# the env file it started from, holds a plan port through the shim (so the
# agent counts it as the engine) and waits to be killed.
EPOCH_ENGINE = """
import os, socket, sys, time
env = dict(l.split("=", 1) for l in open(sys.argv[1]).read().splitlines() if "=" in l)
open(sys.argv[2], "w").write(env["RDZV_EPOCH"])
s = socket.socket(); s.bind(("0.0.0.0", int(env["VLLM_PORT"])))
print("up", env["RDZV_EPOCH"], flush=True)
time.sleep(600)
"""


def case_epoch_follows(opts, index):
    """Two sidecar agents of one group. Rank 0's engine dies: the group moves
    to epoch 2, and rank 0's env file is gone until epoch 2 has formed. Rank
    1's engine, still on epoch 1, is then restarted (as a liveness probe that
    compares epochs would): its agent must not move the group again, or each
    rank's restart would restart the others without end."""
    tmp = tempfile.TemporaryDirectory(prefix="rdzv-epoch-")
    second = {}

    def start_rank1(pod):
        second["sock"] = os.path.join(tmp.name, "rank1.sock")
        second["log"] = os.path.join(tmp.name, "rank1.log")
        second["agent"] = subprocess.Popen(
            [opts.rdzv, "agent", "--server", pod.endpoint, "--group", "g%d" % index,
             "--world", "2", "--rank", "1", "--host", "127.0.0.1", "--node", "n",
             "--socket", second["sock"], "--port-range", "%d-%d" % (pod.base, pod.limit),
             "--shim", opts.shim, "--heartbeat", "3", "--timeout", "20"],
            stderr=open(second["log"], "w"))

    pod = Pod(opts, index, agent_args=["--world", "2"], before_agent=start_rank1)
    engines = []

    def engine(sock, name):
        p = subprocess.Popen([PY, "-c", EPOCH_ENGINE, sock + ".env", os.path.join(tmp.name, name)],
                             env=pod.env(RDZV_AGENT_SOCKET=sock), stdout=subprocess.PIPE, text=True)
        engines.append(p)
        line = p.stdout.readline().split()
        check(line[:1] == ["up"], "an engine did not start under the shim")
        return p, int(line[1])

    def epoch_of(sock):
        try:
            env = dict(l.split("=", 1) for l in open(sock + ".env").read().splitlines() if "=" in l)
        except FileNotFoundError:
            return None
        return int(env["RDZV_EPOCH"])

    try:
        wait_for(lambda: os.path.exists(second["sock"]), "rank 1's socket")
        e0, ep0 = engine(pod.sock, "e0")
        e1, ep1 = engine(second["sock"], "e1")
        check(ep0 == ep1 == 1, "both engines start in epoch 1: %d %d" % (ep0, ep1))
        e0.kill(); e0.wait()
        # Rank 1 heartbeats every 3 s, so epoch 2 takes that long to form.
        wait_for(lambda: epoch_of(pod.sock) is None, "rank 0's env file withdrawn until "
                 "epoch 2 forms", timeout=3)
        wait_for(lambda: epoch_of(second["sock"]) == 2 and epoch_of(pod.sock) == 2,
                 "epoch 2 in both env files")
        e1.kill(); e1.wait()     # what the liveness probe makes kubelet do
        time.sleep(7)            # two of rank 1's heartbeats: time for a needless move
        check(epoch_of(pod.sock) == 2 and epoch_of(second["sock"]) == 2,
              "the restart of an engine of epoch 1 moved the group again: %s %s"
              % (epoch_of(pod.sock), epoch_of(second["sock"])))
        _, n0 = engine(pod.sock, "n0")
        _, n1 = engine(second["sock"], "n1")
        check(n0 == n1 == 2, "the new engines start in epoch 2: %d %d" % (n0, n1))
        log = open(second["log"]).read()
        check("the engine of epoch 1 has gone" in log, "rank 1's agent log: %s" % log)
    finally:
        for p in engines:
            if p.poll() is None:
                p.kill()
                p.wait()
        if second.get("agent") and second["agent"].poll() is None:
            second["agent"].terminate()
            second["agent"].wait(timeout=10)
        pod.close()
        tmp.cleanup()


def case_cmd(opts, index):
    """With -- CMD: CMD gets the assignment, LD_PRELOAD (prepended),
    RDZV_AGENT_SOCKET; the agent exits with CMD's status; PATH.env and the
    socket exist while CMD runs."""
    code = ("import os, json; print(json.dumps({k: os.environ.get(k) for k in "
            "('LD_PRELOAD','RDZV_AGENT_SOCKET','VLLM_PORT','RDZV_EPOCH','MASTER_PORT',"
            "'RDZV_SERVER')}));"
            "s=os.environ['RDZV_AGENT_SOCKET']; assert os.path.exists(s) and os.path.exists(s+'.env');"
            "assert 'RDZV_SERVER=' + os.environ['RDZV_SERVER'] + chr(10) in open(s+'.env').read();"
            "raise SystemExit(7)")
    os.environ["LD_PRELOAD"] = "libfake-first.so"
    try:
        pod = Pod(opts, index, cmd=[PY, "-c", code])
    finally:
        del os.environ["LD_PRELOAD"]
    try:
        out, _ = pod.agent.communicate(timeout=WAIT_S)
        check(pod.agent.returncode == 7, "agent exit %d (CMD exits 7): %s"
              % (pod.agent.returncode, open(pod.agent_log).read()))
        env = json.loads(out.strip().splitlines()[-1])
        check(env["LD_PRELOAD"] == opts.shim + ":libfake-first.so", "LD_PRELOAD %s" % env["LD_PRELOAD"])
        check(env["RDZV_AGENT_SOCKET"] == pod.sock and env["VLLM_PORT"] == str(pod.plan[0])
              and env["RDZV_EPOCH"] == "1", "CMD env: %s" % env)
        check(env["RDZV_SERVER"] == pod.endpoint, "CMD's RDZV_SERVER: %s, not %s (the agent's "
              "--server), so its own rdzv kv calls go elsewhere" % (env["RDZV_SERVER"], pod.endpoint))
        check(not os.path.exists(pod.sock), "the socket outlived the agent")
    finally:
        pod.close()


def case_cmd_not_runnable(opts, index):
    """A CMD that exists but cannot be run: the agent exits 126 as rdzv
    join does (127 is for one that cannot be found)."""
    with tempfile.NamedTemporaryFile(prefix="rdzv-not-exec-", delete=False) as f:
        f.write(b"#!/bin/sh\nexit 0\n")
    os.chmod(f.name, 0o644)
    try:
        pod = Pod(opts, index, cmd=[f.name])
        try:
            pod.agent.communicate(timeout=WAIT_S)
            check(pod.agent.returncode == 126, "agent exit %d for a CMD without x: %s"
                  % (pod.agent.returncode, open(pod.agent_log).read()))
        finally:
            pod.close()
    finally:
        os.unlink(f.name)


def case_cmd_signal(opts, index):
    """SIGTERM to the agent reaches CMD; the agent exits as CMD did (143)."""
    pod = Pod(opts, index, cmd=[PY, "-c", "import time; print('up', flush=True); time.sleep(60)"])
    try:
        check(pod.agent.stdout.readline().strip() == "up", "CMD did not start")
        pod.agent.send_signal(signal.SIGTERM)
        pod.agent.wait(timeout=WAIT_S)
        check(pod.agent.returncode == 128 + signal.SIGTERM, "agent exit %d" % pod.agent.returncode)
    finally:
        pod.close()


SLEEPER = [PY, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(60)"]


def gone(pid):
    try:
        os.kill(pid, 0)
        return False
    except ProcessLookupError:
        return True


def plain_bind_ok(port):
    """A bind without the shim and without SO_REUSEPORT succeeds: nobody,
    the agent's reservation included, holds port."""
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def check_agent_ended(pod, rc, child, what):
    """The agent exited rc, its child is gone, and nothing is left behind:
    socket, PATH.env and every reservation of the plan."""
    try:
        pod.agent.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        raise Fail("%s: the agent still runs after %d s: %s"
                   % (what, WAIT_S, open(pod.agent_log).read()[-600:]))
    log = open(pod.agent_log).read()
    check(pod.agent.returncode == rc, "%s: agent exit %d, not %d: %s"
          % (what, pod.agent.returncode, rc, log))
    if child:
        wait_for(lambda: gone(child), "the agent's child to end")
    check(not os.path.exists(pod.sock) and not os.path.exists(pod.sock + ".env"),
          "%s: the agent left its socket or env file behind" % what)
    check(all(plain_bind_ok(p) for p in pod.plan), "%s: a plan port is still held" % what)
    return log


def case_group_deleted(opts, index):
    """`rdzv group delete` while the agent runs CMD: the next heartbeat is
    answered not_found, the agent stops CMD, releases its ports and exits 4
    (serving on would let the block's next owner share the ports)."""
    pod = Pod(opts, index, cmd=SLEEPER)
    try:
        child = int(pod.agent.stdout.readline())
        pod.run([opts.rdzv, "group", "delete", "--server", pod.endpoint, "--group",
                 "g%d" % index], env=dict(os.environ))
        log = check_agent_ended(pod, 4, child, "group deleted")
        check("no longer knows" in log, "the agent's log does not say why: %s" % log)
    finally:
        pod.close()


def case_replan(opts, index):
    """The group is deleted and its block given to another group before the
    agent notices (no heartbeat yet); the engine goes away, the agent joins
    again and rdzvd lays the group out on other ports. The agent must not
    write those (unserved) ports into PATH.env: it exits 4 and releases its
    own."""
    pod = Pod(opts, index, agent_args=["--heartbeat", "3600"])
    try:
        env = dict(os.environ)
        pod.run([opts.rdzv, "group", "delete", "--server", pod.endpoint, "--group",
                 "g%d" % index], env=env)
        other = pod.run([opts.rdzv, "join", "--server", pod.endpoint, "--group", "other",
                         "--world", "1", "--rank", "0", "--host", "127.0.0.1", "--node", "n",
                         "--nccl-id", "none", "--format", "env"], env=env).stdout
        check("RDZV_MASTER_PORT=%d" % pod.plan[0] in other,
              "the other group did not get the deleted group's block: %s" % other)
        pod.py(PROBE + "scan(%d, 1, %d)" % (pod.base, pod.limit))   # then it exits
        log = check_agent_ended(pod, 4, None, "new plan")
        check("releasing them" in log, "the agent's log does not say why: %s" % log)
    finally:
        pod.close()


def case_cmd_sighup(opts, index):
    """SIGHUP to the agent reaches CMD as SIGTERM does; the agent exits as CMD
    did (129) and cleans up, leaving no orphan."""
    pod = Pod(opts, index, cmd=SLEEPER)
    try:
        child = int(pod.agent.stdout.readline())
        pod.agent.send_signal(signal.SIGHUP)
        check_agent_ended(pod, 128 + signal.SIGHUP, child, "SIGHUP")
    finally:
        pod.close()


def case_sidecar_sigquit(opts, index):
    """SIGQUIT to a sidecar agent is a shutdown like SIGTERM: exit 0, socket,
    PATH.env and reservations gone."""
    pod = Pod(opts, index)
    try:
        pod.agent.send_signal(signal.SIGQUIT)
        check_agent_ended(pod, 0, None, "SIGQUIT")
    finally:
        pod.close()


def case_rank_taken(opts, index):
    """A `rdzv join` for rank 0 killed while it waits leaves rdzvd holding
    the rank until that join's deadline (rank_taken); the agent's first
    join for rank 0 retries until then instead of exiting 4."""
    group = "g%d" % index

    def status(pod):
        return pod.run([opts.rdzv, "status", "--server", pod.endpoint], env=dict(os.environ)
                       ).stdout.replace(" ", "")

    def old_waiter(pod):
        old = subprocess.Popen([opts.rdzv, "join", "--server", pod.endpoint, "--group", group,
                                "--world", "2", "--rank", "0", "--host", "127.0.0.2",
                                "--node", "n", "--nccl-id", "none", "--timeout", "3"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: '"host":"127.0.0.2"' in status(pod), "the old join to wait")
        old.kill()
        old.wait()
    pod = Pod(opts, index, cmd=SLEEPER, agent_args=["--world", "2"], before_agent=old_waiter)
    try:
        def agent_joined():
            if pod.agent.poll() is not None:
                raise Fail("the agent exited %d: %s" % (pod.agent.returncode,
                                                         open(pod.agent_log).read()))
            return '"host":"127.0.0.1"' in status(pod)
        wait_for(agent_joined, "the agent's join to take rank 0")
        check("held by a live session" in open(pod.agent_log).read(),
              "the agent never met rank_taken: %s" % open(pod.agent_log).read())
        pod.run([opts.rdzv, "join", "--server", pod.endpoint, "--group", group, "--world", "2",
                 "--rank", "1", "--host", "127.0.0.1", "--node", "n", "--nccl-id", "none",
                 "--timeout", "20"], env=dict(os.environ))
        child = int(pod.agent.stdout.readline())
        pod.agent.send_signal(signal.SIGTERM)
        check_agent_ended(pod, 128 + signal.SIGTERM, child, "rank_taken, then SIGTERM")
    finally:
        pod.close()


def close_race_case(mode, port_offset=0):
    def case(pod):
        pod.run([pod.opts.close_race, mode, str(pod.plan[port_offset])], timeout=90)
    case.__doc__ = "shim_close_race %s (see tests/shim/shim_close_race.c)" % mode
    return case


def case_stalled_agent(pod):
    """A stopped agent (alive, not answering): a managed bind fails with
    EADDRINUSE within the reply timeout and a few RDZV_SHIM_AGENT_WAIT_MS,
    and close() of a pipe in another thread does not wait for it
    (shim_close_race stall)."""
    def steps(p):
        pod.agent.send_signal(signal.SIGSTOP)
        p.stdin.write("go\n")
        p.stdin.flush()
    s_stall_run(pod, "stall", "2000", steps)


def case_stalled_agent_resumes(pod):
    """An agent stopped for 2 s while a managed bind waits, with
    RDZV_SHIM_AGENT_WAIT_MS=500: the bind waits out the stop (the connection
    carries the listeners handed over, so the shim does not give up on it
    before the protocol's reply timeout), succeeds, and the listener held
    from before still accepts (shim_close_race resume)."""
    def steps(p):
        pod.agent.send_signal(signal.SIGSTOP)
        p.stdin.write("go\n")
        p.stdin.flush()
        check(p.stdout.readline().strip() == "binding", "shim_close_race resume: no bind")
        time.sleep(2)
        pod.agent.send_signal(signal.SIGCONT)
        p.stdin.write("cont\n")
        p.stdin.flush()
    s_stall_run(pod, "resume", "500", steps)


def s_stall_run(pod, mode, wait_ms, steps):
    """Runs shim_close_race MODE with a listener held, steps(p) once it is
    ready; the agent runs again whatever happens."""
    p = subprocess.Popen([pod.opts.close_race, mode, str(pod.plan[0])],
                         env=pod.env(RDZV_SHIM_AGENT_WAIT_MS=wait_ms), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        check(p.stdout.readline().strip() == "ready", "shim_close_race %s did not start" % mode)
        steps(p)
        try:
            _, err = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            p.kill()
            raise Fail("shim_close_race %s hung" % mode)
        check(p.returncode == 0, "shim_close_race %s exited %d: %s" % (mode, p.returncode, err))
    finally:
        pod.agent.send_signal(signal.SIGCONT)
        if p.poll() is None:
            p.kill()
            p.wait()


POD_CASES = {
    "probe_scan": case_probe_scan,
    "two_processes_scan": case_two_processes_scan,
    "probe_then_listener": case_probe_then_listener,
    "port0_probe": case_port0_probe,
    "port0_on_address": case_port0_on_address,
    "probe_that_listens": case_probe_that_listens,
    "exhausted": case_exhausted,
    "foreign_listener": case_foreign_listener,
    "c_listener_v4": listener_case("v4"),
    "c_listener_v6only": listener_case("v6only"),
    "c_listener_dual": listener_case("dual"),
    "c_listener_addr": listener_case("addr"),
    "c_threads": listener_case("threads"),
    "c_fork": listener_case("fork"),
    "zmq": case_zmq,
    "other_uid": case_other_uid,
    "passthrough": case_passthrough,
    "close_listener": case_close_listener,
    "fork_before_first_bind": case_fork_before_first_bind,
    "dup2_over_listener": replace_case("dup2"),
    "dup3_over_listener": replace_case("dup3"),
    "close_range_listener": replace_case("close_range"),
    "dup2_over_listener_kept": replace_case("kept"),
    "close_range_unshare": replace_case("unshare"),
    "close_range_unshare_alone": replace_case("unshare_alone"),
    "vfork_child_close_range": replace_case("vfork"),
    "dead_engine_listener": case_dead_engine_listener,
    "queued_reset": case_queued_reset,
    "new_engine_epoch": case_new_engine_epoch,
    "close_race": close_race_case("race"),
    "close_race_dup2": close_race_case("race_dup2"),
    "close_stale_fd": close_race_case("stale", 4),
    "close_dup_pair": close_race_case("pair"),
    "vfork_child_bind": close_race_case("vfork"),
    "stalled_agent": case_stalled_agent,
    "stalled_agent_resumes": case_stalled_agent_resumes,
}
OWN_CASES = {"cmd": case_cmd, "cmd_signal": case_cmd_signal,
             "cmd_not_runnable": case_cmd_not_runnable,
             "group_deleted": case_group_deleted, "replan": case_replan,
             "cmd_sighup": case_cmd_sighup, "sidecar_sigquit": case_sidecar_sigquit,
             "rank_taken": case_rank_taken, "epoch_follows": case_epoch_follows}
CASES = list(POD_CASES) + list(OWN_CASES)


def case_options(cases):
    """The command line of this runner and lease_test.py: CASE and the
    paths of what it runs; None once CASE "list" has printed the cases."""
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=list(cases) + ["list"])
    for path in ("--rdzvd", "--rdzv", "--shim", "--listener", "--close-race"):
        ap.add_argument(path)
    opts = ap.parse_args()
    if opts.case == "list":
        print("\n".join(cases))
        return None
    return opts


def main():
    opts = case_options(CASES)
    if opts is None:
        return 0
    index = CASES.index(opts.case)
    if opts.case in OWN_CASES:
        return verdict(opts.case, lambda: OWN_CASES[opts.case](opts, index))
    return verdict(opts.case, lambda: run_pod_case(opts, index, POD_CASES[opts.case]))


def run_pod_case(opts, index, case, **pod_args):
    """case(pod) in a fresh Pod; the agent's log on failure."""
    pod = Pod(opts, index, **pod_args)
    try:
        case(pod)
        pod.stop_agent()
    except Fail:
        sys.stderr.write("--- agent log ---\n" + open(pod.agent_log).read())
        raise
    finally:
        pod.close()


def verdict(name, run):
    """Runs run(); PASS (0), SKIP (77, meson's skip) or FAIL (1) for name."""
    try:
        run()
    except Skip as e:
        print("SKIP:", e)
        return 77
    except Fail as e:
        print("FAIL %s: %s" % (name, e))
        return 1
    print("PASS", name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
