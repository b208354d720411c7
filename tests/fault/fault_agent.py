"""Agent and liveness faults: a SIGKILLed agent, reservations across an
rdzvd restart, a dead rank."""
import json
import os
import re
import signal
import socket
import subprocess
import textwrap
import threading
import time

from faultlib import (BASE, Fail, LIMIT, PY, Server, Skip, TAP, check, group_of, join_async,
                     status, wait_for)

# --- agents ------------------------------------------------------------------

ENGINE = r"""
import os, socket, sys, threading, time
port = int(sys.argv[1])
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("0.0.0.0", port))
ls.listen(64)
def serve():
    while True:
        try:
            c, _ = ls.accept()
        except OSError:
            return
        try:
            c.sendall(b"pong %d\n" % os.getpid())
        finally:
            c.close()
threading.Thread(target=serve, daemon=True).start()
print("listening", port, flush=True)
for line in sys.stdin:
    cmd = line.split()
    if cmd and cmd[0] == "bind":          # a new listener through the shim
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", int(cmd[1])))
            s.listen(8)
            globals().setdefault("extra", []).append(s)
            print("bound", flush=True)
        except OSError as e:
            print("error", e.errno, flush=True)
"""


def ping(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
            c.settimeout(2)
            return c.recv(64).startswith(b"pong")
    except OSError:
        return False


def bind_errno(port, reuse=False, uid=None):
    """errno of a plain bind (no shim) on port, 0 if it succeeds; run in a
    child so that uid can differ."""
    code = textwrap.dedent("""
        import errno, os, socket, sys
        if %r is not None:
            os.setgid(65534); os.setuid(%r)
        s = socket.socket()
        if %r:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            s.bind(("0.0.0.0", %d)); print(0)
        except OSError as e:
            print(e.errno)
        """ % (uid, uid, reuse, port))
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    p = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env, timeout=20)
    return int(p.stdout.strip() or -1)


class Agent:
    def __init__(self, opts, srv, tmp, group="ag", rank=0, world=1, extra=()):
        self.opts, self.srv, self.tmp = opts, srv, tmp
        self.sock = os.path.join(tmp, "agent-%s-%d.sock" % (group, rank))
        self.log_path = os.path.join(tmp, "agent-%s-%d.log" % (group, rank))
        self.argv = [opts.rdzv, "agent", "--server", srv.endpoint, "--group", group,
                     "--world", str(world), "--rank", str(rank), "--host", "127.0.0.1",
                     "--node", "agent-node", "--socket", self.sock, "--port-range",
                     "%d-%d" % (BASE, LIMIT), "--shim", opts.shim, "--heartbeat", "1",
                     "--timeout", "30", *extra]
        self.start()

    def start(self):
        self.proc = subprocess.Popen(self.argv, stderr=open(self.log_path, "a"),
                                     stdout=subprocess.DEVNULL)
        def up():
            if self.proc.poll() is not None:
                raise Fail("the agent exited %d: %s" % (self.proc.returncode,
                                                        self.log().strip()[-300:]))
            return os.path.exists(self.sock) and os.path.exists(self.sock + ".env")
        wait_for(up, "the agent's socket", timeout=30)

    def env(self):
        with open(self.sock + ".env") as f:
            return dict(l.split("=", 1) for l in f.read().splitlines() if "=" in l)

    def ports(self):
        e = self.env()
        for k in ("RDZV_PORTS",):
            if k in e:
                return [int(p) for p in re.split(r"[ ,]+", e[k].strip()) if p]
        first = int(e.get("RDZV_PORT_BASE") or e.get("MASTER_PORT"))
        return list(range(first, first + 8))

    def kill(self, sig=signal.SIGKILL):
        self.proc.send_signal(sig)
        self.proc.wait(timeout=10)

    def log(self):
        return open(self.log_path, errors="replace").read()

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def need_shim(opts):
    if not opts.shim or not os.path.exists(opts.shim):
        raise Skip("librdzv_shim.so not built")
    if os.environ.get("FAULT_SANITIZED"):
        raise Skip("preloading a sanitizer-built shim into python aborts; plain build only")


