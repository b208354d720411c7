"""How `rdzv agent` reserves its plan when something is already on a port
(docs/agent.md, "Reserving the plan"): it waits out TIME_WAIT, names a live
holder and exits 1, and never takes a port beside another process's
listener, which SO_REUSEPORT would let it do and which would split that
listener's connections. Each case runs its own rdzvd on its own range."""
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time

import rdzvtest
from pod import BASE, PER_RANK, PY, SPAN, WAIT_S, check, wait_for

REUSEPORT_LISTENER = """
import socket, sys, time
l = socket.socket(socket.AF_INET6)
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
l.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
l.bind(("::", %d)); l.listen(8)
print("ready", flush=True)
sys.stdin.read()
"""


class Range:
    """rdzvd on the case's own managed range, and the agent's command line."""

    def __init__(self, opts, index):
        self.opts = opts
        self.base = BASE + SPAN * index
        self.limit = self.base + SPAN
        self.tmp = tempfile.TemporaryDirectory(prefix="rdzv-shim-")
        self.sock = os.path.join(self.tmp.name, "agent.sock")
        self.rdzvd = rdzvtest.Rdzvd(opts.rdzvd, self.tmp.name, "--port-base", str(self.base),
                                    "--ports-per-rank", str(PER_RANK), "--port-limit",
                                    str(self.limit), "--no-nccl")
        self.group = "r%d" % index

    def argv(self, *extra):
        return [self.opts.rdzv, "agent", "--server", self.rdzvd.endpoint, "--group", self.group,
                "--world", "1", "--rank", "0", "--host", "127.0.0.1", "--node", "n",
                "--socket", self.sock, "--port-range", "%d-%d" % (self.base, self.limit),
                "--shim", self.opts.shim, "--timeout", "20", *extra]

    def epoch(self):
        out = subprocess.run([self.opts.rdzv, "status", "--json", "--server", self.rdzvd.endpoint],
                             capture_output=True, text=True, timeout=WAIT_S).stdout
        return json.loads(out.strip().splitlines()[-1])["groups"][0]["epoch"]

    def close(self):
        self.rdzvd.stop()
        self.tmp.cleanup()


def time_wait_on(port, reuseaddr=True):
    """Leaves port in TIME_WAIT: the side that closes first keeps it there
    for a minute, as a server that ran before rdzv does. Without
    SO_REUSEADDR, the TIME_WAIT refuses even a bind that sets it."""
    srv = socket.socket()
    if reuseaddr:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen()
    c = socket.create_connection(("127.0.0.1", port))
    a, _ = srv.accept()
    a.close()                        # the server side first: its end waits
    time.sleep(0.1)
    c.close()
    srv.close()


def time_waits(port):
    out = subprocess.run(["ss", "-Htan", "state", "time-wait", "sport = :%d" % port],
                         capture_output=True, text=True).stdout
    return len(out.splitlines())


def case_reserve_time_wait(opts, index):
    """A plan port in TIME_WAIT only: the agent says it waits (naming the
    port), gives up after --reserve-wait with exit 1, and with time to wait
    starts once the port is free; the group stays at epoch 1."""
    s_time_wait(opts, index, reuseaddr=True)


def case_reserve_time_wait_plain(opts, index):
    """The same, for a TIME_WAIT left by a listener without SO_REUSEADDR
    (the agent used to exit at once, blaming a socket that neither listens
    nor connects)."""
    s_time_wait(opts, index, reuseaddr=False)


