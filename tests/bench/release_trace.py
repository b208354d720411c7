#!/usr/bin/python3
"""Where the time of a release goes, inside rdzvd: runs rdzv-bench with a
straggler against an rdzvd built with -Drelease_trace=true, reads the
phases' timestamps rdzvd logs (rendezvous/base/trace.h) and prints each phase
as milliseconds after the last join was sent: medians over the runs, with
the smallest and largest.

    meson setup build-trace -Dbuildtype=release -Drelease_trace=true
    ninja -C build-trace
    release_trace.py --build build-trace [--ranks 1024] [--repeat 7]
                     [--processes 8] [--straggler 200] [-- BENCH ARGS...]

Without trace lines in the log (a normal build), it says so and fails."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# (label, phase, which: first/last occurrence, field)
ROWS = [
    ("shard has the last join, parsed", "got", "first"),
    ("release starts (core lock held)", "release_start", "first"),
    ("plans laid out and recorded", "laid_out", "first"),
    ("release's records appended", "recorded", "first"),
    ("sync thread calls fdatasync", "sync_begin", "first"),
    ("fdatasync returns", "sync_end", "first"),
    ("every reply queued", "replies_queued", "first"),
    ("core lock released", "handled", "first"),
    ("commit starts", "commit_start", "first"),
    ("commit's write done, lock released", "commit_end", "first"),
    ("other shards' inboxes filled", "queued", "first"),
    ("first other shard starts formatting", "inbox_start", "first"),
    ("last other shard starts formatting", "inbox_start", "last"),
    ("journal durable (releasing shard)", "durable", "first"),
    ("last other shard sees it durable", "inbox_durable", "last"),
    ("releasing shard's own replies sent", "own_sent", "first"),
    ("last other shard's replies sent", "inbox_end", "last"),
]


def parse_trace(path, since_ns):
    """phase -> sorted list of times (ns) at or after since_ns."""
    out = {}
    with open(path, errors="replace") as f:
        for line in f:
            if " trace " not in line and not line.startswith("trace "):
                continue
            words = line.split()
            at = words.index("trace")
            fields = dict(w.split("=", 1) for w in words[at + 2:] if "=" in w)
            t = int(fields.get("t", "0"))
            if t >= since_ns:
                out.setdefault(words[at + 1], []).append(t)
    for v in out.values():
        v.sort()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="meson build dir with -Drelease_trace=true")
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--straggler", type=int, default=200)
    ap.add_argument("rest", nargs="*", help="more rdzv-bench arguments (after --)")
    a = ap.parse_args()
    bench = os.path.join(a.build, "tests/bench/rdzv-bench")
    rdzvd = os.path.join(a.build, "rendezvous/rdzvd")
    rows = {label: [] for label, _, _ in ROWS}
    stats = {"release_min_ms": [], "release_p50_ms": [], "release_p99_ms": []}
    with tempfile.TemporaryDirectory(prefix="rdzv-release-trace-") as d:
        for i in range(a.repeat):
            log = os.path.join(d, "rdzvd-%d.log" % i)
            p = subprocess.run([bench, "--rdzvd", rdzvd, "--ranks", str(a.ranks),
                                "--processes", str(a.processes), "--straggler", str(a.straggler),
                                "--rdzvd-log", log] + a.rest,
                               capture_output=True, text=True, timeout=300)
            lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
            if p.returncode != 0 or not lines:
                sys.stderr.write(p.stderr)
                raise SystemExit("release_trace: rdzv-bench failed (exit %d)" % p.returncode)
            out = json.loads(lines[-1])
            t0 = out["last_join_sent_ns"]
            trace = parse_trace(log, t0)
            if not trace:
                raise SystemExit("release_trace: no trace lines in rdzvd's log; "
                                 "build with -Drelease_trace=true")
            for label, phase, which in ROWS:
                ts = trace.get(phase)
                if ts:
                    rows[label].append(((ts[0] if which == "first" else ts[-1]) - t0) / 1e6)
            for k in stats:
                stats[k].append(out[k])
            print("# run %d: %s" % (i, json.dumps({k: out[k] for k in stats})), file=sys.stderr)
    print("%-40s %8s %18s" % ("ms after the last join was sent", "median", "(min-max)"))
    for label, _, _ in ROWS:
        v = rows[label]
        if v:
            print("%-40s %8.2f %18s" % (label, statistics.median(v),
                                        "(%.2f-%.2f)" % (min(v), max(v))))
    for k, v in stats.items():
        print("%-40s %8.2f %18s" % ("rank's reply arrives: " + k[8:11], statistics.median(v),
                                    "(%.2f-%.2f)" % (min(v), max(v))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
