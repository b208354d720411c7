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
Every listener is reported with its role, for the harness to check against
the assignment's named ports.  The child writes one JSON result; failures
have a kind: eaddrinuse, wrong_peer or timeout.  Standard library only;
protocol shared with engine.c.
"""

import argparse
import errno
import json
import os
import random
import select
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


def rpc_port(given):
    """--data-parallel-rpc-port as a launch script passes it: the
    assignment's RDZV_VLLM_ARGS under rdzv, else --rpc-port (vLLM's
    default when the operator sets none)."""
    words = os.environ.get("RDZV_VLLM_ARGS", "").split()
    for flag, value in zip(words, words[1:]):
        if flag == "--data-parallel-rpc-port":
            return int(value)
    return given


def named_ports():
    """The assignment's named ports (None in bare mode)."""
    env = os.environ
    if "RDZV_PORT_STORE" not in env:
        return None
    lo, hi = (int(x) for x in env["RDZV_PORT_PROBE"].split("-"))
    return {"store": int(env["RDZV_PORT_STORE"]), "dp_rpc": int(env["RDZV_PORT_DP_RPC"]),
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
        self.events = []
        self.info = {"foreign_peers": 0, "peers_ok": 0, "bound_port": 0, "bound_t_ms": -1,
                     "listeners": [], "named": named_ports(), "model": args.model}
        self.token = "%016x" % random.getrandbits(64)
        self.secret = None
        self.ports = []
        self.tp_port = 0
        self.last_error = ""

    def ms(self):
        return int((time.monotonic() - self.start) * 1000)

    def event(self, kind, what, port=None, detail=""):
        self.events.append({"kind": kind, "what": what, "port": port,
                            "detail": detail, "t_ms": self.ms()})

    def broadcast_path(self):
        return os.path.join(self.a.dir, "g%d.ports" % self.a.group)

    def publish(self):
        self.secret = "%016x" % random.getrandbits(64)
        path = self.broadcast_path()
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w") as f:
            f.write("%d %s %s\n" % (self.a.trial, self.secret,
                                    " ".join(map(str, self.ports))))
        os.rename(tmp, path)

    def read_broadcast(self):
        while time.monotonic() < self.deadline:
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
        self.info["listeners"].append([role, port])
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

    def bind_dp_store(self, pops):
        for _ in range(DP_BIND_ATTEMPTS):
            if not pops:
                break
            port = pops.pop()
            try:
                lsock = self.listen(port, "dp-store")
                self.info["bound_port"] = port
                self.info["bound_t_ms"] = self.ms()
                return lsock
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
                self.event("eaddrinuse", "dp-store", port)
        return None

    def serve_one(self, conn):
        conn.settimeout(IO_TIMEOUT_S)
        try:
            line = conn.makefile("r").readline().split()
            if len(line) != 5 or line[0] != "HELLO":
                return
            trial, group, rank, token = int(line[1]), int(line[2]), int(line[3]), line[4]
            mac = fnv1a64("%s:%s" % (self.secret, token))
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
                self.serve_one(conn)

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
        port = self.ports[-2]          # the first DP pop: the API server took the last
        first, attempts, self.last_error = self.ms(), 0, ""
        while time.monotonic() < self.deadline:
            attempts += 1
            if self.dial_once(port) is not None:
                return
            time.sleep(DIAL_RETRY_S)
        self.event("timeout", "dial", port, "%d attempts from %d ms, last: %s"
                   % (attempts, first, self.last_error))

    def engine_core_moe(self):
        time.sleep(random.uniform(0, self.a.delay_max_ms / 1000.0))
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

    def engine_core_dense(self, port):
        """The world store, and its worker's check that it reached it."""
        time.sleep(random.uniform(0, self.a.delay_max_ms / 1000.0))
        lsock = self.listen_or_report(port, "world-store")
        if lsock is None:
            return
        self.secret = "%016x" % random.getrandbits(64)
        threading.Thread(target=lambda: self.serve_one(lsock.accept()[0]), daemon=True).start()
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
        path = self.result_path(self.a.rank)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f)
            f.write("\n")
        os.rename(tmp, path)

    def fork_engine_core(self, body):
        pid = os.fork()
        if pid == 0:
            code = 2
            try:
                body()
                self.write_result()
                code = 1 if self.events else 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) if status else 0

    def run(self):
        vllm_port = int(os.environ.get("VLLM_PORT", "19500"))
        own = get_open_ports_list(vllm_port, PORT_LIST_LEN)
        if self.a.model == "dense":
            self.ports = own
            port = self.tp_port = get_open_port(vllm_port)
            return self.fork_engine_core(lambda: self.engine_core_dense(port))
        rpc = None
        if self.a.rank == 0:
            self.ports = own
            rpc = self.listen_or_report(rpc_port(self.a.rpc_port), "dp-rpc")
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
    return Rank(p.parse_args()).run()


if __name__ == "__main__":
    sys.exit(main())