def s_time_wait(opts, index, reuseaddr):
    if not shutil.which("ss"):
        raise rdzvtest.Skip("ss (iproute2) is not installed")
    r = Range(opts, index)
    port = r.base + 2
    try:
        time_wait_on(port, reuseaddr)
        check(time_waits(port) == 1, "no TIME_WAIT on %d to start with" % port)
        t0 = time.monotonic()
        first = subprocess.run(r.argv("--reserve-wait", "2"), capture_output=True, text=True,
                               timeout=WAIT_S)
        took = time.monotonic() - t0
        check(first.returncode == 1, "with --reserve-wait 2 the agent exited %d: %s"
              % (first.returncode, first.stderr))
        check("waiting for port %d to leave TIME_WAIT (1 socket" % port in first.stderr,
              "the agent did not say it waits for %d: %s" % (port, first.stderr))
        check("cannot reserve port %d: still in use after --reserve-wait 2 s (1 socket in "
              "TIME_WAIT" % port in first.stderr and took >= 2,
              "the agent did not give up after 2 s (%.1f s): %s" % (took, first.stderr))
        log = os.path.join(r.tmp.name, "agent.log")
        agent = subprocess.Popen(r.argv("--reserve-wait", "90"), stderr=open(log, "w"))
        try:
            wait_for(lambda: "waiting for port %d" % port in open(log).read(),
                     "the waiting line")
            check(not os.path.exists(r.sock), "the agent serves while its port is taken")
            # Root can end the TIME_WAIT now; else it ends by itself within
            # a minute or so.
            subprocess.run(["ss", "-K", "state", "time-wait", "sport = :%d" % port],
                           capture_output=True)
            wait_for(lambda: os.path.exists(r.sock) or agent.poll() is not None,
                     "the agent to start once the port is free", timeout=80)
            check(os.path.exists(r.sock), "the agent did not start: %s" % open(log).read())
            check(r.epoch() == 1, "the group moved to epoch %s" % r.epoch())
        finally:
            agent.terminate()
            agent.wait(timeout=WAIT_S)
    finally:
        # A failed run must not leave the next one its TIME_WAIT.
        subprocess.run(["ss", "-K", "state", "time-wait", "sport = :%d" % port],
                       capture_output=True)
        r.close()


SQUATTER = """
import socket, sys
socks = []
for name in %r:
    s = socket.socket(socket.AF_UNIX)
    s.bind("\\0" + name)
    socks.append(s)
    if %r != "bound":
        s.listen(0)
    if %r == "full":             # a queue that stays full: a connect that waits, waits for ever
        while True:
            c = socket.socket(socket.AF_UNIX)
            c.setblocking(False)
            try:
                c.connect("\\0" + name)
            except BlockingIOError:
                break
            socks.append(c)
print("ready", flush=True)
sys.stdin.read()
"""


def lock_name(port, uid=None):
    """The agent's lock for port, shared or that of agents of uid."""
    return "rdzv-agent-port-%d" % port + ("" if uid is None else "-uid-%d" % uid)


# How a squatter holds the lock's name, its uid, and what the agent does:
# another uid cannot share the port, so the agent goes round it; its own
# uid could, so it stops. Either way the holder is named for what it is;
# one the agent cannot see (it runs in a PID namespace of its own) is not
# called anything.
OWN_PIDNS = ("unshare", "--pid", "--fork", "--mount-proc")
SQUATS = (
    ("listen", 65534, (), 0, "held by pid {pid} (uid 65534, python3); no other uid can share "
     "a port with uid 0, so this agent holds @rdzv-agent-port-{port}-uid-0 instead"),
    ("bound", 65534, (), 0, "held by a socket of uid 65534 that takes no connections (an "
     "rdzv agent's lock does); no other uid"),
    ("full", 65534, (), 0, "held by a socket of uid 65534 that takes no connections (an "
     "rdzv agent's lock does); no other uid"),
    ("listen", 0, (), 1, "held by pid {pid} (uid 0, python3), which is not an rdzv agent"),
    ("bound", 0, (), 1, "held by a socket of uid 0 that takes no connections (an rdzv agent's "
     "lock does), which is not an rdzv agent"),
    ("listen", 0, OWN_PIDNS, 1, "held by a process of uid 0 in another PID namespace (its pid "
     "and command cannot be seen from here), which may or may not be an rdzv agent"),
)


def s_squat(names, uid, how):
    """A process of uid that binds the lock names (see lock_name)."""
    argv = [PY, "-c", SQUATTER % (names, how, how)]
    if uid != os.getuid():
        argv = ["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups"] + argv
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    check(p.stdout.readline().strip() == "ready", "the squatter did not start")
    return p


