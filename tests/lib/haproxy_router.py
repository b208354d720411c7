"""Debian's HAProxy as a real router for the tests: started on loopback
with an admin socket (level admin), a frontend on a free port and one
backend, engines, with `balance roundrobin` and no server; what rdzvd's
router driver puts in that backend is read back through the same socket."""
import http.client
import os
import shutil
import socket
import subprocess

import rdzvtest


def haproxy_exe():
    """Debian's haproxy (in /usr/sbin, which a user's PATH may lack), or
    None when it is not installed."""
    return shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy")
                                       else None)


def server_name(group, rank):
    """The server rdzvd's HAProxy driver makes for a group's rank:
    rdzv-GROUP-HASH-RANK, GROUP cut to 48 bytes and made safe, HASH the
    FNV-1a of the whole name."""
    h = 2166136261
    for b in group.encode():
        h = ((h ^ b) * 16777619) & 0xffffffff
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "_.-") else "_"
                   for c in group[:48])
    return "rdzv-%s-%08x-%d" % (safe, h, rank)


class Haproxy:
    """Debian's haproxy on loopback: frontend PORT, backend engines
    (roundrobin, no server), admin socket SOCK."""

    def __init__(self, exe, workdir):
        self.exe, self.workdir = exe, workdir
        self.sock = os.path.join(workdir, "admin.sock")
        self.port = rdzvtest.free_port()
        self.cfg = os.path.join(workdir, "haproxy.cfg")
        with open(self.cfg, "w") as f:
            f.write("""global
    stats socket %s mode 600 level admin
defaults
    mode http
    timeout connect 1s
    timeout client 10s
    timeout server 10s
    retries 0
frontend fe
    bind 127.0.0.1:%d
    default_backend engines
backend engines
    balance roundrobin
""" % (self.sock, self.port))
        self.proc = None
        self.start()

    def start(self):
        self.log = open(os.path.join(self.workdir, "haproxy.log"), "a")
        self.proc = subprocess.Popen([self.exe, "-db", "-f", self.cfg], stdout=self.log,
                                     stderr=self.log)
        rdzvtest.wait_for(lambda: os.path.exists(self.sock) and self.cli("show info"),
                          "haproxy's admin socket")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        if os.path.exists(self.sock):
            os.unlink(self.sock)

    def cli(self, cmd):
        try:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(5)
            s.connect(self.sock)
            s.sendall(cmd.encode() + b"\n")
            out = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    return out.decode()
                out += chunk
        except OSError:
            return ""
        finally:
            s.close()

    def servers(self):
        """{name: (addr, status)} of backend engines."""
        out = {}
        lines = self.cli("show stat engines 4 -1").splitlines()
        if not lines or not lines[0].startswith("# "):
            return out
        head = lines[0][2:].split(",")
        for line in lines[1:]:
            f = line.split(",")
            if len(f) >= len(head) - 1:
                row = dict(zip(head, f))
                out[row["svname"]] = (row["addr"], row["status"])
        return out

    def get(self, path="/generate"):
        """One request through HAProxy: (status, body); (None, why) when it
        failed below HTTP."""
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            c.request("GET", path)
            r = c.getresponse()
            body = r.read().decode()
            c.close()
            return r.status, body
        except OSError as e:
            return None, str(e)
