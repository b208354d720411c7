"""What the Python suites share: failing, skipping and waiting the same way,
and a real rdzvd on loopback started and stopped the same way. A suite puts
tests/lib on sys.path and imports what it needs."""
import os
import re
import signal
import socket
import subprocess
import time

WAIT_S = 20


class Fail(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def wait_for(pred, what, timeout=WAIT_S, step=0.02):
    """pred()'s first true value, polled every step seconds; Fail after timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise Fail("timed out after %gs waiting for %s" % (timeout, what))


def free_port():
    """A loopback port free now, for a listener that must be named before it
    starts (rdzvd's --http, a bind the test counts listeners on)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Rdzvd:
    """One real rdzvd, its state, log and endpoint file in workdir. It binds
    bind (default an ephemeral loopback port) and starts at once unless
    start=False; start() again after stop() restarts it on the endpoint it
    had, with the same state."""

    # Set before start(). prefix: words ahead of rdzvd on its command line
    # (taskset, ip netns exec); the ss that names a port's holder runs under
    # it too, so that it looks in rdzvd's network namespace. new_session:
    # rdzvd leads a process group of its own, for a harness that ends what it
    # started by process group (rdzvd's helpers with it) and handles the
    # terminal's Ctrl-C itself.
    prefix = ()
    new_session = False

    def __init__(self, exe, workdir, *extra, bind="tcp://127.0.0.1:*", state=None, start=True):
        self.exe = exe
        self.extra = list(extra)       # the flags after --bind, --endpoint-file, --state-dir
        self.state = state or os.path.join(workdir, "state")
        self.log_path = os.path.join(workdir, "rdzvd.log")
        self.ep_file = os.path.join(workdir, "endpoint")
        self.bind = bind
        self.proc = None
        self.endpoint = None
        self.log_mark = 0
        if start:
            self.start()

    def argv(self, bind, extra):
        return [*self.prefix, self.exe, "--bind", bind, "--endpoint-file", self.ep_file,
                "--state-dir", self.state, *extra]

    def spawn(self, bind=None, extra=None):
        """Starts rdzvd (with extra instead of its flags, if given) and
        returns its Popen without waiting for it."""
        if os.path.exists(self.ep_file):
            os.unlink(self.ep_file)
        self.log_mark = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(
                self.argv(bind or self.endpoint or self.bind, self.extra if extra is None else extra),
                stdout=subprocess.DEVNULL, stderr=log, start_new_session=self.new_session)
        return self.proc

    def start(self, bind=None, extra=None):
        """Starts rdzvd and waits until it serves; returns its endpoint."""
        p = self.spawn(bind, extra)

        def up():
            if p.poll() is not None:
                raise Fail("rdzvd exited %d at start: %s%s" % (
                    p.returncode, self.log_since().strip()[-400:], self._holders(bind or self.endpoint or self.bind)))
            if os.path.exists(self.ep_file):
                return open(self.ep_file).read().strip()
            return None
        self.endpoint = wait_for(up, "rdzvd to serve", step=0.005)
        return self.endpoint

    def _holders(self, bind):
        """Who holds a fixed port rdzvd could not bind, where ss can tell."""
        m = re.search(r":(\d+)$", bind or "")
        if not m or not os.path.exists("/usr/bin/ss"):
            return ""
        out = subprocess.run([*self.prefix, "ss", "-Htanp", "sport = :" + m.group(1)],
                             capture_output=True, text=True).stdout.strip()
        return "\nholding the port: " + out if out else ""

    def log(self):
        return open(self.log_path, errors="replace").read() if os.path.exists(self.log_path) else ""

    def log_since(self):
        """The log since the last start."""
        return self.log()[self.log_mark:]

    def stop(self, sig=signal.SIGTERM):
        """Signals rdzvd (SIGKILL after 10 s) and returns its exit status."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None

    def restart(self, sig=signal.SIGKILL):
        self.stop(sig)
        return self.start()
