#!/usr/bin/python3
"""How long a put waits while rdzvd compacts a large journal.

  compaction_stall.py --rdzvd PATH [--state-mib 128] [--value-kib 60]

Puts KV values one at a time (each waits for its reply) until rdzvd holds
--state-mib of them, then overwrites them until rdzvd has compacted a journal
twice that size: every compaction rewrites the whole state. Prints one JSON
line: the latencies of every put (median, p99, max) and the log line of
that compaction. Needs pyzmq (python3-zmq)."""
import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time

import zmq

try:
    import rdzvtest
except ImportError:     # run by hand (docs/reliability.md): tests/lib beside this file
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
    import rdzvtest


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rdzvd", required=True)
    ap.add_argument("--state-mib", type=int, default=128)
    ap.add_argument("--value-kib", type=int, default=60)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rdzv-compaction-") as d:
        srv = rdzvtest.Rdzvd(a.rdzvd, d, "--no-nccl", "--compact-mib", str(a.state_mib),
                             "--max-rps", "-1")
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.connect(srv.endpoint)
        rid = [0]

        def ask(req):
            rid[0] += 1
            req = dict(req, v=1, id=rid[0])
            t0 = time.monotonic()
            sock.send(json.dumps(req).encode())
            rep = json.loads(sock.recv())
            rdzvtest.check(rep.get("ok"), "rdzvd refused %s: %s" % (req["op"], rep))
            return time.monotonic() - t0

        value = "v" * (a.value_kib * 1024)
        per_group = (60 << 20) // len(value)          # under the 64 MiB per group
        keys = (a.state_mib << 20) // len(value)
        groups = (keys + per_group - 1) // per_group
        for g in range(groups):
            ask({"op": "join", "group": "g%d" % g, "world": 1, "rank": 0, "host": "h",
                 "node": "n", "session": "s"})
        slot = [(k // per_group, k % per_group) for k in range(keys)]
        state = keys * len(value)

        def second_done():
            """The log line of the compaction that rewrote a journal twice the
            state (the first, during the fill, found it about equal)."""
            for m in re.finditer(r".*compaction done: (\d+) bytes.*", srv.log()):
                if int(m.group(1)) >= 1.8 * state:
                    return m.group(0).strip()
            return None
        waits, line = [], None
        for i in range(6 * keys):
            g, k = slot[i % keys]
            waits.append(ask({"op": "kv_put", "group": "g%d" % g, "epoch": 1, "key": "k%d" % k,
                              "value": value}))
            line = i >= keys and second_done()
            if line:
                break
        srv.stop()
        waits.sort()
        print(json.dumps({
            "state_mib": a.state_mib, "value_kib": a.value_kib, "puts": len(waits),
            "put_p50_ms": round(statistics.median(waits) * 1000, 2),
            "put_p99_ms": round(waits[int(len(waits) * 0.99)] * 1000, 2),
            "put_max_ms": round(waits[-1] * 1000, 1),
            "compaction": line or None,
            "log": [m.group(0).strip() for m in re.finditer(r".*compaction.*", srv.log())]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
