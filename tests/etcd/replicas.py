"""rdzvd replicas on one etcd cluster, for the etcd suites: started, told
apart (which one leads), killed and started again the same way. Each
replica is a real rdzvd (tests/lib/rdzvtest.Rdzvd) on a loopback port with
its /readyz on a port of its own."""
import os
import subprocess
import urllib.request

import rdzvtest
from rdzvtest import Fail, free_port, wait_for

RDZVD = os.environ.get("RDZVD", "rdzvd")
RDZV = os.environ.get("RDZV", "rdzv")
# Short, so that twenty takeovers fit in a test; rdzvd's default is 5 s.
LEASE_S = 2


def http_status(port, path):
    """The HTTP status of GET path on 127.0.0.1:port, 0 if nothing answers."""
    return rdzvtest.http_status(f"http://127.0.0.1:{port}{path}")


def metrics(port):
    """/metrics as {name{labels}: value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


class Replica(rdzvtest.Rdzvd):
    """lease: --etcd-lease in seconds; None leaves rdzvd's default."""

    def __init__(self, workdir, endpoints, prefix, *extra, lease=LEASE_S):
        os.makedirs(workdir, exist_ok=True)
        self.http_port = free_port()
        lease_flags = ("--etcd-lease", str(lease)) if lease is not None else ()
        super().__init__(RDZVD, workdir, "--etcd", endpoints, "--etcd-prefix", prefix,
                         *lease_flags, "--http", str(self.http_port),
                         "--no-nccl", *extra, start=False)

    def ready(self):
        return self.proc is not None and self.proc.poll() is None \
            and http_status(self.http_port, "/readyz") == 200

    def alive(self):
        return self.proc is not None and self.proc.poll() is None


class Replicas:
    """n rdzvd on etcd endpoints, under prefix; start() waits until one leads."""

    def __init__(self, workdir, endpoints, n=3, prefix="/rdzv-test", extra=(), lease=LEASE_S):
        self.all = [Replica(os.path.join(workdir, f"rdzvd{i}"), endpoints, prefix, *extra,
                            lease=lease)
                    for i in range(n)]

    def start(self):
        for r in self.all:
            r.start()
        return self.wait_leader()

    def servers(self):
        """The --server list of every replica."""
        return ",".join(r.endpoint for r in self.all)

    def leader(self):
        """The replica whose /readyz says 200, or None."""
        ready = [r for r in self.all if r.ready()]
        if len(ready) > 1:
            raise Fail("two replicas are ready at once: %s" % [r.endpoint for r in ready])
        return ready[0] if ready else None

    def wait_leader(self, timeout=30, other_than=None):
        return wait_for(lambda: (lambda r: r if r and r is not other_than else None)(self.leader()),
                        "a replica to lead", timeout=timeout, step=0.02)

    def stop(self):
        for r in self.all:
            r.stop()


def rdzv(*args, timeout=60, env=None):
    """Runs the rdzv CLI; (exit status, stdout, stderr)."""
    p = subprocess.run([RDZV, *args], capture_output=True, text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr


def spawn_join(servers, group, world, rank, timeout=60):
    """An `rdzv join` of one rank, started; its Popen (stdout, stderr piped)."""
    return subprocess.Popen([RDZV, "join", "--server", servers, "--group", group, "--world",
                             str(world), "--rank", str(rank), "--timeout", str(timeout)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def skipped():
    """Prints the skip plan and returns True where etcd is missing (the
    test then exits with rdzvtest.SKIP)."""
    import etcd_cluster
    have, why = etcd_cluster.etcd_available()
    if not have:
        rdzvtest.skip_all(why)
    return not have
