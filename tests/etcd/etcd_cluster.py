"""A real etcd cluster on loopback, for the tests of rdzvd's etcd journal.

The journal's guarantees (fenced appends, one active replica) only mean
something against the etcd that runs in production: quorum loss, a member
killed mid-write, a leader change. A fake would answer what we expect it to,
so the tests start real members of /usr/bin/etcd (Debian's etcd-server,
3.4) and talk to them the way rdzvd does, through the JSON gateway.

    with EtcdCluster(3) as c:
        rdzvd --etcd c.endpoints ...
        c.kill(0); c.put("/k", "v"); c.get("/k") == b"v"; c.start(0)

Everything stays on 127.0.0.1 and in one temporary directory. Members run
in process groups of their own, and die with the test however it ends:
__exit__, atexit, SIGTERM (the test runner's timeout) and, through
PR_SET_PDEATHSIG, even a SIGKILL of the test itself. Standard library only.
"""
import atexit
import base64
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ETCD = os.environ.get("ETCD", "/usr/bin/etcd")

# Raft timing for a loaded two-core test machine: etcd's defaults (100/1000),
# which hold there; tighter values risk elections only because a build runs.
HEARTBEAT_MS = 100
ELECTION_MS = 1000
START_TIMEOUT_S = 30
REQUEST_TIMEOUT_S = 5
INT_FIELDS = ("create_revision", "mod_revision", "version", "lease")   # of a kv, int64


class EtcdClusterError(Exception):
    """The cluster did not come up, or a member could not be started."""


class GatewayError(Exception):
    """A JSON-gateway request failed: etcd's error (status is the HTTP code,
    code the gRPC code, message etcd's text), or none came back (status and
    code are None, message says why: refused, timed out)."""

    def __init__(self, path, message, status=None, code=None):
        where = f" (HTTP {status}, gRPC code {code})" if status else ""
        super().__init__(f"{path}: {message}{where}")
        self.path, self.message, self.status, self.code = path, message, status, code


def etcd_available(exe=ETCD):
    """(True, "") when exe can run a member, else (False, why), so a test
    can print "1..0 # SKIP ..." instead of failing where etcd is absent."""
    if not os.path.exists(exe):
        return False, "etcd-server not installed"
    if not os.access(exe, os.X_OK):
        return False, f"{exe} is not executable"
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"{exe} --version: {e}"
    if "etcd Version: 3." not in out:
        return False, f"{exe} is not etcd 3: {out.strip()[:80]}"
    return True, ""


def b64(data):
    """etcd's JSON gateway carries keys and values as base64 of the bytes."""
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def unb64(text):
    return base64.b64decode(text or "")


def prefix_end(prefix):
    """The range_end that makes [prefix, end) every key starting with prefix:
    the prefix with its last byte below 0xff incremented ("\\0" means to the
    end of the keyspace, etcd's convention)."""
    p = bytearray(prefix.encode() if isinstance(prefix, str) else prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return b"\0"
    p[-1] += 1
    return bytes(p)


def free_ports(n):
    """n distinct loopback ports free now. All are held at once while picking,
    so none repeats; another process may still take one before etcd binds it,
    which start() notices and answers with new ports once."""
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


_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """Run in the child before exec: SIGKILL when the thread that started it
    dies, so that a test killed outright (SIGKILL, OOM) leaves no member."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _kill_group(proc, sig):
    """Signals proc's whole process group (the member leads its own)."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _error_of(text):
    """(message, gRPC code) of an error body. Unary calls answer
    {"error": "...", "message": "...", "code": 14}; streaming ones (watch,
    lease/keepalive, election/observe) {"error": {"grpc_code": 14,
    "http_code": 503, "message": "...", "http_status": "..."}}."""
    try:
        doc = json.loads(text)
    except ValueError:
        return text.strip(), None
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict):
        return err.get("message", text.strip()), err.get("grpc_code")
    return doc.get("message") or err or text.strip(), doc.get("code")


