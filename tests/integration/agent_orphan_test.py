#!/usr/bin/env python3
"""`rdzv agent -- CMD` killed with SIGKILL takes CMD with it: the agent
cannot forward anything then, so CMD gets the death signal the agent set
for it (SIGTERM). Without it CMD would run on, orphaned, holding
listeners on the plan's ports. Needs RDZVD and RDZV (rdzvtest)."""
import os
import signal
import subprocess
import sys
import tempfile

import rdzvtest
from rdzvtest import check


def gone(pid):
    """Whether pid has ended: no such process, or a zombie not yet reaped."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def case_sigkill(tmp):
    d = rdzvtest.Rdzvd(os.environ["RDZVD"], tmp, "--no-nccl")
    pid_file = os.path.join(tmp, "cmd.pid")
    agent = subprocess.Popen(
        [os.environ["RDZV"], "agent", "--server", d.endpoint, "--group", "orphan", "--world",
         "1", "--rank", "0", "--host", "127.0.0.1", "--socket", os.path.join(tmp, "a.sock"),
         "--health-interval", "0", "--",
         "/bin/sh", "-c", 'echo $$ > "$0.tmp" && mv "$0.tmp" "$0" && exec sleep 600', pid_file],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "agent.log"), "w"))
    pid = None
    try:
        rdzvtest.wait_for(lambda: os.path.exists(pid_file), "CMD started", timeout=30)
        pid = int(open(pid_file).read())
        check(not gone(pid), "CMD ended by itself")
        agent.kill()
        agent.wait()
        # The deadline only bounds the wait: CMD must die, however soon.
        rdzvtest.wait_for(lambda: gone(pid), "CMD (pid %d) to die with its agent" % pid,
                          timeout=60, step=0.05)
    finally:
        if pid and not gone(pid):
            os.kill(pid, signal.SIGKILL)
        rdzvtest.stop_agent(agent)
        d.stop()


def main():
    with tempfile.TemporaryDirectory() as tmp:
        return rdzvtest.run([("SIGKILL of the agent: CMD gets SIGTERM and ends", case_sigkill)],
                            tmp)


if __name__ == "__main__":
    sys.exit(main())
