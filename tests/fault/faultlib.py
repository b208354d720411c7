"""What every fault case uses: the report its checks go to (TAP, an
rdzvtest.Report), a real rdzvd on a loopback port (Server), the rdzv CLI,
the journal's record format, keys. Imported by fault.py and the fault_*.py
case modules."""
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import zlib

import rdzvtest
from rdzvtest import Fail, Skip, check, wait_for  # noqa: F401 (the cases import them from here)


PY = "/usr/bin/python3"
BASE = 25000          # managed ports of these cases: [25000, 26000)
LIMIT = 26000
WAIT_S = 20

# The case's checks, one line each: TAP.ok(cond, what), TAP.note(text).
TAP = rdzvtest.Report()


# --- rdzvd and the CLI -------------------------------------------------------

def low_port():
    """A free loopback port below the kernel's ephemeral range. rdzvd must be
    restartable on its port: on an ephemeral one (tcp://127.0.0.1:*), the
    clients' reconnects while it is down can take the port as their own
    source port, and the restart then fails with EADDRINUSE (seen here with
    two agents reconnecting). The default 29400 is below the range too."""
    import random
    for _ in range(200):
        port = random.randrange(20000, 25000)
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    raise Fail("no free port in [20000, 25000)")


class Server(rdzvtest.Rdzvd):
    """One rdzvd on a fixed loopback port, so that it restarts on the same
    endpoint; in a temporary directory of its own."""

    def __init__(self, opts, extra=(), state_dir=None, bind=None):
        self.opts = opts
        self.tmp = tempfile.mkdtemp(prefix="rdzv-fault-")
        super().__init__(opts.rdzvd, self.tmp, "--port-base", str(BASE), "--port-limit",
                         str(LIMIT), "--ports-per-rank", "8", "--no-nccl", *extra,
                         bind=bind or "tcp://127.0.0.1:%d" % low_port(), state=state_dir)

    @property
    def journal(self):
        return os.path.join(self.state, "journal")

    def fd_count(self):
        return len(os.listdir("/proc/%d/fd" % self.proc.pid))

    def rss_kb(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return -1

    def close(self):
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def cli(opts, *args, timeout=WAIT_S, env=None):
    """Runs the rdzv CLI; returns (rc, stdout, stderr)."""
    p = subprocess.run([opts.rdzv, *args], capture_output=True, text=True, timeout=timeout + 15,
                       env=env)
    return p.returncode, p.stdout, p.stderr


def join(opts, ep, group, world, rank, node="n0", timeout=10, extra=(), env=None):
    """One `rdzv join`; returns (rc, assignment dict or None, stderr)."""
    rc, out, err = cli(opts, "join", "--server", ep, "--group", group, "--world", str(world),
                       "--rank", str(rank), "--host", "127.0.0.1", "--node", node,
                       "--nccl-id", "none", "--timeout", str(timeout), *extra, timeout=timeout,
                       env=env)
    a = None
    if rc == 0:
        try:
            a = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise Fail("rdzv join printed no JSON: %r" % out)
    return rc, a, err


def join_async(opts, ep, group, world, rank, node="n0", timeout=10, extra=()):
    return subprocess.Popen([opts.rdzv, "join", "--server", ep, "--group", group, "--world",
                             str(world), "--rank", str(rank), "--host", "127.0.0.1", "--node",
                             node, "--nccl-id", "none", "--timeout", str(timeout), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def status(opts, ep, group=None):
    args = ["status", "--json", "--server", ep]
    if group:
        args += ["--group", group]
    rc, out, err = cli(opts, *args)
    if rc != 0:
        return rc, None, err
    return rc, json.loads(out.strip().splitlines()[-1]), err


def timed_join(opts, ep, group, extra=()):
    """A world-1 join; returns (seconds, rc)."""
    t0 = time.monotonic()
    rc, _, err = join(opts, ep, group, 1, 0, node="probe-" + group, timeout=10, extra=extra)
    return time.monotonic() - t0, rc, err


# --- the journal format: [u32 len][u32 crc32][JSON], little endian ------------

def records(data):
    """[(offset, framed length, payload)] of the well-formed prefix."""
    out, off = [], 0
    while off + 8 <= len(data):
        n, crc = struct.unpack_from("<II", data, off)
        body = data[off + 8:off + 8 + n]
        if n == 0 or len(body) != n or zlib.crc32(body) & 0xffffffff != crc:
            break
        out.append((off, 8 + n, body))
        off += 8 + n
    return out


def rendezvous(opts, ep, group, world, node="n0"):
    procs = [join_async(opts, ep, group, world, r, node=node) for r in range(world)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=WAIT_S + 15)
        check(p.returncode == 0, "join of %s exited %d: %s" % (group, p.returncode, err))
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


def group_of(st, name):
    for g in st.get("groups", []):
        if g.get("group") == name:
            return g
    return None


# --- journal cases -----------------------------------------------------------

def build_history(opts):
    """rdzvd with a group g (world 2, complete) then a KV put as the last
    record. Returns the stopped server and the journal's records."""
    srv = Server(opts)
    rendezvous(opts, srv.endpoint, "g", 2)
    rc, _, err = cli(opts, "kv", "put", "--server", srv.endpoint, "--group", "g", "--epoch", "1",
                     "last-key", "last-value")
    check(rc == 0, "kv put failed: %s" % err)
    srv.stop()
    data = open(srv.journal, "rb").read()
    recs = records(data)
    check(sum(r[1] for r in recs) == len(data), "the journal rdzvd wrote does not parse")
    check(json.loads(recs[-1][2]).get("value") == "last-value",
          "the last record is not the KV put: %r" % recs[-1][2])
    return srv, data, recs


def kv_get(opts, ep, key, group="g", epoch=1):
    return cli(opts, "kv", "get", "--server", ep, "--group", group, "--epoch", str(epoch), key)


# --- rdzvd features a case needs; absent ones fail the case -------------------

def help_text(opts):
    return subprocess.run([opts.rdzvd, "--help"], capture_output=True, text=True).stdout


def require_flag(opts, flag):
    if flag not in help_text(opts):
        raise Fail("rdzvd --help has no %s yet" % flag)


def keygen(opts, path):
    rc, out, err = cli(opts, "keygen", path)
    check(rc == 0, "rdzv keygen %s exited %d: %s" % (path, rc, err))
    check(os.path.exists(path) and os.path.exists(path + "_secret"),
          "rdzv keygen did not write %s and %s_secret" % (path, path))
    pub, sec = open(path).read(), open(path + "_secret").read()
    check("public-key" in pub and "secret-key" not in pub,
          "the public certificate is not in czmq's format or holds the secret: %r" % pub)
    check("public-key" in sec and "secret-key" in sec,
          "the secret certificate is not in czmq's format: %r" % sec)
    check(os.stat(path + "_secret").st_mode & 0o077 == 0,
          "the secret certificate is readable by others (mode %o)"
          % (os.stat(path + "_secret").st_mode & 0o777))