def case_reserve_squatted_lock(opts, index):
    """Anyone in the network namespace can bind the agent's lock name
    @rdzv-agent-port-P, listening, not listening, or with its queue kept
    full. The agent never waits on it, calls the holder an rdzv agent only
    when it is one, goes round a holder of another uid (which cannot share
    the port) and says so, and stops at one of its own uid, named for what
    it is."""
    if os.getuid() != 0 or not shutil.which("setpriv") or not shutil.which("unshare"):
        raise rdzvtest.Skip("needs root, setpriv and unshare (util-linux) to squat as "
                            "another uid and run the agent in a PID namespace")
    r = Range(opts, index)
    port = r.base + 3
    squatter = None
    try:
        pidns = subprocess.run(list(OWN_PIDNS) + ["true"], capture_output=True).returncode == 0
        for how, uid, wrap, rc, want in SQUATS:
            if wrap and not pidns:
                print("# skipped: unshare cannot make a PID namespace here")
                continue
            squatter = s_squat([lock_name(port)], uid, how)
            what = "squatter of uid %d (%s%s)" % (uid, how,
                                                   ", agent in a PID namespace" * bool(wrap))
            try:
                p = subprocess.run(list(wrap) + r.argv("--reserve-wait", "5", "--", "/bin/true"),
                                   capture_output=True, text=True, timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                raise rdzvtest.Fail("%s: the agent hung" % what)
            check(p.returncode == rc and want.format(pid=squatter.pid, port=port) in p.stderr
                  and "reserved by another rdzv agent" not in p.stderr
                  and ("serving " in p.stderr) == (rc == 0),
                  "%s: the agent exited %d: %s" % (what, p.returncode, p.stderr))
            squatter.kill()
            squatter.wait()
            squatter = None
    finally:
        if squatter:
            squatter.kill()
        r.close()


def case_reserve_squatter_leaves(opts, index):
    """A squatter of another uid holds both lock names of a plan port (the
    shared one and that of the agent's uid): the agent goes on without a
    lock, and takes the shared one once the squatter lets go (it answers
    for the port from then on), so that a later agent of its uid is
    stopped by the lock instead of reserving the port beside it."""
    if os.getuid() != 0 or not shutil.which("setpriv"):
        raise rdzvtest.Skip("needs root and setpriv (util-linux) to squat as another uid")
    r = Range(opts, index)
    port = r.base + 3
    squatter = s_squat([lock_name(port), lock_name(port, os.getuid())], 65534, "listen")
    log = os.path.join(r.tmp.name, "agent.log")
    first = subprocess.Popen(r.argv(), stderr=open(log, "w"))
    try:
        wait_for(lambda: os.path.exists(r.sock) or first.poll() is not None,
                 "the agent to serve beside the squatter")
        check(os.path.exists(r.sock) and "going on without it" in open(log).read(),
              "the agent did not go round the squatter: %s" % open(log).read())
        squatter.kill()
        squatter.wait()
        wait_for(lambda: "took this network namespace's lock @%s" % lock_name(port)
                 in open(log).read(), "the agent to take the lock its squatter let go")
        c = socket.socket(socket.AF_UNIX)
        c.connect("\0" + lock_name(port))
        pid, _, _ = struct.unpack("3i", c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      struct.calcsize("3i")))
        c.close()
        check(pid == first.pid, "the lock is held by pid %d, not the agent (%d)"
              % (pid, first.pid))
    finally:
        squatter.kill()
        first.terminate()
        first.wait(timeout=WAIT_S)
        r.close()


def case_reserve_went_round(opts, index):
    """An agent went round a squatter of another uid on every plan port's
    shared lock name, and holds the names of its uid instead. The squatter
    lets go while that agent cannot take the shared names back (stopped):
    a later agent of the same uid takes the shared names, but is stopped by
    the first agent's, instead of reserving every port beside it."""
    if os.getuid() != 0 or not shutil.which("setpriv"):
        raise rdzvtest.Skip("needs root and setpriv (util-linux) to squat as another uid")
    r = Range(opts, index)
    ports = range(r.base, r.base + PER_RANK)
    squatter = s_squat([lock_name(p) for p in ports], 65534, "listen")
    log = os.path.join(r.tmp.name, "agent.log")
    first = subprocess.Popen(r.argv(), stderr=open(log, "w"))
    try:
        wait_for(lambda: os.path.exists(r.sock) or first.poll() is not None,
                 "the agent to serve beside the squatter")
        check(os.path.exists(r.sock) and "so this agent holds @%s instead"
              % lock_name(r.base, os.getuid()) in open(log).read(),
              "the agent did not go round the squatter: %s" % open(log).read())
        first.send_signal(signal.SIGSTOP)
        squatter.kill()
        squatter.wait()
        p = subprocess.run(r.argv("--socket", r.sock + ".2", "--", "/bin/true"),
                           capture_output=True, text=True, timeout=WAIT_S)
        want = "port %d is reserved by another rdzv agent in this network namespace (pid %d," \
            % (r.base, first.pid)
        check(p.returncode == 1 and want in p.stderr,
              "a later agent of the same uid exited %d: %s" % (p.returncode, p.stderr))
    finally:
        squatter.kill()
        first.send_signal(signal.SIGCONT)
        first.terminate()
        first.wait(timeout=WAIT_S)
        r.close()


