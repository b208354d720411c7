#!/usr/bin/env python3
"""What `rdzv agent -- CMD` does with CMD when the group moves to a new
epoch (here: `rdzv group resize --world 3` and a third rank joining), when
it is not --elastic. By default the agent stops CMD, says why and exits 5;
an agent started again in its place resumes its session and runs CMD in
the epoch the group is in, without moving the group once more. With
--restart the agent stops CMD and starts it again with the new epoch's
environment, and the new CMD finds the plan's ports free of the old one's
leases. Each case has its own rdzvd (rdzvtest); needs RDZVD and RDZV."""
import os
import signal
import subprocess
import sys
import tempfile

import rdzvtest
from rdzvtest import check

# The engine: a line when it starts (its epoch, world and whether its probe
# of VLLM_PORT through the shim got the port), and one when SIGTERM stops it.
ENGINE = r"""
import os, signal, socket, sys, time
out = open(sys.argv[1], "a", buffering=1)
def term(*_):
    out.write("term %d\n" % os.getpid())
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
probe = socket.socket()
try:
    probe.bind(("", int(os.environ["VLLM_PORT"])))
    got = "ok"
except OSError as e:
    got = "errno%d" % e.errno
out.write("start %d epoch %s world %s probe %s\n" % (
    os.getpid(), os.environ["RDZV_EPOCH"], os.environ["RDZV_WORLD"], got))
while True:
    time.sleep(1)
"""


def read_env(path):
    try:
        with open(path) as f:
            return dict(l.split("=", 1) for l in f.read().splitlines() if "=" in l)
    except OSError:
        return {}


def lines_of(path):
    return open(path).read().splitlines() if os.path.exists(path) else []


def gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


class Group:
    """rdzvd, and agents of group g on one node, each with its own log."""

    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.rdzv = os.environ["RDZV"]
        self.base = 20000 + os.getpid() % 64 * 128
        self.d = rdzvtest.Rdzvd(os.environ["RDZVD"], self.tmp.name, "--no-nccl", "--port-base",
                                str(self.base), "--ports-per-rank", "16", "--port-limit",
                                str(self.base + 128))
        self.agents = []
        self.engine_log = self.path("engine.log")

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def agent(self, rank, world, *args, log=None):
        sock = self.path("a%d.sock" % rank)
        p = subprocess.Popen(
            [self.rdzv, "agent", "--server", self.d.endpoint, "--group", "g", "--world",
             str(world), "--rank", str(rank), "--host", "127.0.0.1", "--node", "n",
             "--socket", sock, "--heartbeat", "1", "--health-interval", "0", *args],
            stdout=subprocess.DEVNULL, stderr=open(self.path(log or "agent%d.log" % rank), "a"))
        self.agents.append(p)
        return p

    def engine_args(self):
        return ["--", sys.executable, "-c", ENGINE, self.engine_log]

    def starts(self):
        return [l.split() for l in lines_of(self.engine_log) if l.startswith("start ")]

    def grow(self):
        """Epoch 1 of world 2 formed with rank 0's CMD started; then the
        group grown to 3 and rank 2 joined: epoch 2."""
        rdzvtest.wait_for(lambda: self.starts(), "rank 0's CMD in epoch 1", timeout=30)
        p = subprocess.run([self.rdzv, "group", "resize", "--server", self.d.endpoint,
                            "--group", "g", "--world", "3"], capture_output=True, text=True,
                           timeout=30)
        check(p.returncode == 0, "rdzv group resize: %s" % p.stderr)
        self.agent(2, 3)

    def epoch(self):
        return rdzvtest.group_status(self.rdzv, self.d.endpoint, "g")["epoch"]

    def log(self, name):
        return open(self.path(name)).read()

    def close(self):
        for a in self.agents:
            rdzvtest.stop_agent(a)
        self.d.stop()
        self.tmp.cleanup()


