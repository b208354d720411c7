#!/usr/bin/python3
"""Join to assignment with the journal in a file against the journal in a
3-member etcd on loopback, side by side: alternately, in one invocation,
each run a fresh rdzvd under rdzv-bench --simulator librdzv (N threads with
the real client library and its default options, one group of N). Prints
one line per run, then the medians and their ratio, and a JSON summary.

    etcd_bench.py --bench build/tests/bench/rdzv-bench --rdzvd build/rendezvous/rdzvd
                  [--ranks 1024] [--repeat 5] [--processes P]

The etcd rdzvd counts as started once it leads (tests/bench/etcd_leader.sh
holds its endpoint file back until /readyz says 200): the election is not
timed, every commit is. Both fsync: the file journal its file, etcd its WAL.
Needs Debian's etcd-server."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import etcd_cluster
except ImportError:     # run by hand (docs/performance.md): tests/etcd beside this directory
    sys.path.insert(0, os.path.join(HERE, "..", "etcd"))
    import etcd_cluster


def run(a, extra, rdzvd):
    argv = [a.bench, "--rdzvd", rdzvd, "--ranks", str(a.ranks), "--processes", str(a.processes),
            "--simulator", "librdzv", "--timeout", "120"] + ["--rdzvd-arg=" + x for x in extra]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=400,
                       env=dict(os.environ, RDZVD_REAL=a.rdzvd))
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError("rdzv-bench failed: %s" % p.stderr[-600:])
    r = json.loads(lines[-1])
    if r["assigned"] != a.ranks:
        raise RuntimeError("not every rank was assigned: %s" % lines[-1][:300])
    return r["wall_seconds"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--rdzvd", required=True)
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--processes", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    have, why = etcd_cluster.etcd_available()
    if not have:
        print("etcd_bench: skipped: " + why)
        return 0
    times = {"file": [], "etcd": []}
    with tempfile.TemporaryDirectory(prefix="rdzv-etcd-bench-") as d, \
            etcd_cluster.EtcdCluster(members=3, workdir=d) as etcd:
        wrapper = os.path.join(HERE, "etcd_leader.sh")
        for rep in range(a.repeat):
            for what in ("file", "etcd"):
                if what == "file":
                    t = run(a, [], a.rdzvd)
                else:
                    # A prefix per run: each starts from an empty journal, as the file one does.
                    t = run(a, ["--etcd", etcd.endpoints, "--etcd-prefix", f"/bench{rep}"],
                            wrapper)
                times[what].append(t)
                print("rep %d  %-4s  %d ranks  %.3f s" % (rep, what, a.ranks, t), flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print("median  file %.3f s  etcd (3 members) %.3f s  etcd/file %.2fx"
          % (med["file"], med["etcd"], med["etcd"] / med["file"]))
    print(json.dumps({"ranks": a.ranks, "repeat": a.repeat, "runs": times, "median": med,
                      "ratio_etcd_over_file": med["etcd"] / med["file"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
