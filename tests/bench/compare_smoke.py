#!/usr/bin/python3
"""Smoke test of compare.py (suite 'bench'): one small rotation of librdzv, rdzvd,
the floor, the libzmq floor and, where torch with the libuv TCPStore is
installed, TCPStore, plus one --variant; then the same with --group-size 8
(many groups: one rdzvd, a TCPStore per group). Checks the files it writes and
that a missing torch is said, not a failure. One line per check (rdzvtest), no
timing.

    compare_smoke.py --bench EXE --rdzvd EXE"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import rdzvtest

HERE = os.path.dirname(os.path.abspath(__file__))


def run_compare(a, d, name, ranks, extra):
    """Runs compare.py small into d; (its process, --out's summary, --dat's rows)."""
    out, dat = os.path.join(d, name + ".json"), os.path.join(d, name + ".dat")
    p = subprocess.run([sys.executable, os.path.join(HERE, "compare.py"), "--bench", a.bench,
                        "--rdzvd", a.rdzvd, "--ranks", ranks, "--repeat", "1",
                        "--processes", "2", "--timeout", "60", "--out", out, "--dat", dat]
                       + extra, capture_output=True, text=True, timeout=600)
    sys.stderr.write(p.stderr[-4000:])
    res = json.load(open(out)) if os.path.exists(out) else {}
    rows = [l.split() for l in open(dat)] if os.path.exists(dat) else []
    return p, res, [r for r in rows if r and not r[0].startswith("#")]


def tcpstore_checks(p, sizes, torch_ok, what):
    if torch_ok:
        return [("%s: TCPStore timed" % what, all(s.get("tcpstore_s") for s in sizes.values()),
                 [s.get("tcpstore_s") for s in sizes.values()])]
    return [("%s: no libuv TCPStore, said so" % what, "# TCPStore: skipped (" in p.stdout,
             p.stdout[:200])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--rdzvd", required=True)
    a = ap.parse_args()
    sys.dont_write_bytecode = True              # no __pycache__ in the source tree
    import compare                              # beside this script, so on sys.path
    torch_ok = compare.tcpstore_missing(sys.executable) is None
    checks = []
    with tempfile.TemporaryDirectory(prefix="rdzv-compare-smoke-") as d:
        p, res, rows = run_compare(a, d, "one", "64,128",
                               ["--variant", "one=--shards 1 --io-threads 1"])
        checks.append(("compare.py exits 0", p.returncode == 0, "exit %d" % p.returncode))
        sizes = res.get("sizes", {})
        checks.append(("--out has both sizes", sorted(sizes) == ["128", "64"], sorted(sizes)))
        for n, s in sorted(sizes.items()):
            checks.append(("%s ranks: librdzv, lean rdzvd, floor and libzmq floor timed" % n,
                           all(s.get(k) for k in ("librdzv_s", "rdzv_s", "floor_s", "zmq_floor_s",
                                                  "librdzv_server_kib_per_rank"))
                           and s.get("zmq_floor_server_cpu_s") is not None,
                           {k: s.get(k) for k in ("librdzv_s", "rdzv_s", "floor_s",
                                                  "zmq_floor_s", "zmq_floor_server_cpu_s")}))
            variant = s.get("runs", {}).get("variants", {}).get("one", [])
            checks.append(("%s ranks: the variant ran" % n,
                           len(variant) == 1 and bool(variant[0].get("seconds")), variant))
        checks += tcpstore_checks(p, sizes, torch_ok, "one group")
        checks.append(("--dat has a row per size, the libzmq floor last",
                       [r[0] for r in rows] == ["64", "128"]
                       and all(len(r) == 6 and r[5] != "NaN" for r in rows), rows))

        # Many groups: 2 of 8, so each client process hosts a store.
        p, res, rows = run_compare(a, d, "groups", "16", ["--group-size", "8"])
        checks.append(("--group-size 8: compare.py exits 0", p.returncode == 0,
                       "exit %d" % p.returncode))
        sizes = res.get("sizes", {})
        s = sizes.get("16", {})
        checks.append(("--group-size 8: said in --out, every rdzv side timed",
                       res.get("group_size") == 8
                       and all(s.get(k) for k in ("librdzv_s", "rdzv_s", "zmq_floor_s")),
                       {k: s.get(k) for k in ("librdzv_s", "rdzv_s", "zmq_floor_s")}))
        checks += tcpstore_checks(p, sizes, torch_ok, "--group-size 8")
        checks.append(("--group-size 8: a TCPStore per group",
                       s.get("tcpstore_stores") == 2 if torch_ok else None,
                       s.get("tcpstore_stores") if torch_ok else "no libuv TCPStore here"))
    report = rdzvtest.Report(len(checks))
    for name, ok, got in checks:
        if ok is None:
            report.skip(name, got)
        else:
            report.ok(ok, name, got)
    return report.done()


if __name__ == "__main__":
    sys.exit(main())
