#!/usr/bin/python3
"""The agent's lifecycle: epochs when engines come and go, `-- CMD` and its
signals, a deleted or re-planned group, a rank still taken (docs/agent.md)."""
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

from pod import PROBE, PY, WAIT_S, Fail, Pod, Skip, check, wait_for
import rdzvtest


def case_new_engine_epoch(pod):
    """A new engine process (after the last one went away) moves the group to a
    new epoch; the env file shows it and the old leases are back in the plan."""
    check(pod.env_file()["RDZV_EPOCH"] == "1", "first epoch")
    first = pod.py_json(PROBE + "print(json.dumps(scan(%d, 2, %d)))" % (pod.base, pod.limit))
    wait_for(lambda: pod.env_file().get("RDZV_EPOCH") == "2", "epoch 2 in the env file")
    second = pod.py_json(PROBE + "print(json.dumps(scan(%d, 2, %d)))" % (pod.base, pod.limit))
    check(first == second == pod.plan[:2], "leases after the engine went: %s %s" % (first, second))
    status = subprocess.run([pod.opts.rdzv, "status", "--json", "--server", pod.endpoint],
                            capture_output=True, text=True, timeout=WAIT_S)
    check('"epoch":2' in status.stdout.replace(" ", "") or '"epoch":3' in status.stdout.replace(" ", ""),
          "rdzv status: %s" % status.stdout)


# An engine as the StatefulSet example starts one: it notes the epoch of
# the env file it started from, holds a plan port through the shim (so the
# agent counts it as the engine) and waits to be killed.
EPOCH_ENGINE = """
import os, socket, sys, time
env = dict(l.split("=", 1) for l in open(sys.argv[1]).read().splitlines() if "=" in l)
open(sys.argv[2], "w").write(env["RDZV_EPOCH"])
s = socket.socket(); s.bind(("0.0.0.0", int(env["VLLM_PORT"])))
print("up", env["RDZV_EPOCH"], flush=True)
time.sleep(600)
"""


def case_epoch_follows(opts, index):
    """Two sidecar agents of one group. Rank 0's engine dies: the group moves
    to epoch 2, and rank 0's env file is gone until epoch 2 has formed. Rank
    1's engine, still on epoch 1, is then restarted (as a liveness probe that
    compares epochs would): its agent must not move the group again, or each
    rank's restart would restart the others without end."""
    tmp = tempfile.TemporaryDirectory(prefix="rdzv-epoch-")
    second = {}

    def start_rank1(pod):
        second["sock"] = os.path.join(tmp.name, "rank1.sock")
        second["log"] = os.path.join(tmp.name, "rank1.log")
        second["agent"] = subprocess.Popen(
            [opts.rdzv, "agent", "--server", pod.endpoint, "--group", "g%d" % index,
             "--world", "2", "--rank", "1", "--host", "127.0.0.1", "--node", "n",
             "--socket", second["sock"], "--port-range", "%d-%d" % (pod.base, pod.limit),
             "--shim", opts.shim, "--heartbeat", "3", "--timeout", "20"],
            stderr=open(second["log"], "w"))

    pod = Pod(opts, index, agent_args=["--world", "2"], before_agent=start_rank1)
    engines = []

    def engine(sock, name):
        p = subprocess.Popen([PY, "-c", EPOCH_ENGINE, sock + ".env", os.path.join(tmp.name, name)],
                             env=pod.env(RDZV_AGENT_SOCKET=sock), stdout=subprocess.PIPE, text=True)
        engines.append(p)
        line = p.stdout.readline().split()
        check(line[:1] == ["up"], "an engine did not start under the shim")
        return p, int(line[1])

    def epoch_of(sock):
        try:
            env = dict(l.split("=", 1) for l in open(sock + ".env").read().splitlines() if "=" in l)
        except FileNotFoundError:
            return None
        return int(env["RDZV_EPOCH"])

    try:
        wait_for(lambda: os.path.exists(second["sock"]), "rank 1's socket")
        e0, ep0 = engine(pod.sock, "e0")
        e1, ep1 = engine(second["sock"], "e1")
        check(ep0 == ep1 == 1, "both engines start in epoch 1: %d %d" % (ep0, ep1))
        e0.kill(); e0.wait()
        # Rank 1 heartbeats every 3 s, so epoch 2 takes that long to form.
        wait_for(lambda: epoch_of(pod.sock) is None, "rank 0's env file withdrawn until "
                 "epoch 2 forms", timeout=3)
        wait_for(lambda: epoch_of(second["sock"]) == 2 and epoch_of(pod.sock) == 2,
                 "epoch 2 in both env files")
        e1.kill(); e1.wait()     # what the liveness probe makes kubelet do
        time.sleep(7)            # two of rank 1's heartbeats: time for a needless move
        check(epoch_of(pod.sock) == 2 and epoch_of(second["sock"]) == 2,
              "the restart of an engine of epoch 1 moved the group again: %s %s"
              % (epoch_of(pod.sock), epoch_of(second["sock"])))
        _, n0 = engine(pod.sock, "n0")
        _, n1 = engine(second["sock"], "n1")
        check(n0 == n1 == 2, "the new engines start in epoch 2: %d %d" % (n0, n1))
        log = open(second["log"]).read()
        check("the engine of epoch 1 has gone" in log, "rank 1's agent log: %s" % log)
    finally:
        for p in engines:
            if p.poll() is None:
                p.kill()
                p.wait()
        if second.get("agent") and second["agent"].poll() is None:
            second["agent"].terminate()
            second["agent"].wait(timeout=10)
        pod.close()
        tmp.cleanup()


