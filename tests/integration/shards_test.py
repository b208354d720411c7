#!/usr/bin/env python3
"""rdzvd --shards on loopback: SO_REUSEPORT listeners on one port, a group
whose ranks came in on different shards answered in full (replies cross from
the shard that completed the group to the shards owning the connections),
/metrics counting requests per shard, a second rdzvd on the same port
refused instead of silently splitting the clients, clients that chose their
own ROUTER identities (up to 255 bytes) answered, and --shards with an
endpoint that cannot be sharded refused. One line per check (rdzvtest).
Needs RDZVD and RDZV."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import rdzvtest
from rdzvtest import Fail, free_port

SHARDS = 4
LISTENERS = 6
RANKS = 48


def listeners(port):
    """LISTEN sockets on 127.0.0.1:port, from /proc/net/tcp."""
    n = 0
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A" and local == "0100007F:%04X" % port:
                n += 1
    return n


def shard_requests(http_port):
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("rdzv_shard_requests_total{"):
            shard = int(line.split('shard="')[1].split('"')[0])
            out[shard] = int(float(line.split()[-1]))
    return out


def have_ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def started(d):
    """Whether rdzvd d came up. Not an exception: starting is a check of its
    own, and the checks after it still run and print."""
    try:
        d.start()
        return True
    except Fail:
        return False


def ipv6_group(rdzvd, rdzv, tmp):
    """rdzvd on [::1] with two shards; four `rdzv join` over IPv6."""
    work = os.path.join(tmp, "v6")
    os.mkdir(work)
    d = rdzvtest.Rdzvd(rdzvd, work, "--shards", "2", "--no-nccl", bind="tcp://[::1]:0",
                       start=False)
    try:
        if not started(d):
            return False
        endpoint = d.endpoint
        joins = [subprocess.Popen([rdzv, "join", "--server", endpoint, "--group", "v6",
                                   "--world", "4", "--rank", str(r), "--node", "n%d" % r,
                                   "--host", "::1", "--timeout", "30"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                 for r in range(4)]
        outs = [(j.wait(timeout=60), j.stdout.read()) for j in joins]
        return endpoint.startswith("tcp://[::1]:") and all(
            rc == 0 and json.loads(out)["world"] == 4 for rc, out in outs)
    finally:
        d.stop()


def start_line(rdzvd, tmp, prefix):
    """rdzvd's "start" log line when run under prefix (taskset ...)."""
    work = os.path.join(tmp, "pinned")
    os.mkdir(work)
    d = rdzvtest.Rdzvd(rdzvd, work, "--no-nccl", bind="tcp://127.0.0.1:0", start=False)
    d.prefix = prefix
    try:
        started(d)
    finally:
        d.stop()
    return next((line for line in d.log().splitlines() if " start " in line), "")


def own_identities(endpoint):
    """Four DEALERs with identities of their own (ZMQ_ROUTING_ID; 5, 16, 17
    and 255 bytes: rdzvd keeps up to 16 in the peer, longer ones apart) join
    one group; each must get its own rank's assignment. None without pyzmq."""
    try:
        import zmq
    except ImportError:
        return None
    ctx = zmq.Context()
    socks = []
    try:
        for r, n in enumerate((5, 16, 17, 255)):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.ROUTING_ID, bytes([r + 1]) + b"i" * (n - 1))
            s.setsockopt(zmq.LINGER, 0)
            s.connect(endpoint)
            s.send_string(json.dumps({"v": 1, "id": 10 + r, "op": "join", "group": "ids",
                                      "world": 4, "rank": r, "host": "127.0.0.1",
                                      "node": "id%d" % r, "session": "s%d" % r,
                                      "timeout_ms": 20000, "members": False}))
            socks.append(s)
        ranks = []
        deadline = time.time() + 30
        for s in socks:
            if not s.poll(max(0, int((deadline - time.time()) * 1000))):
                return False
            reply = json.loads(s.recv())
            ranks.append((reply.get("id"), reply.get("assignment", {}).get("rank")))
        return ranks == [(10 + r, r) for r in range(4)]
    finally:
        for s in socks:
            s.close()
        ctx.term()


