#!/usr/bin/env python3
"""rdzvd replicas on a 3-member etcd, the leader killed (SIGKILL) at a
random point of each round while a group of ranks joins through the CLI with
every replica in --server, and KV values are put meanwhile. Every round:
every rank gets an assignment, all of one epoch and one plan (no two
leaders handed out different ones); at the end every KV value whose put was
acknowledged is readable. Prints the takeover times (kill to the next
leader's /readyz 200), median and max. One line per check (rdzvtest).

Needs RDZVD, RDZV and etcd (Debian's etcd-server); skips without etcd.
RDZV_ETCD_ROUNDS and RDZV_ETCD_RANKS shrink it for a quick look."""
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

try:
    import rdzvtest
except ImportError:     # run by hand (docs/performance.md): meson's PYTHONPATH is not set
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
    import rdzvtest

import etcd_cluster  # noqa: E402
from replicas import Replicas, skipped, rdzv, spawn_join  # noqa: E402

ROUNDS = int(os.environ.get("RDZV_ETCD_ROUNDS", "20"))
RANKS = int(os.environ.get("RDZV_ETCD_RANKS", "256"))


def check_round(tap, r, procs):
    """Every rank's assignment, all of one epoch and plan; True if so."""
    out = []
    for rank, p in enumerate(procs):
        try:
            stdout, stderr = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, stderr = p.communicate()
        if p.returncode != 0:
            return tap.ok(False, f"round {r}: every rank joined",
                          f"rank {rank} exited {p.returncode}: {stderr.strip()[-300:]}")
        out.append(json.loads(stdout))
    shared = {(a["epoch"], a["master_addr"], a["master_port"], a["nccl_unique_id"],
               a["world"]) for a in out}
    ports = [p for a in out for p in a["ports"]]
    ok = (len(shared) == 1 and len(set(ports)) == len(ports)
          and [a["rank"] for a in out] == list(range(len(procs))))
    return tap.ok(ok, f"round {r}: {len(procs)} ranks, one epoch and plan, ports disjoint",
                  f"{len(shared)} distinct (epoch, master, nccl id); {len(ports) - len(set(ports))} "
                  "ports given twice")


class KvWriter(threading.Thread):
    """Puts k0, k1, ... into group kv until stopped; remembers the acked."""

    def __init__(self, servers):
        super().__init__(daemon=True)
        self.servers = servers
        self.acked = {}
        self.refused = 0
        self.halt = threading.Event()

    def run(self):
        n = 0
        while not self.halt.is_set():
            key, value = f"k{n}", f"v{n}-{random.random()}"
            rc, _, _ = rdzv("kv", "put", "--server", self.servers, "--group", "kv",
                            "--epoch", "1", "--timeout", "10", key, value, timeout=30)
            if rc == 0:
                self.acked[key] = value
            else:
                self.refused += 1
            n += 1
            time.sleep(0.05)


def main():
    if skipped():
        return rdzvtest.SKIP
    tap = rdzvtest.Report()
    takeovers = []
    with tempfile.TemporaryDirectory(prefix="rdzv-etcd-failover-") as d, \
            etcd_cluster.EtcdCluster(members=3, workdir=os.path.join(d, "etcd")) as etcd:
        reps = Replicas(d, etcd.endpoints)
        try:
            reps.start()
            servers = reps.servers()
            rc, _, err = rdzv("join", "--server", servers, "--group", "kv", "--world", "1",
                              "--rank", "0", "--timeout", "30")
            tap.ok(rc == 0, "a group for the KV values formed", err)
            writer = KvWriter(servers)
            writer.start()
            rng = random.Random(int(os.environ.get("RDZV_ETCD_SEED", time.time())))
            for r in range(ROUNDS):
                leader = reps.wait_leader()
                delay = rng.uniform(0.0, 1.5)
                procs = []
                t_start = time.monotonic()
                killed = None
                for rank in range(RANKS):
                    procs.append(spawn_join(servers, f"round{r}", RANKS, rank, timeout=120))
                    if killed is None and time.monotonic() - t_start >= delay:
                        killed = time.monotonic()
                        leader.proc.send_signal(signal.SIGKILL)
                if killed is None:
                    time.sleep(max(0.0, delay - (time.monotonic() - t_start)))
                    killed = time.monotonic()
                    leader.proc.send_signal(signal.SIGKILL)
                leader.proc.wait()
                new = reps.wait_leader(other_than=leader)
                takeovers.append(time.monotonic() - killed)
                leader.start()                 # back, as a standby
                check_round(tap, r, procs)
                # Its ports go back: twenty groups of 256 on one node would not fit.
                rc, _, err = rdzv("group", "delete", "--server", servers, "--group", f"round{r}")
                if rc != 0:
                    tap.ok(False, f"round {r}: its group deleted", err)
                caught = [l for l in new.log().splitlines() if "leading:" in l][-1:]
                tap.note(f"round {r}: killed {leader.endpoint} {delay:.2f} s into the joins; "
                         f"{new.endpoint} led {takeovers[-1]:.2f} s later; "
                         + (caught[0].split("leading: ")[-1] if caught else ""))
            writer.halt.set()
            writer.join(timeout=60)
            missing = []
            for key, value in writer.acked.items():
                rc, out, _ = rdzv("kv", "get", "--server", servers, "--group", "kv", "--epoch",
                                  "1", key)
                if rc != 0 or out.strip() != value:
                    missing.append(key)
            tap.ok(writer.acked and not missing,
                   f"every acknowledged KV value is readable ({len(writer.acked)} acked, "
                   f"{writer.refused} refused while no replica led)", f"missing: {missing[:10]}")
            fenced = [r for r in reps.all if "fenced" in r.log()]
            tap.note(f"replicas that logged being fenced: {len(fenced)}")
            if takeovers:
                tap.note("takeover (kill to the next leader's /readyz 200) with a %d s lease: "
                         "median %.2f s, max %.2f s over %d rounds"
                         % (2, statistics.median(takeovers), max(takeovers), len(takeovers)))
        finally:
            reps.stop()
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