class Member:
    """One etcd member: its name, URLs, data dir, log, and the process while
    one runs. The URLs stay the same across restarts: the other members know
    it by its peer URL."""

    def __init__(self, index, workdir, client_port, peer_port):
        self.index = index
        self.name = f"m{index}"
        self.client_url = f"http://127.0.0.1:{client_port}"
        self.peer_url = f"http://127.0.0.1:{peer_port}"
        self.data_dir = os.path.join(workdir, self.name + ".data")
        self.log_path = os.path.join(workdir, self.name + ".log")
        self.proc = None

    def argv(self, exe, initial_cluster, token, extra):
        """The command line, the same at first start and at restart: etcd
        reads --initial-cluster* only while its data dir is empty, and
        otherwise rejoins as the member its WAL says it is."""
        return [exe, "--name", self.name, "--data-dir", self.data_dir,
                "--listen-client-urls", self.client_url, "--advertise-client-urls", self.client_url,
                "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls", self.peer_url,
                "--initial-cluster", initial_cluster, "--initial-cluster-state", "new",
                "--initial-cluster-token", token,
                "--heartbeat-interval", str(HEARTBEAT_MS), "--election-timeout", str(ELECTION_MS),
                # A restarted member asks before it calls an election, so that
                # rejoining does not depose a working leader (3.5's default).
                "--pre-vote=true",
                "--logger", "zap", "--log-outputs", "stderr", *extra]

    def spawn(self, argv):
        with open(self.log_path, "a") as log:
            log.write(f"--- start {time.strftime('%H:%M:%S')}: {' '.join(argv)}\n")
            log.flush()
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True, preexec_fn=_die_with_parent)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig=signal.SIGKILL, wait_s=10):
        """Signals the member's process group and reaps it (SIGKILL after
        wait_s if sig did not end it)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            _kill_group(self.proc, sig)
            try:
                self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                _kill_group(self.proc, signal.SIGKILL)
                self.proc.wait()
        # The group may outlive its leader; etcd forks nothing, but be sure.
        _kill_group(self.proc, signal.SIGKILL)
        return self.proc.returncode

    def healthy(self, timeout=2):
        """Whether GET /health says {"health":"true"}: in 3.4 that is a
        linearizable read through raft, so false without a quorum."""
        try:
            with urllib.request.urlopen(self.client_url + "/health", timeout=timeout) as r:
                return json.loads(r.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    def log_tail(self, lines=15, head=4):
        """The log of the last start, for a failure message: its first head
        lines (where etcd says why it will not start, ahead of its usage
        text) and its last lines."""
        try:
            with open(self.log_path, errors="replace") as f:
                text = f.readlines()
        except OSError:
            return "(no log)\n"
        starts = [n for n, line in enumerate(text) if line.startswith("--- start ")]
        text = text[starts[-1]:] if starts else text
        if len(text) > head + lines + 1:
            text = text[:head + 1] + ["...\n"] + text[-lines:]
        return "".join(text)

    def bind_failed(self):
        """Whether the last start died because a port was taken."""
        return not self.running() and "address already in use" in self.log_tail(40)


_live = set()   # every cluster not yet stopped, for atexit and SIGTERM


def _stop_live():
    for c in list(_live):
        c.stop_all()


def _on_sigterm(signum, frame):
    """The test runner's timeout: stop the members, then die of the signal
    as the runner expects. The logs stay, for what went slow."""
    for c in list(_live):
        c.stop_all()
        c.note_kept()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


atexit.register(_stop_live)


def _install_sigterm():
    """Stops the members on SIGTERM, unless the test handles it itself."""
    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:      # not the main thread
        pass


class EtcdCluster:
    """members etcd members on loopback, started by __enter__ (or start_all)
    and healthy when it returns, all stopped by __exit__ (or stop_all).

    workdir holds each member's data dir and log (m0.data, m0.log, ...); by
    default a temporary directory, removed by __exit__ unless keep=True or
    an exception ended the with: the member logs are then worth reading,
    and stderr says where they are. extra: more etcd flags for every
    member. Members are started from the calling thread, and die with it
    (PR_SET_PDEATHSIG)."""

    def __init__(self, members=3, workdir=None, exe=ETCD, extra=(), keep=False,
                 start_timeout=START_TIMEOUT_S):
        self.exe, self.extra, self.start_timeout = exe, list(extra), start_timeout
        self.own_workdir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="etcd-cluster-")
        os.makedirs(self.workdir, exist_ok=True)
        self.keep = keep
        self.token = f"rdzv-test-{os.getpid()}-{time.monotonic_ns()}"
        self.count = members
        self.members = []
        self._new_members()

    # --- the cluster's life

    def _new_members(self):
        ports = free_ports(2 * self.count)
        self.members = [Member(i, self.workdir, ports[2 * i], ports[2 * i + 1])
                        for i in range(self.count)]

    @property
    def initial_cluster(self):
        return ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    @property
    def endpoints(self):
        """Every member's client URL, comma-separated, as rdzvd --etcd takes them."""
        return ",".join(m.client_url for m in self.members)

    def member(self, i):
        return self.members[i]

    def __enter__(self):
        self.start_all()
        return self

    def __exit__(self, *exc):
        self.stop_all()
        if self.own_workdir and not self.keep and exc[0] is None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        elif exc[0] is not None:
            self.note_kept()
        return False

    def note_kept(self):
        print(f"etcd_cluster: the member logs are kept in {self.workdir}", file=sys.stderr, flush=True)

    def start_all(self):
        """Starts every member and waits until all are healthy. A port taken
        between picking and binding costs one retry with new ports."""
        _install_sigterm()
        _live.add(self)
        for attempt in (1, 2):
            try:
                for m in self.members:
                    m.spawn(self._argv(m))
                self.wait_healthy(range(self.count), self.start_timeout)
                return self
            except EtcdClusterError:
                if attempt == 1 and any(m.bind_failed() for m in self.members):
                    self._restart_fresh()
                    continue
                self.stop_all()
                raise
            except BaseException:   # no __exit__ follows a failed __enter__
                self.stop_all()
                raise

    def _restart_fresh(self):
        """Throws the half-started cluster away for one on new ports."""
        self.stop_all()
        _live.add(self)
        for m in self.members:
            shutil.rmtree(m.data_dir, ignore_errors=True)
        self._new_members()
        self.token += "-retry"

    def _argv(self, m):
        return m.argv(self.exe, self.initial_cluster, self.token, self.extra)

    def start(self, i, wait=True, timeout=None):
        """Restarts stopped member i on its data dir, same URLs and flags.
        With wait, returns once it is healthy, which needs a quorum running:
        pass wait=False for a member that cannot have one yet."""
        m = self.members[i]
        if m.running():
            raise EtcdClusterError(f"member {i} is already running")
        m.spawn(self._argv(m))
        _live.add(self)
        if wait:
            self.wait_healthy([i], timeout or self.start_timeout)
        return m

    def kill(self, i, sig=signal.SIGKILL):
        """Signals member i (SIGKILL by default: a crash, no goodbye to its
        peers) and reaps it; returns its exit status."""
        return self.members[i].kill(sig)

    def stop_all(self):
        """Kills every member still running. Safe to call again."""
        for m in self.members:
            m.kill(signal.SIGKILL)
        _live.discard(self)

    def running_members(self):
        return [m.index for m in self.members if m.running()]

    def healthy_members(self):
        """The indices of the members whose /health says true now."""
        return [m.index for m in self.members if m.running() and m.healthy()]

    def wait_healthy(self, indices=None, timeout=START_TIMEOUT_S):
        """Waits until members indices (default: every running one) are
        healthy; EtcdClusterError with each member's log tail if not within
        timeout, or as soon as one of them has exited."""
        indices = list(self.running_members() if indices is None else indices)
        end = time.monotonic() + timeout
        while True:
            dead = [i for i in indices if not self.members[i].running()]
            if not dead and all(self.members[i].healthy() for i in indices):
                return
            if dead or time.monotonic() > end:
                why = f"member(s) {dead} exited" if dead else f"not healthy within {timeout:g} s"
                raise EtcdClusterError(f"etcd cluster in {self.workdir}: {why}\n" + self.log_tails())
            time.sleep(0.1)

    def log_tails(self, lines=15):
        """Each member's last log lines, for a failure message."""
        out = []
        for m in self.members:
            state = ("running" if m.running() else
                     f"exited {m.proc.returncode}" if m.proc else "never started")
            out.append(f"--- {m.name} ({state}, {m.client_url}) {m.log_path}:\n{m.log_tail(lines)}")
        return "".join(out)

    def leader(self):
        """The index of the raft leader as the running members see it, or
        None (no leader, or none answers): for a test that means to kill the
        leader and not a follower."""
        ids, leader_id = {}, None
        for i in self.running_members():
            try:
                st = self.call("maintenance/status", {}, member=i, timeout=2)
            except GatewayError:
                continue
            ids[st["header"]["member_id"]] = i
            leader_id = leader_id or st.get("leader")
        return ids.get(leader_id)

    # --- the JSON gateway, for tests that look at what rdzvd wrote

    def call(self, path, body, member=None, timeout=REQUEST_TIMEOUT_S):
        """POSTs body (a dict) to /v3/path (e.g. "kv/range") and returns the
        decoded answer. member picks one; by default the running members are
        tried in order until one answers, so a killed member is skipped.
        GatewayError when etcd refuses or no member answers in time. For
        calls with one answer: lease/keepalive gives {"result": ...} and
        ends, but watch and election/observe stream until cut (curl them)."""
        targets = [member] if member is not None else self.running_members()
        if not targets:
            raise GatewayError(path, "no member running")
        err = None
        for i in targets:
            try:
                return self._post(self.members[i].client_url, path, body, timeout)
            except GatewayError as e:
                if e.status is not None:
                    raise        # etcd answered: trying elsewhere would not change it
                err = e
        raise err

    @staticmethod
    def _post(url, path, body, timeout):
        req = urllib.request.Request(f"{url}/v3/{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            message, code = _error_of(text)
            raise GatewayError(path, message, e.code, code)
        except (OSError, ValueError) as e:     # refused, reset, timed out, not JSON
            raise GatewayError(path, f"{url}: {getattr(e, 'reason', e)}")

    def put(self, key, value, member=None, timeout=REQUEST_TIMEOUT_S, lease=None):
        """Writes key=value (str or bytes); returns the revision it made."""
        body = {"key": b64(key), "value": b64(value)}
        if lease:
            body["lease"] = str(lease)
        return int(self.call("kv/put", body, member, timeout)["header"]["revision"])

    def range(self, key, range_end=None, member=None, timeout=REQUEST_TIMEOUT_S):
        """The keys in [key, range_end) (just key without range_end), each a
        dict: key (str), value (bytes), and create_revision, mod_revision,
        version, lease as ints (the gateway sends int64 as strings, and
        leaves out the ones that are 0)."""
        body = {"key": b64(key)}
        if range_end is not None:
            body["range_end"] = b64(range_end)
        doc = self.call("kv/range", body, member, timeout)
        return [{"key": unb64(kv["key"]).decode(errors="surrogateescape"),
                 "value": unb64(kv.get("value")),
                 **{f: int(kv.get(f, 0)) for f in INT_FIELDS}}
                for kv in doc.get("kvs", [])]       # no "kvs" at all when nothing matched

    def get(self, key, member=None, timeout=REQUEST_TIMEOUT_S):
        """key's value (bytes), or None when it is absent."""
        kvs = self.range(key, None, member, timeout)
        return kvs[0]["value"] if kvs else None

    def get_prefix(self, prefix, member=None, timeout=REQUEST_TIMEOUT_S):
        """[(key, value)] for every key starting with prefix, in etcd's key
        (byte) order: a list rather than a dict, so that the order a journal
        relies on is the one the test sees. dict(...) of it for lookups."""
        kvs = self.range(prefix, prefix_end(prefix), member, timeout)
        return [(kv["key"], kv["value"]) for kv in kvs]
