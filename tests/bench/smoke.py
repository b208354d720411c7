#!/usr/bin/python3
"""Smoke test of rdzv-bench (suite 'bench'): a small N with both rank
simulators and the floor; checks that every rank got an assignment and that
the JSON carries the documented fields. No timing assertion. One line per
case (rdzvtest).

    smoke.py --bench EXE --rdzvd EXE [--ranks N]"""
import argparse
import json
import subprocess
import sys

import rdzvtest

FIELDS = ["ranks", "processes", "simulator", "seconds", "wall_seconds", "release_p99_ms",
          "p50_ms", "p99_ms", "max_ms", "server_rss_mib", "server_cpu_s", "assigned", "ok"]


def run(bench, args):
    p = subprocess.run([bench] + args, capture_output=True, text=True, timeout=150)
    sys.stderr.write(p.stderr)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise rdzvtest.Fail("no JSON from %s (exit %d)" % (" ".join(args), p.returncode))
    out = json.loads(lines[-1])
    rdzvtest.note(json.dumps(out))
    return p.returncode, out


def check(a, args, fields):
    """One rdzv-bench run: every rank assigned, the fields there, the
    release stamped after the last join."""
    rc, out = run(a.bench, ["--rdzvd", a.rdzvd, "--timeout", "60"] + args)
    missing = [f for f in fields if f not in out]
    want = int(args[args.index("--ranks") + 1])
    problems = []
    if rc != 0 or out.get("ok") is not True:
        problems.append("exit %d ok=%s" % (rc, out.get("ok")))
    if missing:
        problems.append("missing fields " + ",".join(missing))
    if out.get("assigned") != want:
        problems.append("%s of %d ranks got an assignment" % (out.get("assigned"), want))
    # The lean simulator reads the kernel's receive stamps, librdzv cannot;
    # no reply can arrive before the join that completed its group.
    clock = "user" if "librdzv" in args else "kernel"
    if out.get("release_clock") != clock:
        problems.append("release_clock %s, want %s" % (out.get("release_clock"), clock))
    if "--straggler" in args and not out.get("release_min_ms", -1) > 0:
        problems.append("a reply stamped before the last join: release_min_ms %s"
                        % out.get("release_min_ms"))
    if "floor_assigned" in fields and out.get("floor_assigned") != want:
        problems.append("floor answered %s of %d" % (out.get("floor_assigned"), want))
    if "--floor-threads" in args:
        threads = int(args[args.index("--floor-threads") + 1])
        if out.get("floor_threads") != threads:
            problems.append("floor_threads %s, want %d" % (out.get("floor_threads"), threads))
        if not out.get("floor_release_min_ms", -1) > 0:
            problems.append("the floor answered before the last join: floor_release_min_ms %s"
                            % out.get("floor_release_min_ms"))
    rdzvtest.check(not problems, "; ".join(problems))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--rdzvd", required=True)
    ap.add_argument("--ranks", type=int, default=256)
    a = ap.parse_args()
    cases = [
        ("lean + floor", ["--ranks", str(a.ranks), "--processes", "2", "--floor", "--fsync", "off"],
         FIELDS + ["floor_seconds", "floor_assigned"]),
        ("librdzv", ["--ranks", "64", "--processes", "2", "--simulator", "librdzv"], FIELDS),
        ("groups + preload, busy poll", ["--ranks", "64", "--groups", "8", "--preload", "16",
                                         "--busy-poll"], FIELDS + ["busy_poll"]),
        ("straggler", ["--ranks", "64", "--processes", "2", "--straggler", "50"],
         FIELDS + ["release_clock", "release_min_ms", "release_user_p99_ms"]),
        # The floor's release too, answered by 4 writer threads: it must wait
        # for the straggler like rdzvd, and stamp no reply before its join.
        ("straggler, floor with writer threads",
         ["--ranks", "64", "--processes", "2", "--straggler", "50", "--floor",
          "--floor-threads", "4", "--fsync", "off"],
         FIELDS + ["floor_assigned", "floor_threads", "floor_release_min_ms",
                   "floor_release_p99_ms"]),
    ]
    return rdzvtest.run([(name, lambda args=args, fields=fields: check(a, args, fields))
                         for name, args, fields in cases])

if __name__ == "__main__":
    sys.exit(main())
