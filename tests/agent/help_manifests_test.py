#!/usr/bin/env python3
"""`rdzv agent --help` names every flag and every RDZV_ variable that the
Kubernetes example (examples/kubernetes, each overlay rendered by
tests/ops/manifests.py) gives the agent's container, and the agent takes
those flags. Skipped without kubectl.

    help_manifests_test.py --source-root DIR --rdzv EXE"""
import argparse
import os
import shutil
import subprocess
import sys

import rdzvtest
from manifests import OVERLAYS, Overlay, env_of, flags_in
from rdzvtest import Skip, check


def agent_of(ov):
    agents = [c for c in ov.pod().get("initContainers", []) + ov.pod()["containers"]
              if (c.get("args") or [None])[0] == "agent"]
    check(len(agents) == 1, "%s: %d agent containers" % (ov.name, len(agents)))
    return agents[0]


def case_overlay(opts, name):
    if not shutil.which("kubectl"):
        raise Skip("kubectl is not installed (kubectl kustomize renders the overlays)")
    ov = Overlay(os.path.join(opts.source_root, "examples", "kubernetes"), name)
    agent = agent_of(ov)
    help_text = subprocess.run([opts.rdzv, "agent", "--help"], capture_output=True,
                               text=True).stdout
    names = flags_in(agent["args"]) + [n for n in env_of(agent) if n.startswith("RDZV_")]
    missing = [n for n in names if n not in help_text]
    check(not missing, "rdzv agent --help lacks %s" % missing)
    # The manifest's own arguments, then --help: a flag the agent does not
    # take fails the parse before --help is looked at.
    p = subprocess.run([opts.rdzv, *ov.args(agent), "--help"], capture_output=True, text=True)
    check(p.returncode == 0, "rdzv %s: %s" % (" ".join(ov.args(agent)), p.stderr))
    return "%d names" % len(names)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--rdzv", required=True)
    opts = ap.parse_args()
    return rdzvtest.run([(ov, lambda ov=ov: case_overlay(opts, ov)) for ov in OVERLAYS])


if __name__ == "__main__":
    sys.exit(main())
