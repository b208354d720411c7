#!/usr/bin/env python3
"""The rdzv Python package against a real rdzvd on loopback: ranks joining
from threads, every field of the JSON assignment, KV, status, heartbeat,
refusals as exceptions with the server's code, `python -m rdzv join`, and
the torchrun entry point. One line per case (rdzvtest).

    test_python_package.py --rdzvd PATH [--expect-libdir DIR] [--unfound-install DIR]

Run from the source tree (PYTHONPATH=python:tests/lib, RDZV_LIBRARY=the
built librdzv) or, under `env -i`, by a venv's python that has the package
installed (python_package_test.sh); --expect-libdir then checks where
librdzv was found."""
import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import rdzv
import rdzv._library
from rdzv.errors import ERR_REFUSED, ERR_TIMEOUT, ERR_USAGE

try:
    import rdzvtest
except ImportError:     # python_package_test.sh: a venv under env -i, no PYTHONPATH on purpose
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
    import rdzvtest

CASES = []


def case(fn):
    CASES.append(fn)
    return fn


class Server(rdzvtest.Rdzvd):
    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory()
        super().__init__(ARGS.rdzvd, self.tmp.name, "--no-nccl", "--no-fsync",
                         "--router-allow", "http://127.0.0.1:9")

    def close(self):
        self.stop()
        self.tmp.cleanup()


