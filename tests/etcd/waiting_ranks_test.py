#!/usr/bin/env python3
"""Ranks that wait at the leader when it dies get their assignment from the
next one. Two rdzvd replicas on one etcd member, with rdzvd's default lease
(5 s, longer than the client's resend schedule, which is what stranded
them): ranks join through the rdzv CLI with both replicas in --server.

First the exact sequence: ranks 0 and 1 of a group of 4 join and wait at
the leader; the leader is killed (SIGKILL); ranks 2 and 3 join at the new
leader; all four get the one assignment of epoch 1. Then rounds with the
kill at a random point: before any join, between joins, right after the
last one (the assignment being committed or sent), with the late ranks
joining before or after the election. Prints the seed (RDZV_ETCD_SEED
replays a run) and each round's kill point. One line per check
(rdzvtest).

Needs RDZVD, RDZV and etcd (Debian's etcd-server); skips without etcd.
RDZV_ETCD_ROUNDS sets the number of random rounds (default 4)."""
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

try:
    import rdzvtest
except ImportError:     # run by hand (docs/reliability.md): meson's PYTHONPATH is not set
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
    import rdzvtest

import etcd_cluster  # noqa: E402
from replicas import Replicas, skipped, rdzv, spawn_join  # noqa: E402
from rdzvtest import wait_for  # noqa: E402

ROUNDS = int(os.environ.get("RDZV_ETCD_ROUNDS", "4"))
WORLD = 4
# Far above a takeover (about the lease): a rank that times out was stranded.
JOIN_TIMEOUT_S = 40


def joined(server, group):
    """The ranks server's status lists as joined in group ([] if none)."""
    rc, out, _ = rdzv("status", "--server", server, "--group", group, "--json", timeout=20)
    if rc != 0:
        return []
    groups = json.loads(out).get("groups", [])
    return groups[0].get("joined", []) if groups else []


def results(procs, since=None):
    """Each rank's (exit status, assignment or None, stderr's tail); with
    since (a time.monotonic()), says how long after it the last rank ended."""
    out = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=JOIN_TIMEOUT_S + 30)
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, stderr = p.communicate()
        asg = json.loads(stdout) if p.returncode == 0 else None
        out.append((p.returncode, asg, stderr.strip()[-300:]))
    if since is not None:
        rdzvtest.note("every rank done %.2f s after the kill" % (time.monotonic() - since))
    return out


def check_all(tap, what, got):
    """Every rank exited 0 with its own rank, all of one epoch and plan."""
    failed = [f"rank {r} exited {rc}: {err}" for r, (rc, _, err) in enumerate(got) if rc != 0]
    if failed:
        return tap.ok(False, what, "; ".join(failed))
    asgs = [a for _, a, _ in got]
    shared = {(a["epoch"], a["master_addr"], a["master_port"], a["world"]) for a in asgs}
    ports = [p for a in asgs for p in a["ports"]]
    return tap.ok(len(shared) == 1 and [a["rank"] for a in asgs] == list(range(len(got)))
                  and len(set(ports)) == len(ports), what,
                  f"{len(shared)} distinct (epoch, master, world); ranks "
                  f"{[a['rank'] for a in asgs]}; {len(ports) - len(set(ports))} ports twice")


def kill(replica):
    replica.proc.send_signal(signal.SIGKILL)
    replica.proc.wait()


def back_as_standby(reps, old):
    """The killed replica started again; it stands by behind the new leader."""
    old.start()
    wait_for(lambda: "standing by" in old.log_since(), "the restarted replica to stand by")
    return reps.wait_leader()


def exact_sequence(tap, reps, servers):
    leader = reps.wait_leader()
    procs = [spawn_join(servers, "h", WORLD, r, timeout=JOIN_TIMEOUT_S) for r in (0, 1)]
    wait_for(lambda: joined(leader.endpoint, "h") == [0, 1], "ranks 0 and 1 to wait at the leader")
    killed = time.monotonic()
    kill(leader)
    new = reps.wait_leader(other_than=leader)
    tap.note("the new leader serves %.2f s after the kill" % (time.monotonic() - killed))
    procs += [spawn_join(servers, "h", WORLD, r, timeout=JOIN_TIMEOUT_S) for r in (2, 3)]
    got = results(procs, killed)
    check_all(tap, "ranks 0 and 1, waiting at the killed leader, get the assignment "
              "ranks 2 and 3 got from the new one", got)
    tap.ok("assign group=h epoch=1" in new.log_since(), "the new leader assigned epoch 1",
           new.log_since()[-600:])
    back_as_standby(reps, leader)


def random_round(tap, reps, servers, rng, n):
    """The leader killed after `before` ranks started, `pause` s later; the
    rest join at once (through the standby, before its election) or once
    the new leader serves."""
    group = f"r{n}"
    before = rng.randint(0, WORLD)
    gaps = [rng.uniform(0.0, 0.5) for _ in range(max(0, before - 1))]
    # Every rank started: the kill lands while the assignment is committed
    # or on its way out, not after the group has long formed.
    pause = rng.uniform(0.0, 0.3 if before == WORLD else 1.5)
    late_after_election = rng.random() < 0.5
    leader = reps.wait_leader()
    procs = []
    for r in range(before):
        if r:
            time.sleep(gaps[r - 1])
        procs.append(spawn_join(servers, group, WORLD, r, timeout=JOIN_TIMEOUT_S))
    time.sleep(pause)
    killed = time.monotonic()
    kill(leader)
    if late_after_election:
        reps.wait_leader(other_than=leader)
    procs += [spawn_join(servers, group, WORLD, r, timeout=JOIN_TIMEOUT_S)
              for r in range(before, WORLD)]
    when = "after the election" if late_after_election else "at once"
    tap.note(f"round {n}: leader killed {pause:.2f} s after {before} of {WORLD} ranks started "
             f"(gaps {', '.join('%.2f' % g for g in gaps) or 'none'}); the rest joined {when}")
    check_all(tap, f"round {n}: every rank gets one assignment", results(procs, killed))
    back_as_standby(reps, leader)
    rdzv("group", "delete", "--server", servers, "--group", group)


def main():
    if skipped():
        return rdzvtest.SKIP
    tap = rdzvtest.Report()
    seed = int(os.environ.get("RDZV_ETCD_SEED", int(time.time())))
    tap.note(f"seed {seed} (RDZV_ETCD_SEED={seed} replays it)")
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="rdzv-etcd-waiting-") as d, \
            etcd_cluster.EtcdCluster(members=1, workdir=os.path.join(d, "etcd")) as etcd:
        reps = Replicas(d, etcd.endpoints, n=2, lease=None)
        try:
            reps.start()
            servers = reps.servers()
            exact_sequence(tap, reps, servers)
            for n in range(ROUNDS):
                random_round(tap, reps, servers, rng, n)
        finally:
            reps.stop()
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
