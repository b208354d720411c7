#!/usr/bin/python3
"""One DP rank of a vLLM-like engine, following vLLM's bootstrap-port logic.

The front end (this process) probes ports the way vLLM's _get_open_port does:
scan up from VLLM_PORT with socket(AF_INET, SOCK_STREAM), bind(("", port)),
close(), no SO_REUSEADDR.  It collects five (get_open_ports_list(5)) and pops
one, which vLLM never listens on.  Then, by --model:
  moe    rank 0 binds its DP RPC listener (--data-parallel-rpc-port: from
         RDZV_VLLM_ARGS, else vLLM's fixed default 29550) and publishes its
         list (the "candidate broadcast"); the other ranks read it.  A child
         ("EngineCore") sleeps a random delay (process start, imports and
         the handshake, all before vLLM loads the model), then rank 0 hosts
         the DP store on the next pop, retrying on EADDRINUSE with the next
         one as stateless_init_dp_group() does, and global rank 0's world
         store on the pop after; rank k > 0 dials the first DP pop and
         checks, with its token, that it reached its own group's rank 0.
  dense  no DP group (vLLM runs a dense model with DP size 1 in each
         engine): the executor's get_open_port() (which skips the ten ports
         from VLLM_DP_MASTER_PORT) picks this Pod's world store port, and
         EngineCore binds it after the delay; its worker dials it.
With --elastic (the scale-up scenario, moe only) the engine is one rank of
a deployment that grows while it serves: an externally managed elastic
deployment, whose manager may name each epoch's DP master port (under rdzv
the assignment's store port of that epoch; bare, vLLM picks the first DP pop
as at start-up).  The engine stays up until the harness ends the trial
(DIR/stop); on SIGUSR1 (the front end passes it to EngineCore) it moves to
the next epoch: rank 0 binds that epoch's bootstrap ports (a DP RPC port
when the epoch names another, a new list scanned from VLLM_PORT, the DP and
world stores after the handshake's delay) while the old epoch's stay bound,
and rank k dials the new DP store.  A rank that joins the grown deployment
starts in the new epoch (--epoch, or RDZV_EPOCH) as an ordinary rank k.
Every listener is reported with its role and epoch, for the harness to
check against the assignment's named ports.  The child writes one JSON
result; failures have a kind: eaddrinuse, wrong_peer or timeout.  Standard
library only; protocol shared with engine.c.
"""

import argparse
import errno
import json
import os
import random
import select
import signal
import socket
import sys
import threading
import time

PORT_LIST_LEN = 5          # get_open_ports_list(5)
DP_BIND_ATTEMPTS = 5       # stateless_init_dp_group() retries
MAX_PROBES = 4096          # bound the scan; vLLM scans until it finds one
DP_MASTER_RESERVED = 10    # get_open_port() avoids VLLM_DP_MASTER_PORT + 0..9
DP_RPC_DEFAULT = 29550     # vLLM's --data-parallel-rpc-port default
MAX_RESCANS = 64
POLL_S = 0.005
PEERS_POLL_S = 0.050
DIAL_RETRY_S = 0.010
IO_TIMEOUT_S = 0.200
FNV_OFFSET = 0xcbf29ce484222325
FNV_PRIME = 0x100000001b3


def fnv1a64(text):
    h = FNV_OFFSET
    for b in text.encode():
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def probe_scan(start):
    """vLLM's _get_open_port() with VLLM_PORT set: first port that binds."""
    port = start
    for _ in range(MAX_PROBES):
        if port > 65535:
            break
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("", port))
                return port
        except OSError:
            port += 1
    raise RuntimeError("no free port from %d" % start)