def join_all(endpoint, group, world, ranks=None, members=False, **kw):
    """Joins ranks from one thread each; returns {rank: Assignment or RdzvError}."""
    results = {}

    def one(r):
        with rdzv.Client(endpoint, members=members) as c:
            try:
                results[r] = c.join(group, world, r, timeout=20, **kw)
            except rdzv.RdzvError as e:
                results[r] = e

    threads = [threading.Thread(target=one, args=(r,)) for r in (ranks or range(world))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


@case
def two_ranks_join_from_threads(srv):
    got = join_all(srv.endpoint, "py", 2, host="127.0.0.1", node="n")
    a0, a1 = got[0], got[1]
    assert isinstance(a0, rdzv.Assignment) and isinstance(a1, rdzv.Assignment), got
    assert (a0.rank, a1.rank) == (0, 1) and a0.world == a1.world == 2
    assert a0.group == "py" and a0.epoch == a1.epoch == 1
    assert a0.master_addr == a1.master_addr == "127.0.0.1"
    assert a0.master_port == a1.master_port == a0.ports[0]
    assert len(a0.ports) == len(a1.ports) == 32
    assert not set(a0.ports) & set(a1.ports), "one node: plans must be disjoint"
    assert a0.members == [], "no members list unless asked for"
    assert (a0.local_rank, a1.local_rank, a0.local_world) == (0, 1, 2), \
        (a0.local_rank, a1.local_rank, a0.local_world)
    got = join_all(srv.endpoint, "py-members", 2, host="127.0.0.1", node="n", members=True)
    assert got[0].members == [rdzv.Member(0, "127.0.0.1", "n"), rdzv.Member(1, "127.0.0.1", "n")], \
        got[0].members
    assert a0.nccl_unique_id is None and a0.nccl_id is None and a0.nccl_unique_ids == []
    assert a1.env["RDZV_RANK"] == "1" and a1.env["VLLM_PORT"] == str(a1.ports[10])
    assert a1.named_ports == rdzv.NamedPorts(a0.ports[0], a0.ports[1], (a1.ports[10], a1.ports[31]),
                                             a1.ports[2])
    assert (a0.group_rank, a1.group_rank, a1.group_world) == (0, 0, 1)
    assert a1.port_range is not None and a1.port_range[0] <= a1.ports[0]
    assert a1.vllm_args == ["--data-parallel-size", "2", "--data-parallel-rank", "1",
                            "--data-parallel-address", "127.0.0.1",
                            "--data-parallel-rpc-port", str(a0.ports[1]),
                            "--port", str(a1.ports[2])], a1.vllm_args
    assert '"rank":1' in a1.json


@case
def group_resize(srv):
    join_all(srv.endpoint, "rs", 2)
    with rdzv.Client(srv.endpoint) as c:
        assert c.group_resize("rs", 2) == 1          # its own world: nothing changes
        assert c.group_resize("rs", 3) == 2
        g = c.status("rs")[0]
        assert (g["world"], g["epoch"], g["complete"]) == (3, 2, False), g
        try:
            c.group_resize("rs", 4)
            raise AssertionError("a resize of a forming group was taken")
        except rdzv.Refused as e:
            assert e.code == "bad_request" and "forming" in str(e), (e.code, str(e))


@case
def router_names_the_groups_router(srv):
    try:
        rdzv.Client(srv.endpoint, router="ftp://x")
        raise AssertionError("a malformed router URL was taken")
    except rdzv.UsageError as e:
        assert "unknown scheme" in str(e), e
    with rdzv.Client(srv.endpoint, router="http://127.0.0.1:9") as c:
        c.join("routed", 1, 0, timeout=20)
        status = c.status("routed")
    assert status[0]["router"] == "http://127.0.0.1:9", status


@case
def every_json_field_is_an_attribute(srv):
    a = join_all(srv.endpoint, "fields", 1, members=True)[0]
    doc = json.loads(a.json)
    missing = [k for k in doc if not hasattr(a, k)]
    assert not missing, "the JSON assignment has fields the dataclass lacks: %s" % missing
    for k in ("group", "epoch", "rank", "world", "master_addr", "master_port", "ports",
              "local_rank", "local_world", "group_rank", "group_world"):
        assert getattr(a, k) == doc[k], (k, getattr(a, k), doc[k])


@case
def kv_put_get_wait(srv):
    a = join_all(srv.endpoint, "kv", 1)[0]
    with rdzv.Client(srv.endpoint) as c, rdzv.Client(srv.endpoint) as w:
        box = {}
        t = threading.Thread(target=lambda: box.update(v=w.kv_wait("kv", a.epoch, "k", 20)))
        t.start()
        time.sleep(0.2)
        c.kv_put("kv", a.epoch, "k", "v\u00e9")
        t.join(30)
        assert box.get("v") == "v\u00e9", box
        assert c.kv_get("kv", a.epoch, "k") == "v\u00e9"
        try:
            c.kv_get("kv", a.epoch, "missing")
            raise AssertionError("kv_get of a missing key succeeded")
        except rdzv.Refused as e:
            assert e.result == ERR_REFUSED and e.code == "not_found", (e.result, e.code)


@case
def status_lists_the_group(srv):
    join_all(srv.endpoint, "st", 2)
    with rdzv.Client(srv.endpoint) as c:
        groups = c.status("st")
        assert len(groups) == 1 and groups[0]["group"] == "st", groups
        assert groups[0]["world"] == 2 and groups[0]["joined"] == [0, 1]
        assert "st" in [g["group"] for g in c.status()]
        c.group_delete("st")
        try:
            c.status("st")
            raise AssertionError("status of a deleted group succeeded")
        except rdzv.Refused as e:
            assert e.code == "not_found"


def join_threads(joins):
    """Runs client.join(*args) for each (client, args) from a thread of its own;
    returns the Assignments (or RdzvErrors) in order."""
    results = [None] * len(joins)

    def one(i, client, args):
        try:
            results[i] = client.join(*args, timeout=20)
        except rdzv.RdzvError as e:
            results[i] = e

    threads = [threading.Thread(target=one, args=(i, c, a)) for i, (c, a) in enumerate(joins)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


@case
def heartbeat_and_stale_epoch(srv):
    with rdzv.Client(srv.endpoint) as c0, rdzv.Client(srv.endpoint) as c1, \
            rdzv.Client(srv.endpoint) as c1_new:
        a0, _ = join_threads([(c0, ("hb", 2, 0)), (c1, ("hb", 2, 1))])
        assert c0.heartbeat("hb", 0, a0.epoch) == a0.epoch
        assert c0.heartbeat("hb", 0, a0.epoch, serving=True) == a0.epoch
        c1.heartbeat("hb", 1, a0.epoch, serving=False)
        g = c0.status("hb")[0]
        assert [m["serving"] for m in g["members"]] == [True, False], g
        assert g["state"] == "complete" and g["not_serving"] == [1], g
        # Rank 1 comes back as a new process (new session): epoch 2 forms.
        box = {}
        t = threading.Thread(target=lambda: box.update(a=c1_new.join("hb", 2, 1, timeout=20)))
        t.start()
        # The new session's join has reached rdzvd once epoch 2 forms.
        deadline = time.time() + 30
        while c0.status("hb")[0]["epoch"] == a0.epoch and time.time() < deadline:
            time.sleep(0.05)
        try:
            c0.heartbeat("hb", 0, a0.epoch)
            raise AssertionError("heartbeat of a past epoch succeeded")
        except rdzv.Refused as e:
            assert e.code == "stale_epoch", (e.code, str(e))
        again = c0.join("hb", 2, 0, timeout=20)
        t.join(30)
        assert again.epoch == box["a"].epoch == 2, (again, box)


@case
def refusal_and_timeout(srv):
    with rdzv.Client(srv.endpoint) as c:
        try:
            c.join("bad", 2, 5, timeout=5)
            raise AssertionError("rank 5 of 2 joined")
        except rdzv.UsageError as e:
            assert e.result == ERR_USAGE and isinstance(e, ValueError), (e.result, str(e))
        c.join("wm", 1, 0, timeout=5)
        try:
            c.join("wm", 2, 1, timeout=5)
            raise AssertionError("a join with another world size was accepted")
        except rdzv.Refused as e:
            assert e.result == ERR_REFUSED and e.code == "world_mismatch", (e.result, e.code)
        start = time.time()
        try:
            c.join("alone", 2, 0, timeout=1)
            raise AssertionError("a group of 2 formed with one rank")
        except rdzv.Timeout as e:
            assert e.result == ERR_TIMEOUT and isinstance(e, TimeoutError), (e.result, str(e))
        assert time.time() - start < 10


@case
def session_resumes(srv):
    with rdzv.Client(srv.endpoint) as c:
        first = c.join("solo", 1, 0, timeout=5)
        session = c.session
    assert session
    with rdzv.Client(srv.endpoint, session=session) as again:
        assert again.session == session
        assert again.join("solo", 1, 0, timeout=5).epoch == first.epoch


@case
def bad_endpoint_and_closed_client(srv):
    try:
        rdzv.Client("not an endpoint").join("g", 1, 0, timeout=1)
        raise AssertionError("a bad endpoint worked")
    except rdzv.RdzvError:
        pass
    c = rdzv.Client(srv.endpoint)
    c.close()
    c.close()
    try:
        c.status()
        raise AssertionError("a closed client worked")
    except rdzv.UsageError as e:
        assert e.result == ERR_USAGE


# rdzvd's port when an endpoint names none (docs/python.md; the rdzv CLI's,
# and torchrun's default for --rdzv-endpoint HOST).
RDZVD_PORT = 29400


@case
def endpoint_without_port(srv):
    """A server named without a port gets rdzvd's 29400, as `rdzv join
    --server HOST` and torchrun's --rdzv-endpoint HOST mean it, whether
    the name is bare or a tcp:// URL, alone or in a list of replicas."""
    # librdzv makes its ZeroMQ socket at once: a URL it cannot use fails here.
    with rdzv.Client("tcp://127.0.0.1") as c:
        assert c.endpoint == "tcp://127.0.0.1:%d" % RDZVD_PORT, c.endpoint
    for given in ("127.0.0.1", "tcp://127.0.0.1"):     # --rdzv-endpoint, as torchrun passes it
        h = handler(srv, "ep", endpoint=given)
        assert h._client.endpoint in ("127.0.0.1", "tcp://127.0.0.1:%d" % RDZVD_PORT), \
            h._client.endpoint
        h.shutdown()
    h = handler(srv, "ep", endpoint="")              # no --rdzv-endpoint: this host
    assert h._client.endpoint == "127.0.0.1:%d" % RDZVD_PORT, h._client.endpoint
    h.shutdown()
    norm = rdzv.client.normalize_endpoint
    for given, want in (("tcp://rdzvd", "tcp://rdzvd:%d" % RDZVD_PORT),
                        ("tcp://10.0.0.1:7", "tcp://10.0.0.1:7"),
                        ("tcp://[fd00::1]", "tcp://[fd00::1]:%d" % RDZVD_PORT),
                        ("tcp://[fd00::1]:7", "tcp://[fd00::1]:7"),
                        ("tcp://fd00::1", "tcp://[fd00::1]:%d" % RDZVD_PORT),
                        ("rdzvd", "rdzvd"), ("rdzvd:7", "rdzvd:7"),
                        ("ipc:///run/rdzv.sock", "ipc:///run/rdzv.sock"),
                        ("tcp://a, tcp://b:7,c", "tcp://a:%d,tcp://b:7,c" % RDZVD_PORT)):
        assert norm(given) == want, (given, norm(given), want)


@case
def endpoint_without_port_joins(srv):
    """Against an rdzvd on port 29400 (of 127.0.0.2, which loopback also
    answers, so that an rdzvd a user runs on 127.0.0.1:29400 is left
    alone): a Client of tcp://HOST and a torchrun handler of
    --rdzv-endpoint HOST join it."""
    import socket
    port = RDZVD_PORT
    probe = socket.socket()
    try:
        probe.bind(("127.0.0.2", port))
    except OSError as e:
        raise rdzvtest.Skip("127.0.0.2:%d is taken here (%s)" % (port, e))
    finally:
        probe.close()
    with tempfile.TemporaryDirectory() as tmp:
        d = rdzvtest.Rdzvd(ARGS.rdzvd, tmp, "--no-nccl", "--no-fsync",
                           bind="tcp://127.0.0.2:%d" % port)
        try:
            with rdzv.Client("tcp://127.0.0.2") as c:
                assert c.join("noport", 1, 0, timeout=20).world == 1
            h = handler(srv, "np", world=1, run_id="noport-torchrun", endpoint="127.0.0.2")
            assert h._join().rank == 0
            h.shutdown()
        finally:
            d.stop()


def library_error(env):
    """The message of `rdzv.Client()` failing to load librdzv in a python
    of env (PATH kept), or None when librdzv loaded after all."""
    code = ("import rdzv\n"
            "try:\n    rdzv.Client()\nexcept rdzv.RdzvError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30, env=dict(env, PATH=os.environ.get("PATH", "/usr/bin:/bin"),
                                              PKG_CONFIG_LIBDIR="/nonexistent"))
    assert out.returncode == 0, out.stderr
    return out.stdout.strip() or None


def assert_says_how_to_find(msg):
    assert msg.startswith("cannot load librdzv"), msg
    for word in ("PKG_CONFIG_PATH", "RDZV_LIBRARY", "rdzv.pc", "meson install"):
        assert word in msg, (word, msg)


@case
def library_not_found_says_what_to_set(srv):
    """No librdzv where RDZV_LIBRARY says, none from pkg-config: the error
    names what to set, PKG_CONFIG_PATH (at install) and RDZV_LIBRARY."""
    if ARGS.expect_libdir:
        raise rdzvtest.Skip("this copy loads the librdzv recorded at install; "
                            "install_without_librdzv_warns tries one that recorded none")
    env = {"RDZV_LIBRARY": "/nonexistent/librdzv.so.0"}
    if "PYTHONPATH" in os.environ:                    # the source tree's copy
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    msg = library_error(env)
    if msg is None:
        raise rdzvtest.Skip("the dynamic loader finds a librdzv of its own here")
    assert "/nonexistent/librdzv.so.0 (" in msg, msg
    assert_says_how_to_find(msg)


@case
def install_without_librdzv_warns(srv):
    """`pip install` where pkg-config finds no librdzv succeeds, says so
    in a warning (pip prints it with -v) that names PKG_CONFIG_PATH and
    RDZV_LIBRARY, and that copy's Client() fails with the same advice."""
    if not ARGS.unfound_install:
        raise rdzvtest.Skip("only after python_package_test.sh installs such a copy")
    with open(ARGS.unfound_install + ".log") as f:
        warnings = [line.strip() for line in f if "WARNING: rdzv:" in line]
    assert len(warnings) == 1, warnings
    assert "pkg-config --variable=libdir rdzv` found no librdzv" in warnings[0], warnings
    assert "PKG_CONFIG_PATH" in warnings[0] and "RDZV_LIBRARY" in warnings[0], warnings
    with open(os.path.join(ARGS.unfound_install, "rdzv", "_build_config.py")) as f:
        assert "LIBDIR = None" in f.read()
    msg = library_error({"PYTHONPATH": ARGS.unfound_install})
    if msg is None:
        raise rdzvtest.Skip("the dynamic loader finds a librdzv of its own here")
    assert_says_how_to_find(msg)


@case
def python_m_rdzv_join(srv):
    run = [sys.executable, "-m", "rdzv", "join", "--server", srv.endpoint, "--host", "127.0.0.1"]
    out = subprocess.run(run + ["--group", "m", "--world", "1", "--rank", "0",
                                "--format", "vllm-args"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("--data-parallel-size 1 --data-parallel-rank 0 "), out.stdout
    out = subprocess.run(run + ["--group", "m", "--world", "1", "--rank", "0", "--", sys.executable,
                                "-c", "import os; print(os.environ['RDZV_VLLM_ARGS'])"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "--data-parallel-rpc-port" in out.stdout, out
    env = subprocess.run(run + ["--group", "m", "--world", "1", "--rank", "0", "--format",
                                "export"], capture_output=True, text=True, timeout=30)
    sourced = subprocess.run(["sh", "-c", env.stdout + 'printf %s "$RDZV_VLLM_ARGS"'],
                             capture_output=True, text=True)
    assert sourced.stdout.startswith("--data-parallel-size 1"), (env.stdout, sourced)
    out = subprocess.run(run + ["--group", "m", "--world", "2", "--rank", "1", "--timeout", "5"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 4 and "world_mismatch" in out.stderr, out


@case
def torchrun_entry_point(srv):
    if not ARGS.expect_libdir:
        raise rdzvtest.Skip("the source tree has no installed metadata")
    eps = importlib.metadata.entry_points(group="torchrun.handlers")
    ours = [ep for ep in eps if ep.name == "rdzv"]
    assert ours and ours[0].value == "rdzv.torchrun:handler_creator", list(eps)
    creator = ours[0].load()()       # what torchrun registers; imports no torch
    assert callable(creator) and creator.__name__ == "create_handler", creator


def handler(srv, node, world=2, min_nodes=None, run_id="trun", endpoint=None, **conf):
    """The torchrun handler's logic (rdzv.torchrun._Base: everything but
    torch's base class and the store) for one node; endpoint: what
    --rdzv-endpoint gives (default srv's HOST:PORT)."""
    import types
    import rdzv.torchrun
    if endpoint is None:
        endpoint = srv.endpoint.replace("tcp://", "")
    params = types.SimpleNamespace(
        backend="rdzv", endpoint=endpoint, run_id=run_id,
        min_nodes=world if min_nodes is None else min_nodes, max_nodes=world,
        local_addr="127.0.0.1", config=dict(conf, node=node, join_timeout="20"))
    return rdzv.torchrun._Base(params)


@case
def torchrun_torch_version(srv):
    """The backend needs torch >= 2.5: an older one is told so in one line."""
    import rdzv.torchrun
    for ok in ("2.5.0", "2.11.0+cu130", "3.0.0a0"):
        rdzv.torchrun.check_torch_version(ok)
    for old in ("1.13.1", "2.4.1+cpu"):
        try:
            rdzv.torchrun.check_torch_version(old)
            raise AssertionError("torch %s was accepted" % old)
        except RuntimeError as e:
            assert "needs torch >= 2.5" in str(e) and old in str(e), str(e)


def handler_log(srv, **kw):
    """What making a handler (node "log", run_id "conf") prints to stderr."""
    import contextlib
    import io
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        h = handler(srv, "log", run_id="conf", **kw)
    h.shutdown()
    return err.getvalue()


@case
def torchrun_conf_ignored_keys_said(srv):
    """--rdzv-conf keys the backend does not read (c10d's, torchrun's own
    timeout, a mistyped one, last_call_timeout of a fixed --nnodes) are
    named in one line, once per set of keys, with why; the keys it reads,
    and torchrun's own timeout=900 that every run has, say nothing."""
    out = handler_log(srv, timeout="30", read_timeout="60", close_timeout="10",
                      heartbeat="1", rnak="1")
    lines = out.splitlines()
    assert len(lines) == 1, out
    for key in ("timeout", "read_timeout", "close_timeout", "heartbeat", "rnak"):
        assert "%s (" % key in lines[0], (key, out)
    assert "ignored" in lines[0] and "join_timeout (" not in lines[0], out
    assert "use join_timeout" in lines[0] and "unknown to this backend" in lines[0], out
    assert handler_log(srv, timeout="30", read_timeout="60", close_timeout="10",
                       heartbeat="1", rnak="1") == "", "said twice"
    assert handler_log(srv, timeout="900", rank="0", host="127.0.0.1") == ""
    fixed = handler_log(srv, last_call_timeout="5")
    assert "last_call_timeout (applies to --nnodes MIN:MAX only)" in fixed, fixed
    assert handler_log(srv, min_nodes=1, last_call_timeout="5") == ""


def joined_all(handlers):
    """Each handler's _join, run at once; {node: assignment}."""
    got = {}
    threads = [threading.Thread(target=lambda n=n, h=h: got.update({n: h._join()}))
               for n, h in handlers.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return got


@case
def torchrun_handler_elastic_range(srv):
    """Without torch, --nnodes 2:3 with last_call_timeout 1: two nodes
    close a round of 2 after the last call; a third arriving starts the
    next round, which the two see through num_nodes_waiting() and which
    closes at 3 at once (MAX); after the third leaves, the survivors'
    next round closes at 2. Each round is one epoch; ranks are dense."""
    nodes = {n: handler(srv, "node-" + n, world=3, min_nodes=2, run_id="elastic",
                        last_call_timeout="1") for n in "abc"}
    pair = {n: nodes[n] for n in "ab"}
    t0 = time.monotonic()
    first = joined_all(pair)
    took = time.monotonic() - t0
    assert sorted(x.rank for x in first.values()) == [0, 1], first
    assert {x.world for x in first.values()} == {2} and len({x.epoch for x in first.values()}) == 1
    assert took >= 1.0, "the round closed before its last call: %.2f s" % took
    for n, h in pair.items():
        h._assignment = first[n]
        assert h.num_nodes_waiting() == 0
    late = {}
    t = threading.Thread(target=lambda: late.update(c=nodes["c"]._join()))
    t.start()
    deadline = time.time() + 30
    while nodes["a"].num_nodes_waiting() == 0 and time.time() < deadline:
        time.sleep(0.2)
    assert nodes["a"].num_nodes_waiting() == 1, "node a did not see the late node's round"
    second = joined_all(pair)
    t.join(30)
    second.update(late)
    assert sorted(x.rank for x in second.values()) == [0, 1, 2], second
    assert {x.world for x in second.values()} == {3}, second
    assert len({x.epoch for x in second.values()}) == 1 and second["a"].epoch > first["a"].epoch
    for n, h in nodes.items():
        h._assignment = second[n]
    nodes["c"].shutdown()                  # node c leaves; torchrun on a and b asks again
    third = joined_all(pair)
    assert sorted(x.rank for x in third.values()) == [0, 1], third
    assert {x.world for x in third.values()} == {2} and third["a"].epoch > second["a"].epoch
    # Alone, below MIN: no round closes.
    for n, h in pair.items():
        h._assignment = third[n]
    alone = handler(srv, "node-a", world=3, min_nodes=2, run_id="elastic", last_call_timeout="1")
    alone._assignment, alone._join_timeout = third["a"], 3.0
    try:
        alone._join()
        raise AssertionError("a round closed with one node of MIN 2")
    except rdzv.Timeout as e:
        assert "no round of 2 to 3 nodes" in str(e), str(e)
    for h in list(nodes.values()) + [alone]:
        h.shutdown()


@case
def torchrun_handler_ranks_and_restart(srv):
    """Without torch: two nodes take ranks by themselves; a node restarted
    gets its rank back and moves the group to a new epoch, which the other
    node's num_nodes_waiting() reports."""
    try:
        handler(srv, "x", world=4, min_nodes=0)
        raise AssertionError("--nnodes 0:4 was accepted")
    except ValueError as e:
        assert "MIN must be at least 1" in str(e), str(e)
    a, b = handler(srv, "node-a"), handler(srv, "node-b")
    got = {}
    threads = [threading.Thread(target=lambda h=h, n=n: got.update({n: h._join()}))
               for n, h in (("a", a), ("b", b))]
    for t in threads:
        t.start()
        time.sleep(0.3)          # a first: it takes rank 0, b gets rank_taken and rank 1
    for t in threads:
        t.join(30)
    assert sorted(x.rank for x in got.values()) == [0, 1], got
    assert got["a"].epoch == got["b"].epoch == 1
    assert got["a"].named_ports.store == got["b"].named_ports.store
    a._assignment = got["a"]
    assert a.num_nodes_waiting() == 0
    b.shutdown()                                    # node b's process is gone
    b2 = handler(srv, "node-b")                     # and starts again
    again = {}
    t = threading.Thread(target=lambda: again.update(b=b2._join()))
    t.start()
    deadline = time.time() + 30
    while a.num_nodes_waiting() == 0 and time.time() < deadline:
        time.sleep(0.2)
    assert a.num_nodes_waiting() == 1, "the survivor did not see the new epoch"
    again["a"] = a._join()
    t.join(30)
    assert again["b"].rank == got["b"].rank and again["a"].rank == got["a"].rank, (got, again)
    assert again["a"].epoch == again["b"].epoch == 2, again
    a._assignment = again["a"]
    a.set_closed()
    assert a.is_closed() and handler(srv, "node-c").is_closed() is False
    a.shutdown()
    b2.shutdown()


@case
def library_found_where_expected(srv):
    lib = rdzv._library.load()
    if ARGS.expect_libdir:
        assert os.path.dirname(os.path.realpath(lib._name)) == \
            os.path.realpath(ARGS.expect_libdir), (lib._name, ARGS.expect_libdir)
        assert "site-packages" in rdzv.__file__, rdzv.__file__


ARGS = None


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--rdzvd", default=os.environ.get("RDZVD"))
    p.add_argument("--expect-libdir")
    p.add_argument("--unfound-install", help="a `pip install --target` made where pkg-config "
                   "found no librdzv; pip's -v output in the same path + .log")
    ARGS = p.parse_args()
    srv = Server()
    try:
        return rdzvtest.run([(fn.__name__, fn) for fn in CASES], srv)
    finally:
        srv.close()


if __name__ == "__main__":
    sys.exit(main())