def case_cmd(opts, index):
    """With -- CMD: CMD gets the assignment, LD_PRELOAD (prepended),
    RDZV_AGENT_SOCKET; the agent exits with CMD's status; PATH.env and the
    socket exist while CMD runs."""
    code = ("import os, json; print(json.dumps({k: os.environ.get(k) for k in "
            "('LD_PRELOAD','RDZV_AGENT_SOCKET','VLLM_PORT','RDZV_EPOCH','MASTER_PORT',"
            "'RDZV_SERVER')}));"
            "s=os.environ['RDZV_AGENT_SOCKET']; assert os.path.exists(s) and os.path.exists(s+'.env');"
            "assert 'RDZV_SERVER=' + os.environ['RDZV_SERVER'] + chr(10) in open(s+'.env').read();"
            "raise SystemExit(7)")
    os.environ["LD_PRELOAD"] = "libfake-first.so"
    try:
        pod = Pod(opts, index, cmd=[PY, "-c", code])
    finally:
        del os.environ["LD_PRELOAD"]
    try:
        out, _ = pod.agent.communicate(timeout=WAIT_S)
        check(pod.agent.returncode == 7, "agent exit %d (CMD exits 7): %s"
              % (pod.agent.returncode, open(pod.agent_log).read()))
        env = json.loads(out.strip().splitlines()[-1])
        check(env["LD_PRELOAD"] == opts.shim + ":libfake-first.so", "LD_PRELOAD %s" % env["LD_PRELOAD"])
        check(env["RDZV_AGENT_SOCKET"] == pod.sock and env["VLLM_PORT"] == str(pod.plan[3])
              and env["RDZV_EPOCH"] == "1", "CMD env: %s" % env)
        check(env["RDZV_SERVER"] == pod.endpoint, "CMD's RDZV_SERVER: %s, not %s (the agent's "
              "--server), so its own rdzv kv calls go elsewhere" % (env["RDZV_SERVER"], pod.endpoint))
        check(not os.path.exists(pod.sock), "the socket outlived the agent")
    finally:
        pod.close()


def case_cmd_not_runnable(opts, index):
    """A CMD that exists but cannot be run: the agent exits 126 as rdzv
    join does (127 is for one that cannot be found)."""
    with tempfile.NamedTemporaryFile(prefix="rdzv-not-exec-", delete=False) as f:
        f.write(b"#!/bin/sh\nexit 0\n")
    os.chmod(f.name, 0o644)
    try:
        pod = Pod(opts, index, cmd=[f.name])
        try:
            pod.agent.communicate(timeout=WAIT_S)
            check(pod.agent.returncode == 126, "agent exit %d for a CMD without x: %s"
                  % (pod.agent.returncode, open(pod.agent_log).read()))
        finally:
            pod.close()
    finally:
        os.unlink(f.name)