def get_open_port(start):
    """vLLM's get_open_port(): _get_open_port(), but never one of the ten
    ports from VLLM_DP_MASTER_PORT when that is set (vLLM loops until it
    gets another; here a loop that cannot end is reported after a while)."""
    master = os.environ.get("VLLM_DP_MASTER_PORT")
    if master is None:
        return probe_scan(start)
    reserved = range(int(master), int(master) + DP_MASTER_RESERVED)
    for _ in range(MAX_RESCANS):
        port = probe_scan(start)
        if port not in reserved:
            return port
    raise RuntimeError("get_open_port: every scan lands in %s" % reserved)


def read_env_file(path):
    """PATH.env as the agent writes it: KEY=VALUE lines, a value with spaces
    (RDZV_VLLM_ARGS) in single quotes."""
    env = {}
    with open(path) as f:
        for line in f:
            key, sep, value = line.rstrip("\n").partition("=")
            if sep:
                if len(value) >= 2 and value[0] == value[-1] == "'":
                    value = value[1:-1]
                env[key] = value
    return env


def rpc_port(given, env):
    """--data-parallel-rpc-port as a launch script passes it: the
    assignment's RDZV_VLLM_ARGS under rdzv, else --rpc-port (vLLM's
    default when the operator sets none)."""
    words = env.get("RDZV_VLLM_ARGS", "").split()
    for flag, value in zip(words, words[1:]):
        if flag == "--data-parallel-rpc-port":
            return int(value)
    return given


def named_ports(env):
    """The assignment's named ports (None in bare mode)."""
    if "RDZV_PORT_STORE" not in env:
        return None
    lo, hi = (int(x) for x in env["RDZV_PORT_PROBE"].split("-"))
    dp_rpc = env.get("RDZV_PORT_DP_RPC")
    return {"store": int(env["RDZV_PORT_STORE"]), "dp_rpc": int(dp_rpc) if dp_rpc else None,
            "probe": [lo, hi]}


def get_open_ports_list(start, count):
    """With VLLM_PORT set: consecutive hits of one scan (no VLLM_DP_MASTER_PORT
    check), returned in vLLM's list(set()) order."""
    ports = set()
    port = start
    while len(ports) < count:
        port = probe_scan(port)
        ports.add(port)
        port += 1
    return list(ports)


