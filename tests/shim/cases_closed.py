"""The shim fails closed (docs/agent.md, "When the agent cannot be
reached"): with RDZV_AGENT_SOCKET set and no agent to hand a managed port
over, a bind in the managed range fails with EADDRINUSE and one line on
stderr says why, rather than passing through into the race the agent is
there to stop; RDZV_SHIM_REQUIRE=0 passes through as before. A bind the
agent refuses because the port is outside this rank's plan says so, once
per port."""
import os
import socket
import tempfile

from pod import PY, Skip, check, outside_port

BINDS = """
import socket, sys
def bind(port):
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", port)); return s.getsockname()[1]
    except OSError as e:
        return "errno %%d" %% e.errno
print(bind(%d), bind(%d), bind(0), bind(%d))
"""


def _run(pod, env, extra_argv=()):
    """Two ports of the managed range that nothing holds (past the pod's
    agent's plan, so a bind passed through would get them), port 0, and a
    port outside the range."""
    free = pod.plan[-1] + 2
    p = pod.run([*extra_argv, PY, "-c", BINDS % (free, free + 1, outside_port())], env=env)
    return p.stdout.split(), p.stderr


def case_fail_closed(pod):
    """No socket at the path: two managed ports fail with EADDRINUSE (98),
    a port-0 probe gets a kernel port outside the range, a port outside
    the range binds; one stderr line names the path, the reason and the
    range. A path where nobody listens: "connection refused". Another uid
    that cannot open the socket: "permission denied", with the --allow-uid
    to add. RDZV_SHIM_REQUIRE=0: the managed ports pass through."""
    rng = "%d-%d" % (pod.base, pod.limit)
    env = pod.env(RDZV_AGENT_SOCKET="/nonexistent/agent.sock", RDZV_PORT_RANGE=rng)
    got, err = _run(pod, env)
    check(got[:2] == ["errno", "98"] and got[2:4] == ["errno", "98"],
          "managed ports without an agent: %s" % got)
    check(int(got[4]) >= pod.limit or int(got[4]) < pod.base, "port 0 got %s" % got[4])
    check(got[5] != "errno", "a port outside the range: %s" % got)
    want = ("librdzv_shim: cannot reach the agent at /nonexistent/agent.sock (no socket "
            "there: no agent runs, or RDZV_AGENT_SOCKET is wrong); binds in the managed range "
            "%d-%d fail with EADDRINUSE" % (pod.base, pod.limit - 1))
    check(err.count("librdzv_shim") == 1 and want in err, "the line: %r" % err)

    d = tempfile.mkdtemp()
    dead = os.path.join(d, "dead.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(dead)
    s.close()                        # the file stays, nobody listens
    got, err = _run(pod, pod.env(RDZV_AGENT_SOCKET=dead, RDZV_PORT_RANGE=rng))
    check(got[:2] == ["errno", "98"] and "connection refused: the agent that made it is gone"
          in err, "a dead socket: %s %r" % (got, err))
    os.unlink(dead)
    os.rmdir(d)

    got, err = _run(pod, pod.env(RDZV_AGENT_SOCKET="/nonexistent/agent.sock",
                                 RDZV_PORT_RANGE=rng, RDZV_SHIM_REQUIRE="0"))
    check(got[0] == str(pod.plan[-1] + 2) and "binds pass through" in err,
          "RDZV_SHIM_REQUIRE=0 passes through: %s %r" % (got, err))

    if os.geteuid() != 0:
        raise Skip("needs root to run a program under another uid (the rest passed)")
    got, err = _run(pod, pod.env(RDZV_PORT_RANGE=rng),
                    ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
    check(got[:2] == ["errno", "98"] and "--allow-uid 65534" in err,
          "another uid: %s %r" % (got, err))


def case_not_in_plan(pod):
    """A port of the managed range outside this rank's plan: EADDRINUSE
    from the agent, and the shim names the plan, once per port."""
    port = pod.limit - 1             # in the range, past this rank's 8 ports
    code = """
import socket
out = []
for _ in range(2):
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", %d)); out.append("bound")
    except OSError as e:
        out.append(str(e.errno))
print(" ".join(out))
""" % port
    p = pod.py(code)
    want = "librdzv_shim: port %d is managed by rdzvd but not in this rank's plan %d-%d" % (
        port, pod.plan[0], pod.plan[-1])
    check(p.stdout.strip() == "98 98", "two binds of %d: %s" % (port, p.stdout))
    check(p.stderr.count(want) == 1, "the line, once: %r" % p.stderr)


def case_agent_bad_packets(pod):
    """The agent's socket takes packets of agent_proto.h's layout: one of
    the right size and magic with an op the agent does not know is answered
    EINVAL (22) with nothing done, garbage closes that connection, and the
    agent serves the next connection as ever."""
    import struct
    # magic, version, op, status, kind, flags, port, handle, range_base,
    # range_limit, epoch, addrlen, addr[28]: sizeof (rdzv_agent_msg_t), 80 bytes.
    layout = "<IHHiIIIQIIqI28s"

    def packet(op):
        return struct.pack(layout, 0x52445a41, 1, op, 0, 0, 0, 0, 0, 0, 0, 0, 0, b"")

    def exchange(data):
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.settimeout(10)
            s.connect(pod.sock)
            s.send(data)
            return s.recv(4096)
    check(struct.calcsize(layout) == 80, "the packet layout is %d bytes" % struct.calcsize(layout))
    reply = exchange(packet(99))
    got = struct.unpack(layout, reply) if len(reply) == struct.calcsize(layout) else None
    check(got and got[2] == 99 and got[3] == 22,
          "an unknown op: %r, not status EINVAL echoing op 99" % (got,))
    check(exchange(b"\x00" * 7) == b"", "garbage: the agent did not close the connection")
    hello = struct.unpack(layout, exchange(packet(1)))
    check(hello[3] == 0 and hello[8] == pod.base and hello[9] == pod.limit,
          "after them a HELLO is answered with the range: %r" % (hello,))