def start_agents(opts, srv, group, world):
    """One agent per rank of group, started at once: each waits in its join
    for the others, so one after another would never finish."""
    agents, errs = [None] * world, []

    def start(rank):
        try:
            agents[rank] = Agent(opts, srv, srv.tmp, group=group, rank=rank, world=world)
        except Exception as e:     # noqa: BLE001 (reported below)
            errs.append(e)
    ts = [threading.Thread(target=start, args=(r,)) for r in range(world)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        for a in agents:             # the caller never sees them: stop them here
            if a:
                a.close()
    check(not errs, "agents did not start: %s" % errs)
    return agents


def case_agent_sigkill(opts):
    """SIGKILL the agent while an engine holds a listener handed over by the
    shim; then start the agent again."""
    need_shim(opts)
    srv = Server(opts)
    agent = engine = None
    try:
        agent = Agent(opts, srv, srv.tmp)
        ports = agent.ports()
        env = dict(os.environ, LD_PRELOAD=opts.shim, RDZV_AGENT_SOCKET=agent.sock,
                   RDZV_SHIM_AGENT_WAIT_MS="2000")
        env.pop("RDZV_PORT_RANGE", None)
        engine = subprocess.Popen([PY, "-c", ENGINE, str(ports[0])], env=env, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        line = engine.stdout.readline()
        check(line.startswith("listening"), "the engine did not listen: %s %s"
              % (line, engine.stderr.read() if engine.poll() is not None else ""))
        TAP.ok(ping(ports[0]), "engine listens on plan port %d through the shim" % ports[0])
        TAP.ok(bind_errno(ports[1]) == 98, "plan port %d is reserved (plain bind: EADDRINUSE)"
               % ports[1])
        agent.kill(signal.SIGKILL)
        TAP.ok(ping(ports[0]), "agent SIGKILLed: the engine's handed-over listener keeps "
               "accepting")
        e_free = bind_errno(ports[1])
        TAP.note("with the agent dead, a plain bind on reserved port %d gives errno %d "
                 "(0: the reservation died with the agent)" % (ports[1], e_free))
        e_listener = bind_errno(ports[0])
        TAP.ok(e_listener == 98, "the engine's listener port %d still refuses a plain bind "
               "(errno %d)" % (ports[0], e_listener))
        if os.path.exists(agent.sock):
            os.unlink(agent.sock)          # SIGKILL leaves the socket file behind
        t0 = time.monotonic()
        agent.start()
        TAP.ok(True, "agent restarted in %.0f ms (socket path reused)"
               % ((time.monotonic() - t0) * 1000))
        ports2 = agent.ports()
        TAP.ok(ports2 == ports, "the restarted agent got the same plan %d-%d"
               % (ports2[0], ports2[-1]))
        TAP.ok(ping(ports[0]), "the engine's listener still accepts after the agent's restart")
        TAP.ok(bind_errno(ports[3]) == 98, "plan ports reserved again (plain bind on %d: "
               "EADDRINUSE)" % ports[3])
        engine.stdin.write("bind %d\n" % ports[4])
        engine.stdin.flush()
        got = engine.stdout.readline().strip()
        TAP.ok(got == "bound", "the engine binds a new plan listener through the restarted "
               "agent: %r" % got)
        # Second act: the engine binds a plan port while no agent runs. The
        # shim waits RDZV_SHIM_AGENT_WAIT_MS for the agent, then fails the
        # bind instead of passing it through, so the plan port stays free
        # for the next agent to reserve.
        agent.kill(signal.SIGKILL)
        engine.stdin.write("bind %d\n" % ports[5])
        engine.stdin.flush()
        got = engine.stdout.readline().strip()
        TAP.ok(got == "error 98", "agent dead again: the engine's bind of plan port %d fails "
               "with EADDRINUSE rather than passing through: %r" % (ports[5], got))
        if os.path.exists(agent.sock):
            os.unlink(agent.sock)
        agent.start()
        TAP.ok(bind_errno(ports[5]) == 98, "the next agent starts and reserves plan port %d "
               "again" % ports[5])
        rc, st, _ = status(opts, srv.endpoint, "ag")
        g = group_of(st, "ag") if st else None
        TAP.note("group after the agent restart: epoch %s" % (g or {}).get("epoch"))
    finally:
        if engine and engine.poll() is None:
            engine.kill()
            engine.wait()
        if agent:
            agent.close()
        srv.close()


def case_rdzvd_restart_reservations(opts):
    """kill -9 rdzvd while agents hold their reservations: the ports stay
    bound throughout (plain bind, and bind from another uid: EADDRINUSE),
    and the agents carry on with the same assignment once rdzvd is back."""
    need_shim(opts)
    srv = Server(opts)
    agents = []
    try:
        procs = []
        # Two ranks on one node: start both, each waits for the other.
        agents = start_agents(opts, srv, "res", 2)
        plan = [agents[r].ports() for r in range(2)]
        env_before = [agents[r].env() for r in range(2)]
        all_ports = plan[0] + plan[1]
        srv.stop(signal.SIGKILL)
        plain = [bind_errno(p) for p in all_ports]
        reuse = [bind_errno(p, reuse=True) for p in all_ports]
        other = [bind_errno(p, reuse=True, uid=65534) for p in all_ports] \
            if os.geteuid() == 0 else None
        TAP.ok(all(e == 98 for e in plain), "rdzvd down: plain bind on all %d reserved ports: "
               "EADDRINUSE (%s)" % (len(all_ports), sorted(set(plain))))
        # Same uid with SO_REUSEPORT may share a port with the reservation: by
        # design (docs/agent.md), the reservation carries SO_REUSEPORT so that
        # the handed-over listener can sit beside it. Shown, not asserted.
        TAP.note("SO_REUSEADDR+SO_REUSEPORT bind as this uid: errno %s on the %d ports "
                 "(0: shares the port, as SO_REUSEPORT allows one uid)"
                 % (sorted(set(reuse)), len(all_ports)))
        if other is not None:
            TAP.ok(all(e == 98 for e in other), "SO_REUSEADDR+SO_REUSEPORT bind as uid 65534: "
                   "EADDRINUSE on all (%s)" % sorted(set(other)))
        time.sleep(2.5)                 # two missed heartbeats
        TAP.ok(all(a.proc.poll() is None for a in agents), "agents keep running while "
               "rdzvd is down")
        srv.start()
        # The agents heartbeat to the old endpoint: the restart binds it again.
        time.sleep(2.5)
        rc, st, err = status(opts, srv.endpoint, "res")
        g = group_of(st, "res") if st else None
        TAP.ok(g is not None and g.get("epoch") == 1 and g.get("complete"),
               "after the restart the group is still epoch 1, complete: %s"
               % json.dumps(g)[:200])
        TAP.ok([agents[r].env() for r in range(2)] == env_before,
               "the agents' assignments (PATH.env) are unchanged")
        plain = [bind_errno(p) for p in all_ports]
        TAP.ok(all(e == 98 for e in plain), "ports still reserved after the restart")
        hb = sum(a.log().count("heartbeat") for a in agents)
        TAP.note("agent log lines naming heartbeats: %d" % hb)
    finally:
        for a in agents:
            if a:
                a.close()
        srv.close()


# --- liveness ----------------------------------------------------------------

def member(g, rank):
    for m in (g or {}).get("members", []):
        if m.get("rank") == rank:
            return m
    return None


def case_dead_rank(opts):
    """--dead-after 2: a rank whose agent heartbeats stays alive; a rank that
    stops (SIGSTOP) turns dead in `rdzv status`, keeps its plan, and its
    return with a new session moves the group to a new epoch."""
    need_shim(opts)
    srv = Server(opts, extra=["--dead-after", "2"])
    agents = []
    try:
        agents = start_agents(opts, srv, "live", 2)
        time.sleep(3)
        rc, st, _ = status(opts, srv.endpoint, "live")
        g = group_of(st, "live")
        TAP.ok(member(g, 0) and member(g, 0).get("alive") is True and
               member(g, 1).get("alive") is True,
               "both heartbeating ranks alive after 3 s with --dead-after 2")
        plan1 = member(g, 1).get("ports")
        agents[1].proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()

        def dead():
            rc, st, _ = status(opts, srv.endpoint, "live")
            m = member(group_of(st, "live"), 1) if st else None
            return m is not None and m.get("alive") is False
        try:
            wait_for(dead, "rank 1 to show dead", timeout=10, step=0.2)
            took = time.monotonic() - t0
            TAP.ok(2.0 <= took + 1.0 and took < 5.0,
                   "a stopped rank shows alive=false after %.1f s (--dead-after 2, "
                   "heartbeat 1)" % took)
        except Fail as e:
            TAP.ok(False, str(e))
        rc, st, _ = status(opts, srv.endpoint, "live")
        g = group_of(st, "live")
        TAP.ok(member(g, 1) and member(g, 1).get("ports") == plan1 and member(g, 0)["alive"],
               "the dead rank keeps its plan %s; rank 0 stays alive" % plan1)
        agents[1].proc.send_signal(signal.SIGCONT)
        wait_for(lambda: not dead(), "rank 1 to come back alive", timeout=10, step=0.2)
        TAP.ok(True, "SIGCONT: rank 1 alive again")
        # Its return as a new process: a fresh session.
        agents[1].proc.kill()
        agents[1].proc.wait()
        epoch0 = g.get("epoch")
        p = join_async(opts, srv.endpoint, "live", 2, 1, node="agent-node", timeout=20)

        def moved():
            rc, st, _ = status(opts, srv.endpoint, "live")
            gg = group_of(st, "live") if st else None
            return gg if gg and gg.get("epoch", 0) > epoch0 and gg.get("complete") else None
        try:
            gg = wait_for(moved, "the group to move to a new epoch", timeout=20, step=0.2)
            TAP.ok(member(gg, 1).get("ports") == plan1,
                   "the returning rank (new session) moved the group to epoch %d, same plan"
                   % gg["epoch"])
        except Fail as e:
            TAP.ok(False, str(e))
        p.kill()
        p.wait()
    finally:
        for a in agents:
            if a and a.proc.poll() is None:
                a.proc.send_signal(signal.SIGCONT)
                a.close()
        srv.close()
