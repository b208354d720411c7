#!/usr/bin/env python3
"""rdzvd's layering, read from the symbols of its wings' libraries (nm)
and from their sources.

  layering.py SOURCE_ROOT base=LIB journal=LIB core=LIB net=LIB router=LIB

TAP checks: the files call each other without circles; each wing calls
only the wings below it (base < journal < core < net, router), net and
router being siblings that never call each other; only core.c writes or
syncs the journal; the network and router wings reach the core only
through core.h (core.c, core_router.c) and never touch the journal;
nothing below them calls up into core.c; nothing outside the journal's
wing names etcd."""
import collections
import os
import re
import subprocess
import sys

import rdzvtest

ORDER = ["base", "journal", "core", "net", "router"]
# Siblings over the core: neither calls the other.
SIBLINGS = {"net", "router"}
# What core.h declares is defined in these files of the core.
CORE_DOORS = {"core", "core_router"}
JOURNAL_IO = {"rdzv_journal_write", "rdzv_journal_sync_start", "rdzv_journal_wait",
              "rdzv_journal_compact"}
# The core's insides: the network wing sees none of them (core.h is its door).
CORE_INSIDES = {"state", "group", "apply", "batch", "handlers", "release", "documents", "compact",
                "reclaim", "plan", "quota"}


def symbols(archives):
    """(defined: symbol -> file, used: file -> symbols, wing: file -> wing)."""
    defined, used, wing = {}, collections.defaultdict(set), {}
    for w, archive in archives.items():
        out = subprocess.run(["nm", "-A", archive], check=True, capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            where, _, rest = line.rpartition(".o:")
            name = os.path.basename(where).removesuffix(".c")
            wing[name] = w
            fields = rest.split()
            if len(fields) == 3 and fields[1] in "TDRB":
                defined[fields[2]] = name
            elif len(fields) == 2 and fields[0] == "U":
                used[name].add(fields[1])
    return defined, used, wing


def cycles(edges):
    """Every edge a -> b whose b reaches a back."""
    def reach(a):
        seen, frontier = set(), [a]
        while frontier:
            for y in edges.get(frontier.pop(), ()):
                if y not in seen:
                    seen.add(y)
                    frontier.append(y)
        return seen
    return sorted((a, b) for a in edges for b in edges[a] if a in reach(b))


def naming_etcd(root):
    """Files of rdzvd outside rendezvous/journal/ whose text says etcd."""
    found = []
    base = os.path.join(root, "rendezvous")
    for d, _, files in os.walk(base):
        if os.path.relpath(d, base).split(os.sep)[0] == "journal":
            continue
        for f in files:
            if f.endswith((".c", ".h")):
                path = os.path.join(d, f)
                with open(path, encoding="utf-8") as fh:
                    if re.search("etcd", fh.read(), re.I):
                        found.append(os.path.relpath(path, root))
    return sorted(found)


def main():
    root = sys.argv[1]
    archives = dict(a.split("=", 1) for a in sys.argv[2:])
    defined, used, wing = symbols(archives)
    edges = collections.defaultdict(set)
    for f, syms in used.items():
        for s in syms:
            if s in defined and defined[s] != f:
                edges[f].add(defined[s])
    checks = []
    found = cycles(edges)
    checks.append(("no circles between rdzvd's files",
                   not found, " ".join(f"{a}->{b}" for a, b in found)))
    up = sorted(f"{a}({wing[a]})->{b}({wing[b]})" for a in edges for b in edges[a]
                if ORDER.index(wing[b]) > ORDER.index(wing[a])
                or (wing[a] != wing[b] and {wing[a], wing[b]} <= SIBLINGS))
    checks.append(("each wing calls only the wings below it (base < journal < core < "
                   "net, router; net and router never each other)", not up, " ".join(up)))
    io = sorted(f for f, syms in used.items() if syms & JOURNAL_IO and f != "core")
    checks.append(("only core.c writes and syncs the journal", not io, " ".join(io)))
    net = [f for f in wing if wing[f] in SIBLINGS]
    inner = sorted(f"{f}->{b}" for f in net for b in edges.get(f, ())
                   if b in CORE_INSIDES or wing[b] == "journal")
    checks.append(("the network and router wings reach the core only through core.h and "
                   "never the journal", not inner, " ".join(inner)))
    callers = sorted(f for f in edges if edges[f] & CORE_DOORS and wing[f] not in SIBLINGS)
    checks.append(("nothing but the network and router wings calls into core.c and "
                   "core_router.c", not callers, " ".join(callers)))
    etcd = naming_etcd(root)
    checks.append(("nothing outside the journal's wing names etcd", not etcd, " ".join(etcd)))
    etcd_syms = sorted(f"{f}:{s}" for f, syms in used.items() if wing[f] != "journal"
                       for s in syms if "etcd" in s)
    checks.append(("no object outside the journal's wing uses an etcd symbol", not etcd_syms,
                   " ".join(etcd_syms)))
    checks.append(("the libraries define the core and every wing",
                   "core" in wing and set(wing.values()) == set(ORDER), ""))
    report = rdzvtest.Report(len(checks))
    for what, ok, detail in checks:
        report.ok(ok, what, detail)
    return report.done()


if __name__ == "__main__":
    sys.exit(main())
