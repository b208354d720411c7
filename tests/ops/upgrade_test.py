#!/usr/bin/python3
"""Upgrading and rolling back across one release, with the previous
release's own binaries (docs/deployment.md, "Upgrading").

The previous release is built from this repository's history: the commit
named in tests/ops/previous-release, taken with `git archive` and built
(rdzvd and rdzv only) in BUILD_DIR, once. Without git or that commit (a
shallow clone) the test is skipped and says so.

One group of two sidecar agents (no CMD, as in a Pod) lives through what
an operator does, in the order docs/deployment.md gives:
  1. the previous rdzvd with the previous agents forms epoch 1;
  2. rdzvd is replaced by this release's on the same journal: the agents
     of the previous release keep heartbeating, nothing re-forms;
  3. the rank Pods roll one at a time to this release's agent: each is a
     rank restart, the group re-forms with the plans it had;
  4. rolled back: the previous rdzvd on the journal this release wrote,
     with this release's agents; the group is as it was, its agents alive,
     and a rank rolled back to the previous agent re-forms it again;
  5. this release's agents form a new group against the previous rdzvd.
Every step checks every agent's env file (epoch, world, ports) and rdzvd's
status, through this release's CLI.

    upgrade_test.py --source-root SRC --build-dir DIR
RDZVD and RDZV in the environment are this release's."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import rdzvtest
from rdzvtest import Skip

GROUP = "g"


def read_env(path):
    try:
        with open(path) as f:
            return dict(l.split("=", 1) for l in f.read().splitlines() if "=" in l)
    except OSError:
        return {}


def previous_release(src):
    """(version, commit) from tests/ops/previous-release."""
    with open(os.path.join(src, "tests", "ops", "previous-release")) as f:
        words = [l.split() for l in f if l.strip() and not l.startswith("#")][0]
    return words[0], words[1]


def build_previous(src, commit, build_dir):
    """The previous release's rdzvd and rdzv, built once under build_dir."""
    out = os.path.join(build_dir, commit[:12])
    exes = (os.path.join(out, "build", "rendezvous", "rdzvd"),
            os.path.join(out, "build", "client", "rdzv"))
    if all(os.path.exists(e) for e in exes):
        return exes
    if not shutil.which("git"):
        raise Skip("no git: the previous release is built from this repository's history")
    have = subprocess.run(["git", "-C", src, "cat-file", "-e", commit + "^{commit}"],
                          capture_output=True)
    if have.returncode != 0:
        raise Skip("commit %s is not in this clone (shallow?): git fetch --unshallow" % commit)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "src"))
    steps = [["sh", "-c", 'git -C "$0" archive "$1" | tar -x -C "$2"', src, commit,
              os.path.join(out, "src")],
             ["meson", "setup", os.path.join(out, "build"), os.path.join(out, "src"),
              "-Dtests=false", "-Dnccl=disabled", "-Detcd=disabled"],
             ["ninja", "-C", os.path.join(out, "build"), "rendezvous/rdzvd", "client/rdzv"]]
    # A build under this test's own environment would inherit the
    # sanitizer settings of an ASan run; the previous release builds plain.
    env = {k: v for k, v in os.environ.items() if not k.endswith("SAN_OPTIONS")}
    for argv in steps:
        p = subprocess.run(argv, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            raise rdzvtest.Fail("building the previous release: %s: %s" % (
                " ".join(argv[:3]), (p.stdout + p.stderr)[-800:]))
    return exes


class Upgrade:
    def __init__(self, new, old, tmp):
        self.new, self.old, self.tmp = new, old, tmp
        # Below the kernel's ephemeral range (32768 up, by default).
        self.base = 27000 + os.getpid() % 40 * 64
        self.d = rdzvtest.Rdzvd(old["rdzvd"], tmp, "--no-nccl", "--port-base", str(self.base),
                                "--ports-per-rank", "8", "--port-limit", str(self.base + 512))
        self.started = time.monotonic()
        self.agents = {}
        self.ports = None

    def agent(self, release, rank, group=GROUP, world=2):
        """Starts release's agent for rank (replacing one running); its env file."""
        key = (group, rank)
        if key in self.agents:
            rdzvtest.stop_agent(self.agents[key])
        sock = os.path.join(self.tmp, "%s%d.sock" % (group, rank))
        log = open(os.path.join(self.tmp, "agent-%s%d.log" % (group, rank)), "a")
        log.write("--- %s agent\n" % release["name"])
        log.flush()
        self.agents[key] = subprocess.Popen(
            [release["rdzv"], "agent", "--server", self.d.endpoint, "--group", group,
             "--world", str(world), "--rank", str(rank), "--host", "127.0.0.1",
             "--node", "n", "--socket", sock, "--heartbeat", "1",
             "--port-range", "%d-%d" % (self.base, self.base + 512)],
            stdout=subprocess.DEVNULL, stderr=log, env=release["env"])
        return sock + ".env"

    def envs(self, group=GROUP, world=2):
        return [read_env(os.path.join(self.tmp, "%s%d.sock.env" % (group, r)))
                for r in range(world)]

    def formed(self, epoch, group=GROUP):
        """Waits until every agent's env file says epoch; the envs."""
        def all_at():
            e = self.envs(group)
            return e if all(x.get("RDZV_EPOCH") == str(epoch) for x in e) else None
        return rdzvtest.wait_for(all_at, "every agent of %s at epoch %d" % (group, epoch),
                                 timeout=40)

    def alive(self, epoch):
        """Waits until status, through this release's CLI, shows the group
        complete at epoch with both members heard from since rdzvd started.
        A restarted rdzvd counts its members alive for a while without a
        word from them; a member last seen at most 1 s ago, 3 s or more
        after the start, has heartbeats that are taken (--heartbeat 1)."""
        s, _ = rdzvtest.until_status(
            self.new["rdzv"], self.d.endpoint, GROUP,
            lambda s: s["epoch"] == epoch and s["complete"]
            and time.monotonic() - self.started >= 3 and len(s.get("members", [])) == 2
            and all(m.get("alive") and m.get("last_seen_s", 99) <= 1 for m in s["members"]),
            "group %s complete at epoch %d, both members heard from" % (GROUP, epoch),
            timeout=40)
        return s

    def same_plans(self, envs):
        rdzvtest.check([e["RDZV_PORTS"] for e in envs] == self.ports,
                       "the plans changed: %s, before %s" % (
                           [e["RDZV_PORTS"] for e in envs], self.ports))

    def running(self):
        dead = {k: p.returncode for k, p in self.agents.items() if p.poll() is not None}
        rdzvtest.check(not dead, "agents exited: %s" % dead)

    def rdzvd(self, release):
        """Replaces rdzvd by release's, on the same journal and endpoint."""
        rc = self.d.stop()
        rdzvtest.check(rc == 0, "rdzvd exited %s at SIGTERM" % rc)
        self.d.exe = release["rdzvd"]
        self.d.start()
        self.started = time.monotonic()

    # The steps, in order: each builds on the one before.
    def formed_by_previous(self):
        for r in (0, 1):
            self.agent(self.old, r)
        envs = self.formed(1)
        self.ports = [e["RDZV_PORTS"] for e in envs]
        self.alive(1)
        return "epoch 1, ports %s" % [p.split(",")[0] for p in self.ports]

    def rdzvd_rolled_forward(self):
        self.rdzvd(self.new)
        s = self.alive(1)
        self.running()
        self.same_plans(self.formed(1))
        return "epoch %d, %d members heard from, previous agents running" % (
            s["epoch"], len(s["members"]))

    def agents_rolled_forward(self):
        epoch = 1
        for r in (1, 0):
            self.agent(self.new, r)
            epoch += 1
            self.same_plans(self.formed(epoch))
            self.alive(epoch)
        self.running()
        return "ranks 1 then 0 replaced: epoch %d, plans kept" % epoch

    def rolled_back(self):
        self.rdzvd(self.old)
        s = self.alive(3)
        self.same_plans(self.formed(3))
        self.agent(self.old, 1)
        self.same_plans(self.formed(4))
        self.alive(4)
        self.running()
        return "epoch 3 replayed by the previous rdzvd (%d members alive); rank 1 on the " \
               "previous agent re-formed epoch 4" % len(s["members"])

    def new_agents_previous_rdzvd(self):
        for r in (0, 1):
            self.agent(self.new, r, group="h")
        envs = self.formed(1, group="h")
        rdzvtest.check(len({e["RDZV_PORTS"] for e in envs}) == 2, envs)
        return "group h formed at epoch 1"

    def stop(self):
        for p in self.agents.values():
            rdzvtest.stop_agent(p)
        self.d.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--build-dir", required=True)
    opts = ap.parse_args()
    report = rdzvtest.Report()
    version, commit = previous_release(opts.source_root)
    try:
        old_rdzvd, old_rdzv = build_previous(opts.source_root, commit, opts.build_dir)
    except Skip as e:
        report.skip_all(str(e))
        return report.done()
    # meson points LD_LIBRARY_PATH at this release's librdzv, which would
    # win over the previous rdzv's own (its RUNPATH): its agents run
    # without it, on the library they were built with.
    old_env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    old = {"name": version, "rdzvd": old_rdzvd, "rdzv": old_rdzv, "env": old_env}
    new = {"name": "this", "rdzvd": os.environ["RDZVD"], "rdzv": os.environ["RDZV"],
           "env": dict(os.environ)}
    with tempfile.TemporaryDirectory(prefix="rdzv-upgrade-") as tmp:
        u = Upgrade(new, old, tmp)
        try:
            for name, fn in [
                    ("%s rdzvd and agents form the group" % version, u.formed_by_previous),
                    ("rdzvd upgraded on the same journal: %s agents keep heartbeating, "
                     "nothing re-forms" % version, u.rdzvd_rolled_forward),
                    ("rank Pods rolled to this release's agent, one at a time: the group "
                     "re-forms with its plans", u.agents_rolled_forward),
                    ("rolled back: the %s rdzvd replays this release's journal, and a %s "
                     "agent rejoins" % (version, version), u.rolled_back),
                    ("this release's agents form a group against the %s rdzvd" % version,
                     u.new_agents_previous_rdzvd)]:
                report.case(name, fn)
        finally:
            u.stop()
            if report.failed:
                rdzvtest.note(u.d.log()[-2000:])
                for f in sorted(os.listdir(tmp)):
                    if f.startswith("agent-"):
                        rdzvtest.note("%s: %s" % (f, open(os.path.join(tmp, f)).read()[-600:]))
    return report.done()


if __name__ == "__main__":
    sys.exit(main())
