"""What the Python tests share: one way to report (a TAP line per case as it
finishes, and the exit status meson's default protocol reads: 0 pass, 77
skip, 1 fail), to fail, skip and wait, and a real rdzvd on loopback started
and stopped the same way. Meson puts tests/lib on PYTHONPATH (each
tests/*/meson.build passes env); a test imports what it needs.

    report = rdzvtest.Report()
    report.case("name", fn, *args)    # fn passes by returning, skips by Skip
    report.ok(cond, "name", why)      # or checks reported as they happen
    sys.exit(report.done())"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request

WAIT_S = 20
PASS, FAIL, SKIP = 0, 1, 77        # meson's exit-code protocol


class Fail(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def note(text):
    """Lines of text as TAP comments: figures and logs beside the results."""
    for line in str(text).rstrip().splitlines():
        print("# " + line, flush=True)


class Report:
    """Each case's result as one TAP line, printed when it is known (a hang
    still shows how far a run got), and the exit status meson reads. With a
    plan, the cases never reached count as failed."""

    def __init__(self, plan=None):
        self.plan, self.n, self.passed, self.failed = plan, 0, 0, 0
        self.skipped_all = None
        if plan is not None:
            print("1..%d" % plan, flush=True)

    def ok(self, cond, name, why=""):
        """A case passed if cond holds; why explains a failure."""
        self.n += 1
        if cond:
            self.passed += 1
        else:
            self.failed += 1
        print("%sok %d - %s" % ("" if cond else "not ", self.n, name), flush=True)
        if not cond and why not in ("", None):
            note(str(why)[:8000])
        return cond

    def skip(self, name, why):
        self.n += 1
        print("ok %d - %s # SKIP %s" % (self.n, name, why), flush=True)

    def note(self, text):
        note(text)

    def case(self, name, fn, *args):
        """fn(*args) as the case name: it passes by returning (a string it
        returns is shown after the name), skips by raising Skip, and fails
        by raising anything else."""
        try:
            got = fn(*args)
        except Skip as e:
            self.skip(name, e)
            return
        except Exception as e:      # a failing case must not stop the others
            self.ok(False, name, s_why(e, e.__traceback__.tb_next))
            return
        self.ok(True, name + (" (%s)" % got if isinstance(got, str) and got else ""))

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        """A run whose checks report themselves: an exception ends it as one
        failed case; Skip skips it all if nothing was reported yet."""
        if kind is None or not issubclass(kind, Exception):
            return False
        if isinstance(e, Skip):
            if self.n == 0 and self.plan is None:
                self.skip_all(e)
            else:
                note("skipped the rest: %s" % e)
        else:
            self.ok(False, str(e) if isinstance(e, Fail) else "%s: %s" % (kind.__name__, e),
                    "" if isinstance(e, Fail) else s_why(e, tb))
        return True

    def skip_all(self, why):
        self.skipped_all = why
        print("1..0 # SKIP %s" % why, flush=True)
        return SKIP

    def done(self, why=""):
        """The exit status: FAIL if any case failed, SKIP if none passed,
        else PASS. With a plan, each case not reached fails (why says why)."""
        if self.plan is None and self.skipped_all is None:
            print("1..%d" % self.n, flush=True)
        while self.plan is not None and self.n < self.plan:
            self.ok(False, "not reached", why)
            why = ""
        return FAIL if self.failed else SKIP if not self.passed else PASS


def s_why(e, tb):
    """What a failure says: a Fail its message, anything else its traceback
    from tb on."""
    if isinstance(e, Fail):
        return str(e)
    return "".join(traceback.format_exception(type(e), e, tb))


def skip_all(why):
    """For a test that cannot run here at all: a skip plan, SKIP to exit with."""
    return Report().skip_all(why)


def run(cases, *args):
    """Runs [(name, fn)] in order, fn(*args) each, one line each; the exit
    status."""
    report = Report(len(cases))
    for name, fn in cases:
        report.case(name, fn, *args)
    return report.done()


def choose(cases, parser=None):
    """The command line of a file whose cases meson runs one at a time:
    `PROG list` prints the names (for meson.build's foreach) and returns
    None; `PROG CASE [options]` returns parser's options with .case set."""
    if sys.argv[1:] == ["list"]:
        print("\n".join(cases))
        return None
    parser = parser or argparse.ArgumentParser()
    parser.add_argument("case", choices=list(cases))
    return parser.parse_args()


def wait_for(pred, what, timeout=WAIT_S, step=0.02):
    """pred()'s first true value, polled every step seconds; Fail after timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise Fail("timed out after %gs waiting for %s" % (timeout, what))


def free_ports(n):
    """n distinct loopback ports free now, for listeners that must be named
    before they start (rdzvd's --http, etcd's members). All are held while
    picking, so none repeats; another process may still take one first."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port():
    return free_ports(1)[0]


def http_get(url, token=None, timeout=5):
    """The body of GET url (with a bearer token), "" if it fails."""
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read().decode(errors="replace")
    except OSError:
        return ""


def http_status(url, token=None, timeout=2):
    """The HTTP status of GET url (with a bearer token), 0 if nothing answers."""
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def group_status(rdzv, endpoint, group):
    """group's status object, as `rdzv status --json` prints it; None while
    rdzvd has no such group (not_found)."""
    p = subprocess.run([rdzv, "status", "--json", "--server", endpoint, "--group", group],
                       capture_output=True, text=True, timeout=20)
    if p.returncode == 4 and "not_found" in p.stderr:
        return None
    check(p.returncode == 0, "rdzv status: exit %d: %s" % (p.returncode, p.stderr.strip()))
    return json.loads(p.stdout)["groups"][0]


def until_status(rdzv, endpoint, group, pred, what, timeout=30):
    """Waits until the group exists and pred(its status) holds: (that status,
    seconds waited)."""
    t0 = time.monotonic()
    got = wait_for(lambda: (lambda s: s if s is not None and pred(s) else None)(
        group_status(rdzv, endpoint, group)), what, timeout=timeout, step=0.1)
    return got, time.monotonic() - t0


def health_agent_argv(rdzv, endpoint, workdir, rank, shim, base, interval, engine):
    """`rdzv agent` for rank of world-2 group g on node host-a, checking the
    health of its engine (python -c engine, under the shim) every interval
    seconds; its socket in workdir, its plan in [base, base + 512]."""
    return [rdzv, "agent", "--server", endpoint, "--group", "g", "--world", "2",
            "--rank", str(rank), "--host", "127.0.0.1", "--node", "host-a",
            "--socket", os.path.join(workdir, "a%d.sock" % rank), "--shim", shim,
            "--port-range", "%d-%d" % (base, base + 512), "--heartbeat", "1",
            "--health-interval", str(interval), "--", sys.executable, "-c", engine]


def stop_agent(proc, timeout=20):
    """Stops an `rdzv agent` and the CMD it runs: SIGTERM (the agent passes
    it on), then SIGKILL to both after timeout. An agent killed outright
    would leave its engine running, holding the ports of the next test."""
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                              text=True).stdout.split()
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pid in children:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


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
