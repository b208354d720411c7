#!/usr/bin/python3
"""Probes, listeners and what the engine leaves behind: the cases of
integration.py that lease ports through the shim, and those that stall or
race the agent (docs/agent.md)."""
import json
import os
import signal
import socket
import subprocess
import time

from pod import LISTEN, PER_RANK, PROBE, PY, SPAN, WAIT_S, Fail, Skip, check, outside_port, wait_for


def case_probe_scan(pod):
    """vLLM scans from VLLM_PORT, the probe pool's first port after the store,
    DP RPC and API ports: two scans, of two and three, give the pool's five
    distinct ports."""
    env = pod.env_file()
    vllm_port = int(env["VLLM_PORT"])
    check(vllm_port == pod.plan[3] and env["RDZV_PORT_PROBE"] == "%d-%d" % (pod.plan[3], pod.plan[-1]),
          "VLLM_PORT %d is not the probe pool's first port %d (a plan of %d ports): %s"
          % (vllm_port, pod.plan[3], len(pod.plan), env.get("RDZV_PORT_PROBE")))
    got = pod.py_json(PROBE + "print(json.dumps([scan(%d, 2, %d), scan(%d, 3, %d)]))"
                      % (vllm_port, pod.limit, vllm_port, pod.limit))
    check(got[0] == pod.plan[3:5] and got[1] == pod.plan[5:8],
          "the scans got %s, not the probe pool %s in two parts" % (got, pod.plan[3:]))


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


def port0_order(plan):
    """The order in which port-0 probes take a plan's ports: its probe pool
    from the bottom, then the ports below the pool from the top down, so the
    named roles come last (client/agent/agent_lease.h)."""
    pool = 10 if len(plan) >= 12 else 3
    return plan[pool:] + plan[:pool][::-1]


def case_port0_probe(pod):
    """A port-0 probe gets the next free plan port (the probe pool first), which
    a later bind lands on;
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
    check([first, second] == port0_order(pod.plan)[:2], "port-0 probes got %s" % got)
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
    """While every port of the plan is leased to a port-0 probe whose socket
    is open, another port-0 probe gets EADDRINUSE, and so does every other
    port of the range. Once they are closed, port-0 probes (vLLM's
    get_open_port(), again and again) get the plan's ports again, the one
    leased longest ago first; explicit probes of leased ports still do not."""
    got = pod.py_json(PROBE + """
import errno
def err(port):
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", port)); return 0
    except OSError as e:
        return e.errno
    finally:
        s.close()
held = []
for _ in range(%d):
    s = socket.socket(); s.bind(("0.0.0.0", 0)); held.append(s)
leased = [s.getsockname()[1] for s in held]
full = [err(0), [err(p) for p in range(%d, %d)]]
for s in held:
    s.close()
again = [probe(0) for _ in range(20)]
print(json.dumps([leased, full, again, [err(p) for p in leased]]))
""" % (PER_RANK, pod.base, pod.limit))
    leased, (port0, rest), again, explicit = got
    check(leased == port0_order(pod.plan), "port-0 probes leased %s" % leased)
    check(port0 == 98, "a port-0 probe with the whole plan held: errno %d" % port0)
    check(rest == [98] * SPAN, "probes of the range with the plan held: %s" % rest)
    check(again == (port0_order(pod.plan) * 3)[:20],
          "20 port-0 probes after the 8 closed got %s" % again)
    check(explicit == [98] * PER_RANK, "explicit probes of the leased ports: %s" % explicit)


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


# An engine that listens on a plan port, forks a child that keeps the
# listener's descriptor open (silent, in a session of its own) and prints
# the child's pid: what is left when the engine dies is the child's copy.
FORKED_LISTENER = """
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
"""


def case_dead_engine_listener(pod):
    """A listener left behind by an engine process that died (its fd still
    open in a forked child) is shut down by the agent: the queued connection
    is reset and new ones are refused, while the child still lives."""
    port = pod.plan[3]
    p = pod.py(FORKED_LISTENER % port)
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
    code = FORKED_LISTENER % port + "sys.stdin.readline()\n"
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
