#!/usr/bin/python3
"""Smoke test of compare.py (suite 'bench'): one small rotation of librdzv, rdzvd,
the floor and, where torch with the libuv TCPStore is installed, TCPStore,
plus one --variant; checks the files it writes and that a missing torch is
said, not a failure. One line per check (rdzvtest), no timing.

    compare_smoke.py --bench EXE --rdzvd EXE"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import rdzvtest


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--rdzvd", required=True)
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    checks = []
    with tempfile.TemporaryDirectory(prefix="rdzv-compare-smoke-") as d:
        out, dat = os.path.join(d, "c.json"), os.path.join(d, "c.dat")
        p = subprocess.run([sys.executable, os.path.join(here, "compare.py"), "--bench", a.bench,
                            "--rdzvd", a.rdzvd, "--ranks", "64,128", "--repeat", "1",
                            "--processes", "2", "--timeout", "60", "--out", out, "--dat", dat,
                            "--variant", "one=--shards 1 --io-threads 1"],
                           capture_output=True, text=True, timeout=600)
        sys.stderr.write(p.stderr[-4000:])
        checks.append(("compare.py exits 0", p.returncode == 0, "exit %d" % p.returncode))
        res = json.load(open(out)) if os.path.exists(out) else {}
        sizes = res.get("sizes", {})
        checks.append(("--out has both sizes", sorted(sizes) == ["128", "64"], sorted(sizes)))
        for n, s in sorted(sizes.items()):
            checks.append(("%s ranks: librdzv, lean rdzvd and floor timed" % n,
                           bool(s.get("librdzv_s")) and bool(s.get("rdzv_s"))
                           and bool(s.get("floor_s")) and bool(s.get("librdzv_server_kib_per_rank")),
                           {k: s.get(k) for k in ("librdzv_s", "rdzv_s", "floor_s")}))
            variant = s.get("runs", {}).get("variants", {}).get("one", [])
            checks.append(("%s ranks: the variant ran" % n,
                           len(variant) == 1 and bool(variant[0].get("seconds")), variant))
        sys.dont_write_bytecode = True          # no __pycache__ in the source tree
        import compare                          # beside this script, so on sys.path
        if compare.tcpstore_missing(sys.executable) is None:
            checks.append(("TCPStore timed", all(s.get("tcpstore_s") for s in sizes.values()),
                           [s.get("tcpstore_s") for s in sizes.values()]))
        else:
            checks.append(("no libuv TCPStore: said so", "# TCPStore: skipped (" in p.stdout,
                           p.stdout[:200]))
        rows = [l.split() for l in open(dat)] if os.path.exists(dat) else []
        rows = [r for r in rows if r and not r[0].startswith("#")]
        checks.append(("--dat has a row per size", [r[0] for r in rows] == ["64", "128"], rows))
    report = rdzvtest.Report(len(checks))
    for name, ok, got in checks:
        report.ok(ok, name, got)
    return report.done()


if __name__ == "__main__":
    sys.exit(main())
