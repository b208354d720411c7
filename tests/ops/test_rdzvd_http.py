#!/usr/bin/env python3
"""rdzvd --http end to end, on loopback: the probes, /metrics after two ranks
joined, and /v1/groups equal to what `rdzv status` prints. TAP. Needs RDZVD,
and RDZV; the ranks join through `rdzv join`, so this runs under the
sanitizers too."""
import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import rdzvtest  # noqa: E402
from rdzvtest import free_port  # noqa: E402


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
        print("1..0 # SKIP rdzvd has no --http")
        return 0
    tmp = tempfile.TemporaryDirectory()
    port = free_port()
    d = rdzvtest.Rdzvd(rdzvd, tmp.name, "--no-nccl", "--http", f"127.0.0.1:{port}", start=False)
    checks = []
    try:
        endpoint = d.start()
        checks.append(("healthz and readyz answer 200", get(port, "/healthz")[0] == 200
                       and get(port, "/readyz")[0] == 200))

        joins = [subprocess.Popen([os.environ["RDZV"], "join", "--server", endpoint, "--group",
                                   "web", "--world", "2", "--rank", str(r), "--timeout", "20"],
                                  stdout=subprocess.DEVNULL) for r in (0, 1)]
        checks.append(("two ranks joined", all(j.wait(30) == 0 for j in joins)))
        status, text = get(port, "/metrics")
        checks.append(("metrics count the two assignments", status == 200
                       and sample(text, "rdzv_assignments_total") == 2
                       and sample(text, "rdzv_groups") == 1
                       and sample(text, "rdzv_join_to_assignment_seconds_count") == 2))

        cli = subprocess.run([os.environ["RDZV"], "status", "--json", "--server", endpoint],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        status, body = get(port, "/v1/groups")
        # The same document, but NCCL IDs only counted over HTTP.
        want = json.loads(cli)
        for g in want["groups"]:
            g.pop("nccl_unique_id", None)
            g["nccl_unique_ids_redacted"] = len(g.pop("nccl_unique_ids", []))
        checks.append(("/v1/groups is what rdzv status prints, NCCL IDs redacted",
                       status == 200 and json.loads(body) == want
                       and '"nccl_unique_id"' not in body))
        status, body = get(port, "/v1/groups/web")
        checks.append(("/v1/groups/web is the group", status == 200
                       and json.loads(body)["groups"][0]["joined"] == [0, 1]))
        status, body = get(port, "/v1/groups/none")
        checks.append(("an unknown group is 404 not_found", status == 404
                       and json.loads(body)["error"]["code"] == "not_found"))
    finally:
        d.stop()
        tmp.cleanup()
    print(f"1..{len(checks)}")
    for i, (name, good) in enumerate(checks, 1):
        print(f"{'ok' if good else 'not ok'} {i} - {name}")
    return 0 if all(good for _, good in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
