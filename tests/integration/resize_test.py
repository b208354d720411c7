#!/usr/bin/env python3
"""rdzv group resize, end to end through the CLI and real agents (sidecar
mode, as in a Pod): a formed world-2 group grows to 3 and shrinks back to
2. The ranks that stay keep their port plans and rejoin by themselves
(their agents were started with --world 2), the new rank joins with
--world 3, and every agent's PATH.env ends with the new epoch and world;
at the shrink the rank past the world is told it is no longer in the group
(its agent exits 4 and lets its ports go). Rank 0's agent runs its engine
as CMD with --elastic: the engine runs on through both resizes, and is
told of each new epoch by its --on-epoch signal and its --on-epoch-exec
hook, which sees the new epoch and world. Resizes that make no sense are
refused and change nothing. One line per check (rdzvtest). Needs RDZVD and
RDZV."""
import json
import os
import subprocess
import sys
import tempfile

import rdzvtest


def read_env(path):
    try:
        with open(path) as f:
            return dict(l.split("=", 1) for l in f.read().splitlines() if "=" in l)
    except OSError:
        return {}


# The elastic engine: writes its pid, then a line per SIGUSR1 it gets.
ENGINE = r"""
import os, signal, sys, time
out = open(sys.argv[1], "a", buffering=1)
out.write("pid %d\n" % os.getpid())
signal.signal(signal.SIGUSR1, lambda *a: out.write("usr1\n"))
while True:
    time.sleep(1)
"""


