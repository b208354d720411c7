#!/usr/bin/env python3
"""rdzvd's layering, read from the symbols of its core library (nm).

  layering.py LIBRDZVD_CORE.a

TAP checks: the files call each other without circles; only core.c (and
journal.c itself) writes or syncs the journal; the network layer (shard.c,
conns.c, server.c) reaches the core only through core.h; nothing below it
calls up into core.c."""
import collections
import subprocess
import sys
import os

JOURNAL_IO = {"rdzv_journal_write", "rdzv_journal_sync_start", "rdzv_journal_wait",
              "rdzv_journal_compact"}


def symbols(archive):
    """(defined: symbol -> file, used: file -> symbols) of the archive's objects."""
    out = subprocess.run(["nm", "-A", archive], check=True, capture_output=True,
                         text=True).stdout
    defined, used = {}, collections.defaultdict(set)
    for line in out.splitlines():
        where, _, rest = line.rpartition(".o:")
        name = os.path.basename(where).removesuffix(".c")
        fields = rest.split()
        if len(fields) == 3 and fields[1] in "TDRB":
            defined[fields[2]] = name
        elif len(fields) == 2 and fields[0] == "U":
            used[name].add(fields[1])
    return defined, used


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


def main():
    defined, used = symbols(sys.argv[1])
    edges = collections.defaultdict(set)
    for f, syms in used.items():
        for s in syms:
            if s in defined and defined[s] != f:
                edges[f].add(defined[s])
    checks = []
    found = cycles(edges)
    checks.append(("no circles between the core's files",
                   not found, " ".join(f"{a}->{b}" for a, b in found)))
    io = sorted(f for f, syms in used.items() if syms & JOURNAL_IO and f != "core")
    checks.append(("only core.c writes and syncs the journal", not io, " ".join(io)))
    core_api = {s for s, f in defined.items() if f == "core"}
    network = ("shard", "conns", "server")       # the layer above the core
    inner = sorted(f for f in network
                   for s in used.get(f, ()) if defined.get(s) not in (None, "core", f)
                   and defined.get(s) in ("state", "apply", "batch", "handlers", "release",
                                          "documents", "compact", "journal"))
    checks.append(("the network layer (shard, conns, server) reaches the core only "
                   "through core.h", not inner,
                   " ".join(inner)))
    up = sorted(f for f in edges if "core" in edges[f] and f not in network)
    checks.append(("nothing but the network layer calls into core.c", not up, " ".join(up)))
    checks.append(("the library defines the core", bool(core_api), ""))
    print(f"1..{len(checks)}")
    for i, (what, ok, detail) in enumerate(checks, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {what}" + ("" if ok else f": {detail}"))
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