def case_cmd_signal(opts, index):
    """SIGTERM to the agent reaches CMD; the agent exits as CMD did (143)."""
    pod = Pod(opts, index, cmd=[PY, "-c", "import time; print('up', flush=True); time.sleep(60)"])
    try:
        check(pod.agent.stdout.readline().strip() == "up", "CMD did not start")
        pod.agent.send_signal(signal.SIGTERM)
        pod.agent.wait(timeout=WAIT_S)
        check(pod.agent.returncode == 128 + signal.SIGTERM, "agent exit %d" % pod.agent.returncode)
    finally:
        pod.close()


SLEEPER = [PY, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(60)"]


def gone(pid):
    try:
        os.kill(pid, 0)
        return False
    except ProcessLookupError:
        return True


def plain_bind_ok(port):
    """A bind without the shim and without SO_REUSEPORT succeeds: nobody,
    the agent's reservation included, holds port."""
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def check_agent_ended(pod, rc, child, what):
    """The agent exited rc, its child is gone, and nothing is left behind:
    socket, PATH.env and every reservation of the plan."""
    try:
        pod.agent.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        raise Fail("%s: the agent still runs after %d s: %s"
                   % (what, WAIT_S, open(pod.agent_log).read()[-600:]))
    log = open(pod.agent_log).read()
    check(pod.agent.returncode == rc, "%s: agent exit %d, not %d: %s"
          % (what, pod.agent.returncode, rc, log))
    if child:
        wait_for(lambda: gone(child), "the agent's child to end")
    check(not os.path.exists(pod.sock) and not os.path.exists(pod.sock + ".env"),
          "%s: the agent left its socket or env file behind" % what)
    check(all(plain_bind_ok(p) for p in pod.plan), "%s: a plan port is still held" % what)
    return log


def case_group_deleted(opts, index):
    """`rdzv group delete` while the agent runs CMD: the next heartbeat is
    answered not_found, the agent stops CMD, releases its ports and exits 4
    (serving on would let the block's next owner share the ports)."""
    pod = Pod(opts, index, cmd=SLEEPER)
    try:
        child = int(pod.agent.stdout.readline())
        pod.run([opts.rdzv, "group", "delete", "--server", pod.endpoint, "--group",
                 "g%d" % index], env=dict(os.environ))
        log = check_agent_ended(pod, 4, child, "group deleted")
        check("no longer knows" in log, "the agent's log does not say why: %s" % log)
    finally:
        pod.close()


def case_replan(opts, index):
    """The group is deleted and its block given to another group before the
    agent notices (no heartbeat yet); the engine goes away, the agent joins
    again and rdzvd lays the group out on other ports. The agent must not
    write those (unserved) ports into PATH.env: it exits 4 and releases its
    own."""
    pod = Pod(opts, index, agent_args=["--heartbeat", "3600"])
    try:
        env = dict(os.environ)
        pod.run([opts.rdzv, "group", "delete", "--server", pod.endpoint, "--group",
                 "g%d" % index], env=env)
        other = pod.run([opts.rdzv, "join", "--server", pod.endpoint, "--group", "other",
                         "--world", "1", "--rank", "0", "--host", "127.0.0.1", "--node", "n",
                         "--nccl-id", "none", "--format", "env"], env=env).stdout
        check("RDZV_MASTER_PORT=%d" % pod.plan[0] in other,
              "the other group did not get the deleted group's block: %s" % other)
        pod.py(PROBE + "scan(%d, 1, %d)" % (pod.base, pod.limit))   # then it exits
        log = check_agent_ended(pod, 4, None, "new plan")
        check("releasing them" in log, "the agent's log does not say why: %s" % log)
    finally:
        pod.close()


def case_cmd_sighup(opts, index):
    """SIGHUP to the agent reaches CMD as SIGTERM does; the agent exits as CMD
    did (129) and cleans up, leaving no orphan."""
    pod = Pod(opts, index, cmd=SLEEPER)
    try:
        child = int(pod.agent.stdout.readline())
        pod.agent.send_signal(signal.SIGHUP)
        check_agent_ended(pod, 128 + signal.SIGHUP, child, "SIGHUP")
    finally:
        pod.close()


def case_sidecar_sigquit(opts, index):
    """SIGQUIT to a sidecar agent is a shutdown like SIGTERM: exit 0, socket,
    PATH.env and reservations gone."""
    pod = Pod(opts, index)
    try:
        pod.agent.send_signal(signal.SIGQUIT)
        check_agent_ended(pod, 0, None, "SIGQUIT")
    finally:
        pod.close()


def case_rank_taken(opts, index):
    """A `rdzv join` for rank 0 killed while it waits leaves rdzvd holding
    the rank until that join's deadline (rank_taken); the agent's first
    join for rank 0 retries until then instead of exiting 4."""
    group = "g%d" % index

    def status(pod):
        return pod.run([opts.rdzv, "status", "--json", "--server", pod.endpoint], env=dict(os.environ)
                       ).stdout.replace(" ", "")

    def old_waiter(pod):
        old = subprocess.Popen([opts.rdzv, "join", "--server", pod.endpoint, "--group", group,
                                "--world", "2", "--rank", "0", "--host", "127.0.0.2",
                                "--node", "n", "--nccl-id", "none", "--timeout", "3"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: '"host":"127.0.0.2"' in status(pod), "the old join to wait")
        old.kill()
        old.wait()
    pod = Pod(opts, index, cmd=SLEEPER, agent_args=["--world", "2"], before_agent=old_waiter)
    try:
        def agent_joined():
            if pod.agent.poll() is not None:
                raise Fail("the agent exited %d: %s" % (pod.agent.returncode,
                                                         open(pod.agent_log).read()))
            return '"host":"127.0.0.1"' in status(pod)
        wait_for(agent_joined, "the agent's join to take rank 0")
        check("held by a live session" in open(pod.agent_log).read(),
              "the agent never met rank_taken: %s" % open(pod.agent_log).read())
        pod.run([opts.rdzv, "join", "--server", pod.endpoint, "--group", group, "--world", "2",
                 "--rank", "1", "--host", "127.0.0.1", "--node", "n", "--nccl-id", "none",
                 "--timeout", "20"], env=dict(os.environ))
        child = int(pod.agent.stdout.readline())
        pod.agent.send_signal(signal.SIGTERM)
        check_agent_ended(pod, 128 + signal.SIGTERM, child, "rank_taken, then SIGTERM")
    finally:
        pod.close()


def case_env_file_mode(opts, index):
    """PATH.env holds the NCCL IDs and the plan. Without --allow-uid it is the
    agent's alone (0600); with --allow-uid UID it is mode 0640 and, from a
    root agent, owned by UID: that uid reads it, any other does not."""
    if os.geteuid() != 0:
        raise Skip("needs root to read the file as other uids")

    def read_as(path, uid):
        return subprocess.run(["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups",
                               "cat", path], capture_output=True).returncode

    for allow in ((), ("--allow-uid", "65534")):
        pod = Pod(opts, index, agent_args=allow)
        try:
            os.chmod(pod.tmp.name, 0o755)          # let the other uids reach it
            env = pod.sock + ".env"
            wait_for(lambda: os.path.exists(env), "PATH.env")
            st = os.stat(env)
            mode = st.st_mode & 0o777
            if not allow:
                check(mode == 0o600, "PATH.env without --allow-uid is mode %o" % mode)
                check(read_as(env, 65534) != 0, "uid 65534 read PATH.env without --allow-uid")
                continue
            check(mode == 0o640, "PATH.env with --allow-uid is mode %o, not 0640" % mode)
            check(st.st_uid == 65534, "PATH.env is owned by uid %d, not 65534" % st.st_uid)
            check(read_as(env, 65534) == 0, "the allowed uid cannot read PATH.env")
            check(read_as(env, 65533) != 0, "uid 65533, not allowed, read PATH.env")
        finally:
            pod.close()


def case_two_agents_one_netns(opts, index):
    """Two agents of one uid in one network namespace (hostNetwork Pods of
    two groups whose nodes have overlapping plans): SO_REUSEPORT would let
    both reserve the same ports, and the engines would split connections.
    The second exits 1 naming the first; once the first is gone it starts."""
    pod = Pod(opts, index)
    other_sock = os.path.join(pod.tmp.name, "other.sock")
    argv = [opts.rdzv, "agent", "--server", pod.endpoint, "--group", "other%d" % index,
            "--world", "1", "--rank", "0", "--host", "127.0.0.1", "--node", "m",
            "--socket", other_sock, "--port-range", "%d-%d" % (pod.base, pod.limit),
            "--shim", opts.shim, "--timeout", "20"]
    try:
        second = subprocess.run(argv, capture_output=True, text=True, timeout=WAIT_S)
        check(second.returncode == 1, "the second agent exited %d: %s"
              % (second.returncode, second.stderr))
        check("reserved by another rdzv agent in this network namespace (pid %d"
              % pod.agent.pid in second.stderr, "the second agent did not name the first: %s"
              % second.stderr)
        check(not os.path.exists(other_sock), "the refused agent left a socket")
        pod.stop_agent()
        third = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: os.path.exists(other_sock) or third.poll() is not None,
                     "the next agent's socket")
            check(os.path.exists(other_sock), "with the first agent gone the next did not "
                  "start: %s" % (third.stderr.read() if third.poll() is not None else ""))
        finally:
            third.terminate()
            third.wait(timeout=WAIT_S)
    finally:
        pod.close()


def case_failed_start_resumes(opts, index):
    """An agent that joins and then cannot reserve its plan (a port held by
    someone else) exits 1, but leaves its session: the next agent resumes
    the join, so the group stays at its epoch instead of moving to a new
    one for a rank whose engine never ran."""
    base = 27000 + 16 * index
    tmp = tempfile.TemporaryDirectory(prefix="rdzv-shim-")
    d = tmp.name
    rdzvd = rdzvtest.Rdzvd(opts.rdzvd, d, "--port-base", str(base), "--ports-per-rank", "8",
                           "--port-limit", str(base + 16), "--no-nccl")
    sock = os.path.join(d, "agent.sock")
    argv = [opts.rdzv, "agent", "--server", rdzvd.endpoint, "--group", "f%d" % index,
            "--world", "1", "--rank", "0", "--host", "127.0.0.1", "--node", "n",
            "--socket", sock, "--port-range", "%d-%d" % (base, base + 16), "--shim", opts.shim,
            "--timeout", "20"]

    def epoch():
        out = subprocess.run([opts.rdzv, "status", "--json", "--server", rdzvd.endpoint], capture_output=True,
                             text=True, timeout=WAIT_S).stdout
        return json.loads(out.strip().splitlines()[-1])["groups"][0]["epoch"]
    holder = socket.socket()
    try:
        holder.bind(("0.0.0.0", base + 3))      # a plan port, taken by another program
        holder.listen()
        first = subprocess.run(argv, capture_output=True, text=True, timeout=WAIT_S)
        check(first.returncode == 1 and "cannot reserve port %d" % (base + 3) in first.stderr,
              "the first agent exited %d: %s" % (first.returncode, first.stderr))
        check(os.path.exists(sock + ".session"), "the failed agent left no session behind")
        check(epoch() == 1, "after the failed start the group is at epoch %s" % epoch())
        holder.close()
        agent = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: os.path.exists(sock) or agent.poll() is not None, "the next agent")
            check(os.path.exists(sock), "the next agent did not start: %s"
                  % (agent.stderr.read() if agent.poll() is not None else ""))
            check(epoch() == 1, "the next agent moved the group to epoch %s" % epoch())
            check(not os.path.exists(sock + ".session"), "a serving agent kept its session file")
        finally:
            agent.terminate()
            agent.wait(timeout=WAIT_S)
    finally:
        holder.close()
        rdzvd.stop()
        tmp.cleanup()