class Rank:
    def __init__(self, args):
        self.a = args
        self.start = time.monotonic()
        self.unix_start_ms = int(time.time() * 1000)
        self.deadline = self.start + args.timeout_ms / 1000.0
        # The epoch's environment: the process's, then PATH.env after a move.
        self.env = dict(os.environ)
        # A rank that joins a grown deployment starts in its next epoch.
        self.epoch = int(self.env.get("RDZV_EPOCH", args.epoch))
        self.events = []
        self.info = {"foreign_peers": 0, "peers_ok": 0, "bound_port": 0, "bound_t_ms": -1,
                     "listeners": [], "named": named_ports(self.env), "model": args.model,
                     "epoch": self.epoch, "moved": None}
        self.token = "%016x" % random.getrandbits(64)
        self.secret = None
        self.ports = []
        self.start_ports = []          # the start-up list, once there is another
        self.tp_port = 0
        self.last_error = ""
        self.moved = False         # SIGUSR1: the deployment moved to a new epoch
        self.move_done = False
        self.child = 0             # the front end passes SIGUSR1 on to EngineCore
        self.rpc_bound = 0         # the DP RPC port the front end holds
        self.serving = []          # elastic rank 0: (listener, its epoch's secret)
        self.held = []             # listeners held, not served (a later DP RPC port)

    def ms(self):
        return int((time.monotonic() - self.start) * 1000)

    def event(self, kind, what, port=None, detail=""):
        self.events.append({"kind": kind, "what": what, "port": port,
                            "detail": detail, "t_ms": self.ms(), "epoch": self.epoch})

    def broadcast_path(self):
        # each epoch of an elastic deployment has its own candidate list
        if not self.a.elastic or self.epoch <= 1:
            return os.path.join(self.a.dir, "g%d.ports" % self.a.group)
        return os.path.join(self.a.dir, "g%d.e%d.ports" % (self.a.group, self.epoch))

    def publish(self):
        self.secret = "%016x" % random.getrandbits(64)
        path = self.broadcast_path()
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w") as f:
            f.write("%d %s %s\n" % (self.a.trial, self.secret,
                                    " ".join(map(str, self.ports))))
        os.rename(tmp, path)

    def read_broadcast(self):
        # An elastic engine waits for the list as long as it serves, as
        # vLLM's handshake waits minutes: a rank 0 that starts late is not
        # what its scenario is about.  The window after the list is the same.
        while not (self.stopped() if self.a.elastic else time.monotonic() >= self.deadline):
            try:
                with open(self.broadcast_path()) as f:
                    fields = f.read().split()
                if int(fields[0]) == self.a.trial:
                    self.secret = fields[1]
                    self.ports = [int(p) for p in fields[2:]]
                    # the list is rank 0's handshake: waiting starts from it
                    self.deadline = time.monotonic() + self.a.timeout_ms / 1000.0
                    return True
            except (OSError, IndexError, ValueError):
                pass
            time.sleep(POLL_S)
        self.event("timeout", "broadcast", detail="no candidate list")
        return False

    def listen(self, port, role):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
            s.listen(128)
        except OSError:
            s.close()
            raise
        self.info["listeners"].append([role, port, self.epoch])
        return s

    def listen_or_report(self, port, role):
        """A bind vLLM does not retry: EADDRINUSE is this rank's end."""
        try:
            return self.listen(port, role)
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            self.event("eaddrinuse", role, port)
            return None

    def named_store(self):
        """An elastic deployment's manager names each epoch's DP master port:
        under rdzv the assignment's store port of this epoch.  None: vLLM
        takes a pop of its list (bare, and every start-up scenario)."""
        named = self.a.elastic and named_ports(self.env)
        return named["store"] if named else None

    def dp_port(self):
        """The port rank 0's DP store binds first and rank k dials: the named
        store port, else the first DP pop (the API server took the last)."""
        named = self.named_store()
        return self.ports[-2] if named is None else named

    def bind_dp_store(self, pops):
        """stateless_init_dp_group(): on EADDRINUSE the next port, up to five
        times: the next pop, or after a named port the one above it
        (get_next_dp_init_port() with no list left)."""
        named = self.named_store()
        record = self.info["moved"] or self.info
        for attempt in range(DP_BIND_ATTEMPTS):
            if named is not None:
                port = named + attempt
            elif pops:
                port = pops.pop()
            else:
                break
            try:
                lsock = self.listen(port, "dp-store")
                record["bound_port"] = port
                record["bound_t_ms"] = self.ms()
                return lsock
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
                self.event("eaddrinuse", "dp-store", port)
        return None

    def serve_one(self, conn, secret):
        conn.settimeout(IO_TIMEOUT_S)
        try:
            line = conn.makefile("r").readline().split()
            if len(line) != 5 or line[0] != "HELLO":
                return
            trial, group, rank, token = int(line[1]), int(line[2]), int(line[3]), line[4]
            mac = fnv1a64("%s:%s" % (secret, token))
            conn.sendall(("OK %d %d %d %s %s\n" % (self.a.trial, self.a.group,
                                                   rank, token, mac)).encode())
            if trial == self.a.trial and group == self.a.group:
                self.info["peers_ok"] += 1
            else:
                self.info["foreign_peers"] += 1
            conn.recv(1)   # the client closes first: TIME_WAIT stays on its side
        except (OSError, ValueError):
            pass
        finally:
            conn.close()

    def peers_done(self):
        """Every other rank has written its result: nobody will dial any more."""
        return all(os.path.exists(self.result_path(r)) for r in range(1, self.a.world))

    def serve(self, lsock):
        want = self.a.world - 1
        while self.info["peers_ok"] < want and not self.peers_done():
            left = self.deadline - time.monotonic()
            if left <= 0:
                break
            r, _, _ = select.select([lsock], [], [], min(left, PEERS_POLL_S))
            if r:
                try:
                    conn, _ = lsock.accept()
                except OSError:
                    continue
                self.serve_one(conn, self.secret)

    def dial_once(self, port, host=None):
        """1: right peer, 0: wrong peer, None: nobody there yet (self.last_error)."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(IO_TIMEOUT_S)
        try:
            s.connect((host or self.a.peer_host, port))
            s.sendall(("HELLO %d %d %d %s\n" % (self.a.trial, self.a.group,
                                                self.a.rank, self.token)).encode())
            reply = s.makefile("r").readline()
        except OSError as e:
            self.last_error = errno.errorcode.get(e.errno, type(e).__name__)
            return None
        finally:
            s.close()
        want = "OK %d %d %d %s %s" % (self.a.trial, self.a.group, self.a.rank,
                                       self.token,
                                       fnv1a64("%s:%s" % (self.secret, self.token)))
        if reply.strip() == want:
            return 1
        self.event("wrong_peer", "dial", port, reply.strip()[:80])
        return 0

    def dial(self):
        port = self.dp_port()
        first, attempts, self.last_error = self.ms(), 0, ""
        while time.monotonic() < self.deadline:
            attempts += 1
            if self.dial_once(port) is not None:
                return
            time.sleep(DIAL_RETRY_S)
        self.event("timeout", "dial", port, "%d attempts from %d ms, last: %s"
                   % (attempts, first, self.last_error))

    def delay(self):
        time.sleep(random.uniform(0, self.a.delay_max_ms / 1000.0))

    def engine_core_moe(self):
        if self.a.elastic:
            return self.elastic_rank0() if self.a.rank == 0 else self.elastic_rank_k()
        self.delay()
        if self.a.rank > 0:
            self.dial()
            return
        pops = list(self.ports)
        pops.pop()                     # the API server's data_parallel_master_port
        dp = self.bind_dp_store(pops)
        if dp is None:
            self.event("timeout", "dp-store", detail="no port left to bind")
            return
        world = self.listen_or_report(pops.pop(), "world-store") if pops else None
        self.serve(dp)
        dp.close()
        if world is not None:
            world.close()

    # --elastic: the scale-up scenario

    def on_move(self, signum, frame):
        """The agent (or, bare, the harness) signals the front end, which
        passes it on to EngineCore, where the move happens."""
        if self.child:
            os.kill(self.child, signum)
        else:
            self.moved = True

    def stopped(self):
        """The trial is over (the harness made DIR/stop) or this engine's own
        limit passed: an elastic engine serves until then, as a deployment's
        engines serve on after they grew."""
        return os.path.exists(os.path.join(self.a.dir, "stop")) \
            or time.monotonic() >= self.start + self.a.elastic_ms / 1000.0

    def mark_ready(self):
        """This rank's part of its epoch is done (rank 0's stores bound, rank
        k's dial answered or given up): the harness grows the deployments,
        and ends the trial, once every rank has said so."""
        open(os.path.join(self.a.dir, "ready-g%d-r%d-e%d"
                          % (self.a.group, self.a.rank, self.epoch)), "w").close()

    def next_epoch(self):
        """The epoch the deployment moved to: PATH.env, which the agent
        rewrote before it signalled (rdzv), else the next one with
        --scale-world ranks (bare).  False if the environment names no
        newer epoch than this one."""
        self.move_done = True
        sock = os.environ.get("RDZV_AGENT_SOCKET")
        if sock:
            try:
                env = read_env_file(sock + ".env")
            except OSError as e:
                self.event("timeout", "epoch", detail="signalled, but cannot read %s.env: %s"
                           % (sock, e.strerror))
                return False
            epoch = int(env.get("RDZV_EPOCH", "0"))
        else:
            env, epoch = self.env, self.epoch + 1
        if epoch <= self.epoch:
            self.event("timeout", "epoch", detail="signalled, but %s.env says epoch %d"
                       % (sock, epoch))
            return False
        self.env, self.epoch, self.ports = env, epoch, []
        world = int(env.get("RDZV_WORLD", self.a.scale_world))
        self.info["moved"] = {"epoch": epoch, "world": world, "named": named_ports(env),
                              "bound_port": 0, "bound_t_ms": -1}
        self.deadline = time.monotonic() + self.a.timeout_ms / 1000.0
        return True

    def bind_stores(self):
        """The epoch's DP store, with vLLM's retries, and world store, each
        served with the epoch's secret."""
        pops = list(self.ports)
        pops.pop()                     # the API server's data_parallel_master_port
        dp = self.bind_dp_store(pops)
        if dp is None:
            self.event("timeout", "dp-store", detail="no port left to bind")
            return
        self.serving.append((dp, self.secret))
        world = self.listen_or_report(pops.pop(), "world-store") if pops else None
        if world is not None:
            self.serving.append((world, self.secret))

    def begin_move(self):
        """Rank 0, told the deployment grew: the new epoch's DP RPC port when
        it names another one (rdzv; vLLM's own is fixed), and a new list from
        VLLM_PORT (the new topology's DP master ports), published with a new
        secret.  The RPC listener binds here rather than in the front end: the
        port is what counts.  Returns when EngineCore binds the stores: after
        the reconfiguration's handshake, a random delay."""
        if not self.next_epoch():
            return None
        port = rpc_port(self.a.rpc_port, self.env)
        if port != self.rpc_bound:
            rpc = self.listen_or_report(port, "dp-rpc")
            if rpc is not None:
                self.held.append(rpc)
        self.ports = get_open_ports_list(int(os.environ.get("VLLM_PORT", "19500")),
                                         PORT_LIST_LEN)
        self.publish()
        return time.monotonic() + random.uniform(0, self.a.delay_max_ms / 1000.0)

    def elastic_rank0(self):
        """The old epoch's stores serve until the trial ends, beside the new
        epoch's: a deployment's old DP group lives on while the new one
        forms."""
        # the signal wakes the select below at once, as it does engine.c's poll
        # (Python would retry the select and see the move up to a poll later)
        wake, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        self.delay()
        self.bind_stores()
        self.mark_ready()
        bind_at = None
        while not self.stopped():
            if self.moved and not self.move_done:
                bind_at = self.begin_move()
            now = time.monotonic()
            if bind_at is not None and now >= bind_at:
                bind_at = None
                self.bind_stores()
                self.mark_ready()
            wait = PEERS_POLL_S if bind_at is None else min(PEERS_POLL_S, bind_at - now)
            secrets = dict(self.serving)
            r, _, _ = select.select(list(secrets) + [wake], [], [], max(0.0, wait))
            for lsock in r:
                if lsock == wake:
                    os.read(wake, 64)
                    continue
                try:
                    conn, _ = lsock.accept()
                except OSError:
                    continue
                self.serve_one(conn, secrets[lsock])
        for lsock in list(dict(self.serving)) + self.held:
            lsock.close()

    def elastic_rank_k(self):
        """Dials its epoch's DP store; on a move, the new epoch's."""
        self.delay()
        self.dial()
        self.mark_ready()
        while not self.stopped():
            if self.moved and not self.move_done:
                if self.next_epoch() and self.read_broadcast():
                    self.delay()
                    self.dial()
                self.mark_ready()
            time.sleep(POLL_S)

    def engine_core_dense(self, port):
        """The world store, and its worker's check that it reached it."""
        self.delay()
        lsock = self.listen_or_report(port, "world-store")
        if lsock is None:
            return
        self.secret = "%016x" % random.getrandbits(64)
        threading.Thread(target=lambda: self.serve_one(lsock.accept()[0], self.secret),
                         daemon=True).start()
        if self.dial_once(port, "127.0.0.1") is None:
            self.event("timeout", "dial", port, self.last_error)
        # The store lives as long as the engine: to the end of its window.
        time.sleep(max(0.0, self.deadline - time.monotonic()))
        lsock.close()

    def result_path(self, rank):
        return os.path.join(self.a.dir, "result-g%d-r%d.json" % (self.a.group, rank))

    def write_result(self):
        res = {"trial": self.a.trial, "group": self.a.group, "rank": self.a.rank,
               "engine": "py", "ports": self.ports, "tp_port": self.tp_port,
               "unix_start_ms": self.unix_start_ms, "events": self.events}
        res.update(self.info)
        if res["moved"]:
            # "ports" stays the start-up list; the move's goes with the move
            res["moved"] = dict(res["moved"], ports=self.ports)
            res["ports"] = self.start_ports
        path = self.result_path(self.a.rank)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f)
            f.write("\n")
        os.rename(tmp, path)

    def fork_engine_core(self, body):
        self.start_ports = list(self.ports)
        pid = os.fork()
        if pid == 0:
            code = 2
            try:
                body()
                self.write_result()
                code = 1 if self.events else 0
            finally:
                os._exit(code)
        self.child = pid
        if self.moved:                 # it came before EngineCore existed
            os.kill(pid, signal.SIGUSR1)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) if status else 0

    def run(self):
        if self.a.elastic:
            # from the start: an engine without a handler dies of the signal
            signal.signal(signal.SIGUSR1, self.on_move)
        vllm_port = int(os.environ.get("VLLM_PORT", "19500"))
        own = get_open_ports_list(vllm_port, PORT_LIST_LEN)
        if self.a.model == "dense":
            self.ports = own
            port = self.tp_port = get_open_port(vllm_port)
            return self.fork_engine_core(lambda: self.engine_core_dense(port))
        rpc = None
        if self.a.rank == 0:
            self.ports = own
            self.rpc_bound = rpc_port(self.a.rpc_port, self.env)
            rpc = self.listen_or_report(self.rpc_bound, "dp-rpc")
            if rpc is None:
                self.write_result()
                return 1
            self.publish()
            # serve until the last rank, which may bind late, had its window
            self.deadline = time.monotonic() + (self.a.timeout_ms
                                                + self.a.delay_max_ms) / 1000.0
        elif not self.read_broadcast():
            self.write_result()
            return 1
        # the executor's scan: with DP > 1 its port is replaced by a pop
        self.tp_port = get_open_port(vllm_port)
        try:
            return self.fork_engine_core(self.engine_core_moe)
        finally:
            if rpc is not None:
                rpc.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trial", type=int, required=True)
    p.add_argument("--group", type=int, required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--dir", required=True, help="broadcast and result directory")
    p.add_argument("--peer-host", default="127.0.0.1", help="rank 0's address")
    p.add_argument("--delay-max-ms", type=int, default=300)
    p.add_argument("--timeout-ms", type=int, default=800)
    p.add_argument("--model", choices=("moe", "dense"), default="moe")
    p.add_argument("--rpc-port", type=int, default=DP_RPC_DEFAULT,
                   help="--data-parallel-rpc-port without RDZV_VLLM_ARGS")
    p.add_argument("--elastic", action="store_true",
                   help="moe: serve until DIR/stop, moving to the next epoch on SIGUSR1")
    p.add_argument("--epoch", type=int, default=1,
                   help="the epoch this rank starts in, without RDZV_EPOCH")
    p.add_argument("--scale-world", type=int, default=0,
                   help="--elastic: the world after a move, without the agent's PATH.env")
    p.add_argument("--elastic-ms", type=int, default=30000,
                   help="--elastic: serve at most this long, DIR/stop or not")
    a = p.parse_args()
    if a.elastic and a.model != "moe":
        p.error("--elastic needs --model moe")
    return Rank(a).run()


if __name__ == "__main__":
    sys.exit(main())