def case_stop(g):
    """Neither --elastic nor --restart: CMD stopped, one line why, exit 5."""
    a0 = g.agent(0, 2, *g.engine_args())
    g.agent(1, 2)
    g.grow()
    code = a0.wait(timeout=60)
    log = g.log("agent0.log")
    pid = int(g.starts()[0][1])
    check(code == 5, "the agent exited %s, not 5: %s" % (code, log[-600:]))
    check("moved from epoch 1 to 2" in log and "stopping it, exit 5" in log,
          "no line saying why: %s" % log[-600:])
    check("term %d" % pid in lines_of(g.engine_log) and gone(pid),
          "CMD (pid %d) was not stopped: %s" % (pid, lines_of(g.engine_log)))


def case_stop_then_resume(g):
    """The agent started again after exit 5 (as a supervisor would, with the
    same command line) runs CMD in epoch 2, and the group stays there."""
    a0 = g.agent(0, 2, *g.engine_args())
    g.agent(1, 2)
    g.grow()
    check(a0.wait(timeout=60) == 5, "the first agent did not exit 5")
    rdzvtest.wait_for(lambda: g.epoch() == 2, "epoch 2 formed", timeout=30)
    g.agent(0, 2, *g.engine_args(), log="agent0-again.log")
    rdzvtest.wait_for(lambda: len(g.starts()) == 2, "CMD started again", timeout=30)
    second = g.starts()[1]
    check(second[3:6:2] == ["2", "3"], "the new CMD runs in %s" % second)
    # Ranks 1 and 2's agents write their PATH.env as they get epoch 2's
    # assignment, beside rank 0's CMD starting: wait for them to be past 1.
    rdzvtest.wait_for(lambda: all(read_env(g.path("a%d.sock.env" % r)).get("RDZV_EPOCH")
                                  not in (None, "1") for r in range(3)),
                      "every rank's PATH.env past epoch 1", timeout=30)
    check(g.epoch() == 2 and all(read_env(g.path("a%d.sock.env" % r)).get("RDZV_EPOCH") == "2"
                                 for r in range(3)),
          "the group moved on again: epoch %d\n%s" % (g.epoch(), g.log("agent0-again.log")))


def case_restart(g):
    """--restart: CMD stopped and started again with epoch 2's environment;
    the new CMD's probe gets the port the old one had leased."""
    a0 = g.agent(0, 2, "--restart", *g.engine_args())
    g.agent(1, 2)
    g.grow()
    rdzvtest.wait_for(lambda: len(g.starts()) == 2, "CMD restarted", timeout=60)
    first, second = g.starts()
    log = g.log("agent0.log")
    check(first[3:] == ["1", "world", "2", "probe", "ok"], "the first CMD: %s" % first)
    check(second[3:] == ["2", "world", "3", "probe", "ok"],
          "the restarted CMD: %s\n%s" % (second, log[-600:]))
    check("term %s" % first[1] in lines_of(g.engine_log) and gone(int(first[1])),
          "the first CMD was not stopped")
    check(a0.poll() is None and "restarting CMD in epoch 2" in log, "agent: %s" % log[-600:])


def case_usage(g):
    """--restart with --elastic, or without CMD: usage errors."""
    for args, why in ((["--restart", "--elastic", "--", "true"], "give one"),
                      (["--restart"], "it needs -- CMD")):
        p = subprocess.run([g.rdzv, "agent", "--group", "x", "--world", "1", "--rank", "0",
                            "--socket", g.path("x.sock"), *args],
                           capture_output=True, text=True, timeout=20)
        check(p.returncode == 2 and why in p.stderr, "%s: %d %s" % (args, p.returncode, p.stderr))


def run_case(fn):
    def go():
        g = Group()
        try:
            return fn(g)
        finally:
            g.close()
    return go


def main():
    cases = [("not --elastic: CMD stopped at the epoch move, exit 5", case_stop),
             ("the agent started again resumes: CMD in epoch 2, no further epoch",
              case_stop_then_resume),
             ("--restart: CMD restarted with epoch 2's environment and free ports", case_restart),
             ("--restart with --elastic, or without CMD: usage errors", case_usage)]
    return rdzvtest.run([(name, run_case(fn)) for name, fn in cases])


if __name__ == "__main__":
    sys.exit(main())
