#!/usr/bin/python3
"""Integration tests of the agent's lease rules for listeners that Linux lets
share a port (several addresses and families), and of a listener the
process still holds through a dup() after close(), with a real rdzvd,
agent and shim (helpers from pod.py).

    lease_test.py CASE --rdzvd EXE --rdzv EXE --shim SO --listener EXE

Ranges from 26200 up, apart from integration.py's and the fault tests'.
One line for the case and exit 0 pass, 1 fail, 77 skip (rdzvtest)."""
import os
import socket
import subprocess
import sys

import pod
import rdzvtest
from pod import check

pod.BASE = 26200


def has_ipv6():
    try:
        s = socket.socket(socket.AF_INET6)
        s.bind(("::1", 0))
        s.close()
        return True
    except OSError:
        return False


def case_asyncio_both_families(pod):
    """asyncio.start_server(port=P) binds [::] with IPV6_V6ONLY and 0.0.0.0
    on P; Linux allows both, so the lease must too."""
    if not has_ipv6():
        raise pod.Skip("no IPv6")
    got = pod.py_json("""
import asyncio, json, socket
async def main():
    srv = await asyncio.start_server(lambda r, w: w.close(), port=%d)
    out = sorted((s.family == socket.AF_INET6, s.getsockname()[1]) for s in srv.sockets)
    srv.close(); await srv.wait_closed()
    return out
print(json.dumps(asyncio.run(main())))
""" % pod.plan[0])
    check(got == [[False, pod.plan[0]], [True, pod.plan[0]]], "asyncio listeners: %s" % got)


def case_addresses_share_a_port(pod):
    """0.0.0.0 beside [::] v6only, and 127.0.0.1 beside 127.0.0.2, each
    taking connections; a dual-stack [::] or a second 0.0.0.0 beside them is
    still refused, as Linux refuses it."""
    if not has_ipv6():
        raise pod.Skip("no IPv6")
    p, q = pod.plan[1], pod.plan[2]
    got = pod.py_json("""
import json, socket
def listen(family, addr, port, v6only=None):
    s = socket.socket(family)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if v6only is not None:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, v6only)
    try:
        s.bind((addr, port)); s.listen(); return s
    except OSError as e:
        return e.errno
def reaches(family, addr, port, l):
    c = socket.create_connection((addr, port), timeout=2); a, _ = l.accept()
    a.close(); c.close(); return True
v6 = listen(socket.AF_INET6, "::", %(p)d, 1)
v4 = listen(socket.AF_INET, "0.0.0.0", %(p)d)
dual = listen(socket.AF_INET6, "::", %(p)d, 0)
v4_again = listen(socket.AF_INET, "127.0.0.1", %(p)d)
one = listen(socket.AF_INET, "127.0.0.1", %(q)d)
two = listen(socket.AF_INET, "127.0.0.2", %(q)d)
print(json.dumps([reaches(socket.AF_INET6, "::1", %(p)d, v6),
                  reaches(socket.AF_INET, "127.0.0.1", %(p)d, v4),
                  dual, v4_again,
                  reaches(socket.AF_INET, "127.0.0.1", %(q)d, one),
                  reaches(socket.AF_INET, "127.0.0.2", %(q)d, two)]))
""" % {"p": p, "q": q})
    eaddrinuse = 98
    check(got == [True, True, eaddrinuse, eaddrinuse, True, True], "listeners: %s" % got)


def dup_then_close(pod, port):
    """A listener the process still holds through a dup() keeps listening
    after the original descriptor is closed, as without the shim; once the
    dup is closed too, the port takes a new listener."""
    got = pod.py_json("""
import json, os, socket
def served(l):
    c = socket.create_connection(("127.0.0.1", %(p)d), timeout=2)
    l.settimeout(2); a, _ = l.accept(); a.close(); c.close(); return True
s = socket.create_server(("", %(p)d))
s2 = s.dup(); s.close()
on = s2.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
first = served(s2)
s3 = socket.socket(fileno=os.dup(s2.fileno())); s2.close()
second = served(s3)
s3.close()
again = socket.create_server(("", %(p)d))
print(json.dumps([on, first, second, served(again)]))
""" % {"p": port})
    check(got == [1, True, True, True], "the dups after close(), then a new listener: %s" % got)


def case_dup_then_close(pod):
    dup_then_close(pod, pod.plan[3])


def case_dup_then_close_other_uid(pod):
    """As dup_then_close, with the agent under a uid of its own (the
    recommended setup), which may not look at the engine's /proc/PID/fd."""
    dup_then_close(pod, pod.plan[4])


CASES = {
    "asyncio_both_families": case_asyncio_both_families,
    "addresses_share_a_port": case_addresses_share_a_port,
    "dup_then_close": case_dup_then_close,
    "dup_then_close_other_uid": case_dup_then_close_other_uid,
}

AGENT_UID = 65532


def other_uid_agent(pod):
    os.chown(pod.tmp.name, AGENT_UID, AGENT_UID)


def pod_args(case, opts):
    """Extra Pod arguments of a case: the agent under AGENT_UID (needs root,
    and a build the other uid can reach: a checkout under a private
    directory, such as a mktemp -d clone, is not)."""
    if not case.endswith("_other_uid"):
        return {}
    if os.geteuid() != 0:
        raise pod.Skip("needs root to run the agent under another uid")
    prefix = ["setpriv", "--reuid=%d" % AGENT_UID, "--regid=%d" % AGENT_UID, "--clear-groups"]
    if subprocess.run(prefix + [opts.rdzv, "--help"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        raise pod.Skip("uid %d cannot run %s (a private directory above it)"
                               % (AGENT_UID, opts.rdzv))
    return {"before_agent": other_uid_agent, "agent_prefix": prefix}


def main():
    opts = pod.case_options(CASES)
    if opts is None:
        return 0
    index = list(CASES).index(opts.case)
    return rdzvtest.run([(opts.case, lambda: pod.run_pod_case(
        opts, index, CASES[opts.case], **pod_args(opts.case, opts)))])

if __name__ == "__main__":
    sys.exit(main())