def main():
    rdzvd, rdzv = os.environ["RDZVD"], os.environ["RDZV"]
    tmp = tempfile.TemporaryDirectory()
    base = 29000 + os.getpid() % 40 * 64
    d = rdzvtest.Rdzvd(rdzvd, tmp.name, "--no-nccl", "--port-base", str(base),
                       "--ports-per-rank", "16", "--port-limit", str(base + 1024))
    report = rdzvtest.Report()
    agents = {}

    engine_log = os.path.join(tmp.name, "engine.log")
    hook_log = os.path.join(tmp.name, "hook.log")

    def agent(rank, world, *cmd):
        sock = os.path.join(tmp.name, "a%d.sock" % rank)
        agents[rank] = subprocess.Popen(
            [rdzv, "agent", "--server", d.endpoint, "--group", "g", "--world", str(world),
             "--rank", str(rank), "--host", "127.0.0.1", "--node", "n", "--socket", sock,
             "--port-range", "%d-%d" % (base, base + 1024), "--heartbeat", "1", *cmd],
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(tmp.name, "agent%d.log" % rank), "w"))
        return sock + ".env"

    def group(*args):
        return subprocess.run([rdzv, "group", *args, "--server", d.endpoint, "--group", "g"],
                              capture_output=True, text=True, timeout=30)

    def status():
        out = subprocess.run([rdzv, "status", "--json", "--server", d.endpoint, "--group", "g"],
                             capture_output=True, text=True, timeout=20).stdout
        return json.loads(out)["groups"][0]

    try:
        envs = [agent(0, 2, "--elastic", "--on-epoch", "USR1", "--on-epoch-exec",
                      'echo "$RDZV_EPOCH $RDZV_WORLD" >> ' + hook_log, "--",
                      sys.executable, "-c", ENGINE, engine_log),
                agent(1, 2)]
        rdzvtest.wait_for(lambda: all(read_env(e).get("RDZV_EPOCH") == "1" for e in envs),
                          "epoch 1 formed", timeout=30)
        before = [read_env(e)["RDZV_PORTS"] for e in envs]
        # The engine is forked once epoch 1 is written; on a loaded machine
        # its interpreter may not be up yet, and a USR1 before its handler
        # is set would end it.
        rdzvtest.wait_for(lambda: os.path.exists(engine_log) and "pid" in open(engine_log).read(),
                          "rank 0's engine started", timeout=30)

        p = group("resize", "--world", "3")
        report.ok(p.returncode == 0 and "world 3, epoch 2" in p.stdout,
                  "rdzv group resize --world 3: epoch 2", (p.stdout, p.stderr))
        envs.append(agent(2, 3))
        rdzvtest.wait_for(lambda: all(read_env(e).get("RDZV_EPOCH") == "2" for e in envs),
                          "epoch 2 formed", timeout=30)
        after = [read_env(e) for e in envs]
        report.ok([a["RDZV_PORTS"] for a in after[:2]] == before
                  and all(a["RDZV_WORLD"] == "3" for a in after)
                  and not set(after[2]["RDZV_PORTS"].split(",")) & set(",".join(before).split(",")),
                  "grown to 3: ranks 0 and 1 rejoined by themselves with their plans, rank 2 "
                  "joined with its own; every PATH.env says world 3, epoch 2",
                  [(a["RDZV_WORLD"], a["RDZV_EPOCH"], a["RDZV_PORTS"][:20]) for a in after])
        rdzvtest.wait_for(lambda: os.path.exists(hook_log) and "2 3" in open(hook_log).read(),
                          "the --on-epoch-exec hook of epoch 2", timeout=10)
        lines = open(engine_log).read().split()
        report.ok(lines.count("pid") == 1 and lines.count("usr1") == 1
                  and agents[0].poll() is None,
                  "--elastic: rank 0's engine ran on through the resize, got its USR1 once, and "
                  "the hook saw epoch 2, world 3", (lines, open(hook_log).read()))

        p = group("resize", "--world", "2")
        code = agents[2].wait(timeout=30)
        log = open(os.path.join(tmp.name, "agent2.log")).read()
        rdzvtest.wait_for(lambda: all(read_env(e).get("RDZV_EPOCH") == "3" for e in envs[:2]),
                          "epoch 3 formed", timeout=30)
        g = status()
        report.ok(p.returncode == 0 and code == 4 and "no longer in it" in log
                  and g["world"] == 2 and g["complete"] and [m["rank"] for m in g["members"]]
                  == [0, 1] and all(read_env(e)["RDZV_WORLD"] == "2" for e in envs[:2])
                  and not os.path.exists(envs[2]),
                  "shrunk to 2: rank 2's agent is told it is no longer in the group and exits 4, "
                  "its env file gone; ranks 0 and 1 form epoch 3 of world 2",
                  (p.stdout, code, log[-300:], g["world"], g["complete"]))
        rdzvtest.wait_for(lambda: "3 2" in open(hook_log).read(), "the hook of epoch 3",
                          timeout=10)
        lines = open(engine_log).read().split()
        report.ok(lines.count("pid") == 1 and lines.count("usr1") == 2,
                  "... and through the shrink: still the one engine, told again (epoch 3, "
                  "world 2)", (lines, open(hook_log).read()))
        for args, why in ((["--on-epoch", "USR1"], "need --elastic"),
                          (["--elastic", "--on-epoch", "KILL"], "must name a signal")):
            p = subprocess.run([rdzv, "agent", "--server", d.endpoint, "--group", "x", "--world",
                                "1", "--rank", "0", "--socket", os.path.join(tmp.name, "x.sock"),
                                *args, "--", "true"], capture_output=True, text=True, timeout=20)
            report.ok(p.returncode == 2 and why in p.stderr,
                      "rdzv agent %s: usage error (exit 2)" % " ".join(args), p.stderr)

        for args, want, why in (
                (["resize", "--world", "0"], 2, "world 0: usage error"),
                (["resize"], 2, "no --world: usage error"),
                (["delete", "--world", "3"], 2, "--world with delete: usage error")):
            p = group(*args)
            report.ok(p.returncode == want, "rdzv group %s: %s" % (" ".join(args), why),
                      (p.returncode, p.stderr))
        p = subprocess.run([rdzv, "group", "resize", "--server", d.endpoint, "--group", "nosuch",
                            "--world", "2"], capture_output=True, text=True, timeout=30)
        report.ok(p.returncode == 4 and "not_found" in p.stderr + p.stdout,
                  "a resize of a group that does not exist: refused, not_found", p.stderr)
        g = status()
        report.ok(g["world"] == 2 and g["epoch"] == 3,
                  "... and none of them changed the group", (g["world"], g["epoch"]))

        # A grow whose new rank does not come (yet): the group forms, naming
        # it; the ranks that stayed keep their engines and the old epoch's
        # PATH.env meanwhile. rdzvd killed in that window and restarted
        # replays one epoch with one set of plans: the new rank's arrival
        # completes that epoch, not another.
        plans = [read_env(e)["RDZV_PORTS"] for e in envs[:2]]
        p = group("resize", "--world", "3")
        g, _ = rdzvtest.until_status(rdzv, d.endpoint, "g",
                                     lambda s: s["epoch"] == 4 and s["joined"] == [0, 1],
                                     "ranks 0 and 1 rejoined epoch 4", timeout=30)
        lines = open(engine_log).read().split()
        report.ok(p.returncode == 0 and not g["complete"] and g["missing"] == [2]
                  and g["world"] == 3 and all(read_env(e)["RDZV_EPOCH"] == "3"
                                              and read_env(e)["RDZV_WORLD"] == "2"
                                              for e in envs[:2])
                  and lines.count("pid") == 1 and agents[0].poll() is None,
                  "grown to 3 with rank 2 not started: epoch 4 forming, missing [2]; ranks 0 and "
                  "1 keep their engine and epoch 3's PATH.env (world 2) meanwhile",
                  (g["complete"], g["missing"], [read_env(e)["RDZV_EPOCH"] for e in envs[:2]]))
        d.restart()
        g = status()
        ports = {m["rank"]: m["ports"] for m in g["members"]}
        report.ok(g["epoch"] == 4 and g["world"] == 3 and not g["complete"]
                  and g["missing"] == [2] and sorted(ports) == [0, 1],
                  "rdzvd killed (SIGKILL) in that window and restarted: epoch 4, world 3, still "
                  "forming with rank 2 missing", g)
        envs[2] = agent(2, 3)
        rdzvtest.wait_for(lambda: all(read_env(e).get("RDZV_EPOCH") == "4" for e in envs),
                          "epoch 4 formed", timeout=30)
        after = [read_env(e) for e in envs]
        g = status()
        report.ok(g["epoch"] == 4 and g["complete"] and all(a["RDZV_WORLD"] == "3" for a in after)
                  and [a["RDZV_PORTS"] for a in after[:2]] == plans
                  and not set(after[2]["RDZV_PORTS"].split(",")) & set(",".join(plans).split(",")),
                  "rank 2 came: epoch 4 formed (no other), ranks 0 and 1 on the plans they had "
                  "before the kill, rank 2 on its own",
                  (g["epoch"], g["complete"], [a["RDZV_PORTS"][:24] for a in after]))
    except rdzvtest.Fail as e:
        report.ok(False, str(e))
    finally:
        for a in agents.values():
            rdzvtest.stop_agent(a)
        d.stop()
    return report.done()


if __name__ == "__main__":
    sys.exit(main())