def case_reserve_lock_answers(opts, index):
    """A serving agent answers whoever asks who holds its lock, however
    many ask: each later agent for its ports is told, at once, that another
    rdzv agent (its pid) holds them. (The lock's queue used to fill after
    two: the third agent waited for ever.)"""
    r = Range(opts, index)
    log = os.path.join(r.tmp.name, "agent.log")
    first = subprocess.Popen(r.argv(), stderr=open(log, "w"))
    try:
        wait_for(lambda: os.path.exists(r.sock) or first.poll() is not None,
                 "the first agent to serve")
        check(os.path.exists(r.sock), "the first agent did not serve: %s" % open(log).read())
        want = "reserved by another rdzv agent in this network namespace (pid %d," % first.pid
        for i in range(5):
            try:
                p = subprocess.run(r.argv("--socket", "%s.%d" % (r.sock, i)),
                                   capture_output=True, text=True, timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                raise rdzvtest.Fail("later agent %d hung asking who holds the lock" % i)
            check(p.returncode == 1 and want in p.stderr,
                  "later agent %d exited %d: %s" % (i, p.returncode, p.stderr))
    finally:
        first.terminate()
        first.wait(timeout=WAIT_S)
        r.close()


def case_reserve_live_holder(opts, index):
    """A plan port a live listener holds: the agent exits 1 at once, naming
    the port, the socket's state, its pid and command."""
    r = Range(opts, index)
    holder = socket.socket()
    try:
        port = r.base + 5
        holder.bind(("0.0.0.0", port))
        holder.listen()
        t0 = time.monotonic()
        p = subprocess.run(r.argv("--reserve-wait", "30"), capture_output=True, text=True,
                           timeout=WAIT_S)
        took = time.monotonic() - t0
        want = "cannot reserve port %d: it is held by a LISTEN socket of pid %d (" % (
            port, os.getpid())
        check(p.returncode == 1 and want in p.stderr,
              "the agent exited %d: %s" % (p.returncode, p.stderr))
        check(took < 10, "the agent waited %.1f s for a live holder" % took)
    finally:
        holder.close()
        r.close()


def case_reserve_beside_listener(opts, index):
    """A listener of the agent's uid with SO_REUSEPORT on a plan port (an
    engine of another group, left running by its agent): the kernel would
    let the reservation in beside it, and the engine's own listener later,
    splitting its connections. The agent exits 1 naming it. A listener of
    this rank's own engine (its RDZV_AGENT_SOCKET is the agent's socket),
    left by an agent that died, is kept: the new agent starts."""
    r = Range(opts, index)
    other = None
    try:
        port = r.base + 1
        env = dict(os.environ)
        env.pop("RDZV_AGENT_SOCKET", None)
        other = subprocess.Popen([PY, "-c", REUSEPORT_LISTENER % port], env=env,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        check(other.stdout.readline().strip() == "ready", "the other listener did not start")
        p = subprocess.run(r.argv(), capture_output=True, text=True, timeout=WAIT_S)
        want = "port %d is held by a LISTEN socket of pid %d (python3), which is not this " \
               "agent's engine" % (port, other.pid)
        check(p.returncode == 1 and want in p.stderr,
              "the agent exited %d: %s" % (p.returncode, p.stderr))
        check(not os.path.exists(r.sock), "the refused agent left a socket")
        other.stdin.close()
        other.wait(timeout=WAIT_S)
        env["RDZV_AGENT_SOCKET"] = r.sock
        other = subprocess.Popen([PY, "-c", REUSEPORT_LISTENER % port], env=env,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        check(other.stdout.readline().strip() == "ready", "the own listener did not start")
        log = os.path.join(r.tmp.name, "agent.log")
        agent = subprocess.Popen(r.argv(), stderr=open(log, "w"))
        try:
            wait_for(lambda: os.path.exists(r.sock) or agent.poll() is not None,
                     "the agent beside its own engine's listener")
            check(os.path.exists(r.sock), "beside this rank's own engine the agent did not "
                  "start: %s" % open(log).read())
        finally:
            agent.terminate()
            agent.wait(timeout=WAIT_S)
    finally:
        if other and other.poll() is None:
            other.stdin.close()
            other.wait(timeout=WAIT_S)
        r.close()