def main():
    rdzvd, rdzv = os.environ["RDZVD"], os.environ["RDZV"]
    tmp = tempfile.TemporaryDirectory()
    port, http_port = free_port(), free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    d = rdzvtest.Rdzvd(rdzvd, tmp.name, "--shards", str(SHARDS), "--listeners", str(LISTENERS),
                       "--no-nccl", "--http", f"127.0.0.1:{http_port}", bind=endpoint,
                       start=False)
    report = rdzvtest.Report()
    try:
        report.ok(started(d), "rdzvd starts with --shards %d" % SHARDS)
        report.ok(listeners(port) == LISTENERS, "%d listeners on the one port" % LISTENERS)

        # Every rank its own process and connection, all at once.
        joins = [subprocess.Popen([rdzv, "join", "--server", endpoint, "--group", "g",
                                   "--world", str(RANKS), "--rank", str(r), "--node", "n%d" % r,
                                   "--host", "127.0.0.1", "--timeout", "60"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                 for r in range(RANKS)]
        results = [(j.wait(timeout=90), j.stdout.read()) for j in joins]
        got = [json.loads(out) for rc, out in results if rc == 0 and out.strip()]
        report.ok(len(got) == RANKS, "all %d ranks got an assignment" % RANKS)
        report.ok(sorted(a["rank"] for a in got) == list(range(RANKS))
                  and len({(a["master_addr"], a["master_port"], a["epoch"]) for a in got}) == 1,
                  "each got its own rank, one master, epoch 1")

        counts = shard_requests(http_port)
        used = [s for s, n in counts.items() if n > 0]
        report.ok(len(used) > 1, "requests came in on more than one shard (%s)" % counts)
        report.ok(all(0 <= s < SHARDS for s in counts), "no shard beyond --shards")
        report.ok(sum(counts.values()) >= RANKS, "per-shard counts add up to the joins")

        second = subprocess.run([rdzvd, "--bind", endpoint, "--state-dir",
                                 os.path.join(tmp.name, "state2"), "--no-nccl"],
                                capture_output=True, text=True, timeout=20)
        report.ok(second.returncode != 0 and "Address already in use" in second.stderr,
                  "a second rdzvd on the port is refused")
        report.ok(listeners(port) == LISTENERS,
                  "and the port still has only the first rdzvd's listeners")
        own = own_identities(endpoint)
        what = "clients with their own identities of 5, 16, 17 and 255 bytes answered"
        if own is None:
            report.skip(what, "no pyzmq")
        else:
            report.ok(own, what)
        status = subprocess.run([rdzv, "status", "--json", "--server", endpoint, "--group", "g"],
                                capture_output=True, text=True, timeout=20)
        report.ok(status.returncode == 0 and '"g"' in status.stdout, "the first rdzvd still serves")

        ipc = subprocess.run([rdzvd, "--bind", "ipc://" + os.path.join(tmp.name, "sock"),
                              "--shards", "2", "--state-dir", os.path.join(tmp.name, "state3"),
                              "--no-nccl"], capture_output=True, text=True, timeout=20)
        report.ok(ipc.returncode != 0 and "tcp://ADDRESS:PORT" in ipc.stderr,
                  "--shards 2 with an ipc endpoint is refused")
        bad = subprocess.run([rdzvd, "--shards", "0"], capture_output=True, text=True, timeout=20)
        report.ok(bad.returncode == 2, "--shards 0 is a usage error")
        few = subprocess.run([rdzvd, "--bind", "tcp://127.0.0.1:0", "--shards", "4", "--listeners",
                              "2", "--state-dir", os.path.join(tmp.name, "state4"), "--no-nccl"],
                             capture_output=True, text=True, timeout=20)
        report.ok(few.returncode != 0 and "--listeners" in few.stderr,
                  "fewer listeners than shards is refused")
        if shutil.which("taskset"):
            cpu = str(min(os.sched_getaffinity(0)))
            pinned = start_line(rdzvd, tmp.name, ["taskset", "-c", cpu])
            report.ok("shards=1 listeners=8 io_threads=1" in pinned,
                      "pinned to one CPU, rdzvd starts 1 shard, 8 listeners, 1 I/O thread")
        if have_ipv6_loopback():
            report.ok(ipv6_group(rdzvd, rdzv, tmp.name),
                      "an IPv6 endpoint with 2 shards serves 4 ranks")
    finally:
        report.ok(d.stop() == 0, "rdzvd with shards stops on SIGTERM")
    if report.failed:
        rdzvtest.note("".join(d.log().splitlines(True)[-20:]))
    return report.done()


if __name__ == "__main__":
    sys.exit(main())
