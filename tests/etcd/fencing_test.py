#!/usr/bin/env python3
"""A leader stopped (SIGSTOP) past its lease is fenced: a standby takes
over and serves, and when the old one runs again (SIGCONT) it neither puts
anything in etcd nor answers the request that waited in its socket while
it was stopped; it exits and its log says why. One line per check
(rdzvtest).

Needs RDZVD, RDZV, pyzmq and etcd (Debian's etcd-server); skips without."""
import json
import os
import signal
import sys
import tempfile
import time

import etcd_cluster
import rdzvtest
from replicas import LEASE_S, Replicas, metrics, skipped, rdzv
from rdzvtest import wait_for

PREFIX = "/rdzv-fence"


def log_values(etcd):
    """Every log value rdzvd put under PREFIX, as text."""
    return [v.decode(errors="replace") if isinstance(v, bytes) else v
            for _, v in etcd.get_prefix(PREFIX + "/log/")]


def main():
    if skipped():
        return rdzvtest.SKIP
    try:
        import zmq
    except ImportError:
        return rdzvtest.skip_all("pyzmq (python3-zmq) not installed")
    tap = rdzvtest.Report()
    with tempfile.TemporaryDirectory(prefix="rdzv-etcd-fence-") as d, \
            etcd_cluster.EtcdCluster(members=3, workdir=os.path.join(d, "etcd")) as etcd:
        reps = Replicas(d, etcd.endpoints, n=2, prefix=PREFIX)
        ctx = zmq.Context()
        try:
            old = reps.start()
            rc, _, err = rdzv("join", "--server", old.endpoint, "--group", "f", "--world", "1",
                              "--rank", "0", "--timeout", "30")
            tap.ok(rc == 0, "a group formed through the leader", err)
            rc, _, err = rdzv("kv", "put", "--server", old.endpoint, "--group", "f", "--epoch",
                              "1", "before", "1")
            tap.ok(rc == 0, "a KV value put before the stop is acknowledged", err)

            standby = [r for r in reps.all if r is not old][0]
            m_lead, m_stand = metrics(old.http_port), metrics(standby.http_port)
            tap.ok(m_lead.get("rdzv_etcd_leader") == 1 and m_stand.get("rdzv_etcd_leader") == 0
                   and 0 < m_lead.get("rdzv_etcd_db_bytes", 0) < m_lead.get("rdzv_etcd_quota_bytes", 0),
                   "/metrics: who leads, and etcd's space used under its quota (%d of %d bytes)"
                   % (m_lead.get("rdzv_etcd_db_bytes", 0), m_lead.get("rdzv_etcd_quota_bytes", 0)))

            old.proc.send_signal(signal.SIGSTOP)
            t_stop = time.monotonic()
            # A request that waits in the stopped leader's socket.
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(old.endpoint)
            sock.send(json.dumps({"v": 1, "op": "kv_put", "id": 7, "group": "f", "epoch": 1,
                                  "key": "stale", "value": "from-the-old-leader"}).encode())
            new = reps.wait_leader(timeout=LEASE_S * 10, other_than=old)
            tap.ok(new is not old, "a standby leads %.1f s after the stop (lease %d s)"
                   % (time.monotonic() - t_stop, LEASE_S))
            rc, _, err = rdzv("kv", "put", "--server", new.endpoint, "--group", "f", "--epoch",
                              "1", "after", "2")
            tap.ok(rc == 0, "the new leader serves: a put is acknowledged", err)
            puts_before = len(log_values(etcd))

            old.proc.send_signal(signal.SIGCONT)
            try:
                status = old.proc.wait(timeout=20)
            except Exception:
                status = None
            tap.ok(status == 3, "the old leader exits (status 3) once it runs again", status)
            tap.ok("fenced" in old.log_since(), "its log says it was fenced",
                   old.log_since()[-600:])
            answered = None
            if sock.poll(2000):
                answered = json.loads(sock.recv())
            tap.ok(not (answered and answered.get("ok")),
                   "the request that waited in its socket got no successful answer", answered)
            values = log_values(etcd)
            tap.ok(len(values) == puts_before and not any("from-the-old-leader" in v for v in values),
                   "it put nothing in etcd after it lost the lease",
                   f"{len(values) - puts_before} values more")
            rc, out, err = rdzv("kv", "get", "--server", new.endpoint, "--group", "f", "--epoch",
                                "1", "stale")
            tap.ok(rc != 0 and "not_found" in err, "its change is nowhere (not_found)",
                   f"rc {rc}: {out}{err}")
            rc, out, _ = rdzv("kv", "get", "--server", new.endpoint, "--group", "f", "--epoch",
                              "1", "before")
            tap.ok(rc == 0 and out.strip() == "1", "what it acknowledged is kept", out)
            old.start()
            tap.ok(wait_for(lambda: "standing by" in old.log_since(), "the restarted one to stand by"),
                   "restarted, it stands by")
        finally:
            ctx.destroy(linger=0)
            for r in reps.all:
                if r.proc and r.proc.poll() is None:
                    r.proc.send_signal(signal.SIGCONT)
            reps.stop()
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
