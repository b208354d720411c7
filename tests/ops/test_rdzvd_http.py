#!/usr/bin/env python3
"""rdzvd --http end to end, on loopback: the probes, /metrics after two ranks
joined, and /v1/groups equal to what `rdzv status` prints. One line per
check (rdzvtest). Needs RDZVD and RDZV; the ranks join through `rdzv join`,
so this runs under the sanitizers too."""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import rdzvtest
from rdzvtest import free_port


def get(port, path):
    """(status, body) of GET http://127.0.0.1:port/path."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def sample(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no sample {name}")


def main():
    rdzvd = os.environ["RDZVD"]
    help_text = subprocess.run([rdzvd, "--help"], capture_output=True, text=True).stdout
    if "--http" not in help_text:
        return rdzvtest.skip_all("rdzvd has no --http")
    tmp = tempfile.TemporaryDirectory()
    port = free_port()
    d = rdzvtest.Rdzvd(rdzvd, tmp.name, "--no-nccl", "--http", f"127.0.0.1:{port}", start=False)
    report = rdzvtest.Report()
    try:
        endpoint = d.start()
        report.ok(get(port, "/healthz")[0] == 200 and get(port, "/readyz")[0] == 200,
                  "healthz and readyz answer 200")

        joins = [subprocess.Popen([os.environ["RDZV"], "join", "--server", endpoint, "--group",
                                   "web", "--world", "2", "--rank", str(r), "--timeout", "20"],
                                  stdout=subprocess.DEVNULL) for r in (0, 1)]
        report.ok(all(j.wait(30) == 0 for j in joins), "two ranks joined")
        status, text = get(port, "/metrics")
        report.ok(status == 200
                  and sample(text, "rdzv_assignments_total") == 2
                  and sample(text, "rdzv_groups") == 1
                  and sample(text, "rdzv_join_to_assignment_seconds_count") == 2,
                  "metrics count the two assignments")

        def same():
            """The CLI's document and /v1/groups, and whether they agree. Their
            age_s and last_seen_s are whole seconds: a second can tick between
            the two reads (more often on a loaded machine), so they are read
            again until a pair agrees."""
            cli = subprocess.run([os.environ["RDZV"], "status", "--json", "--server", endpoint],
                                 capture_output=True, text=True, timeout=20, check=True).stdout
            status, body = get(port, "/v1/groups")
            # The same document, but NCCL IDs only counted over HTTP.
            want = json.loads(cli)
            for g in want["groups"]:
                g.pop("nccl_unique_id", None)
                g["nccl_unique_ids_redacted"] = len(g.pop("nccl_unique_ids", []))
            return (status == 200 and json.loads(body) == want
                    and '"nccl_unique_id"' not in body), status, body, want
        got = same()
        end = time.monotonic() + 30
        while not got[0] and time.monotonic() < end:
            time.sleep(0.1)
            got = same()
        report.ok(got[0], "/v1/groups is what rdzv status prints, NCCL IDs redacted",
                  "HTTP %s: %s\nrdzv status: %s" % (got[1], got[2], json.dumps(got[3])))
        status, body = get(port, "/v1/groups/web")
        report.ok(status == 200 and json.loads(body)["groups"][0]["joined"] == [0, 1],
                  "/v1/groups/web is the group")
        status, body = get(port, "/v1/groups/none")
        report.ok(status == 404 and json.loads(body)["error"]["code"] == "not_found",
                  "an unknown group is 404 not_found")
    finally:
        d.stop()
        tmp.cleanup()
    return report.done()


if __name__ == "__main__":
    sys.exit(main())
