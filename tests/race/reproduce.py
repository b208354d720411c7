#!/usr/bin/python3
"""Reproduce vLLM's bootstrap-port race, and show it gone under rdzv.

Each trial starts G DP groups of R ranks at once; every rank is one "Pod"
running an engine (engine.c or engine.py) that follows vLLM's port logic.
Topologies:
  shared  all Pods share this network namespace (hostNetwork, one node)
  netns   one network namespace per Pod, veth pairs on a bridge in a namespace
          of its own, rdzvd in another (needs root and `ip netns`)
Models (--model): moe, where rank 0 hosts the DP group's stores and its
front end the DP RPC port (several deployments in one namespace race);
dense, where every Pod hosts its own world store (Pods in one namespace race).
Modes:
  bare    the engines alone, all with the same VLLM_PORT
  rdzv    rdzvd plus one `rdzv agent` per Pod running the engine under the
          LD_PRELOAD shim (the agent sets VLLM_PORT and LD_PRELOAD)
Scenarios (--scenario):
  start-up  every Pod of every group starts at once (the default)
  scale-up  (moe) the groups start one after another and serve, then all
            grow by one rank at once: rank 0 binds the new epoch's bootstrap
            ports beside the old epoch's.  Bare, the harness signals the
            engines and starts the new ranks; rdzv, it runs `rdzv group
            resize` for every group and starts the new ranks' agents, and
            the agents (--elastic --on-epoch USR1) tell the engines.
Prints one JSON line per topology on stdout and a summary on stderr.  Exit
status: 0, or 1 when --expect is not met, 2 on a harness error, 77 when every
requested topology was skipped (meson's protocol, as tests/lib/rdzvtest's).
Standard library and tests/lib only.
"""

import argparse
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import rdzvtest
except ImportError:     # run by hand (docs/race.md): meson's PYTHONPATH is not set
    sys.path.insert(0, os.path.join(HERE, "..", "lib"))
    import rdzvtest
from rdzvtest import SKIP, Fail, Skip  # noqa: E402

KINDS = ("eaddrinuse", "wrong_peer", "timeout", "no_result", "off_plan", "role_clash",
         "leftover", "server", "reserve_blocked")
NS_PREFIX = "rdzvrace"
NET_PREFIX = "10.213"          # only inside namespaces this harness creates
SERVER_ADDR = NET_PREFIX + ".0.1"
RDZVD_NS_PORT = 5555
KEEP_FAILED_MAX = 10
FAILED_IDS_MAX = 100
# Two runs in one namespace would share ports, and two agents of one uid
# would share a port through SO_REUSEPORT: shared-topology runs take turns.
SHARED_LOCK = os.path.join(tempfile.gettempdir(), "rdzv-race-shared.lock")
KILL_GRACE_S = 0.5
READY_POLL_S = 0.01
# scale-up: the agents' heartbeat.  A staying rank's agent learns of the
# resize at its next one; 1 s is the shortest the agent takes.
AGENT_HEARTBEAT_S = 1
# the listener roles that sit on a named port: dp-rpc always, dp-store in
# the scale-up scenario (the epoch's store port)
NAMED_ROLE = {"dp-rpc": "dp_rpc", "dp-store": "store"}


class Interrupted(Exception):
    pass


def s_run(cmd, check=True):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, check=check)


def s_pod_addr(i):
    return "%s.%d.%d" % (NET_PREFIX, 1 + i // 250, 2 + i % 250)


class Netns:
    """A bridge namespace, one namespace per Pod and one for rdzvd."""

    def __init__(self, n_pods):
        self.prefix = "%s%d" % (NS_PREFIX, os.getpid())
        self.bridge = self.prefix + "-br"
        self.server = self.prefix + "-srv"
        self.pods = ["%s-p%d" % (self.prefix, i) for i in range(n_pods)]
        self.made = []

    @staticmethod
    def check():
        if os.geteuid() != 0:
            raise Skip("netns topology needs root (ip netns add); skipped")
        if not shutil.which("ip"):
            raise Skip("netns topology needs iproute2's ip; skipped")

    @staticmethod
    def remove_stale():
        """Namespaces left by a run that was killed with SIGKILL."""
        out = s_run(["ip", "netns", "list"], check=False).stdout
        for line in out.splitlines():
            m = re.match(r"(%s(\d+)-\S+)" % NS_PREFIX, line)
            if m and not os.path.exists("/proc/%s" % m.group(2)):
                s_run(["ip", "netns", "del", m.group(1)], check=False)

    def _add(self, name):
        s_run(["ip", "netns", "add", name])
        self.made.append(name)
        s_run(["ip", "-n", name, "link", "set", "lo", "up"])

    def _attach(self, idx, name, addr):
        veth = "v%d" % idx
        s_run(["ip", "-n", self.bridge, "link", "add", veth, "type", "veth",
               "peer", "name", "eth0", "netns", name])
        s_run(["ip", "-n", self.bridge, "link", "set", veth, "master", "br0", "up"])
        s_run(["ip", "-n", name, "addr", "add", addr + "/16", "dev", "eth0"])
        s_run(["ip", "-n", name, "link", "set", "eth0", "up"])

    def setup(self):
        self.remove_stale()
        self._add(self.bridge)
        s_run(["ip", "-n", self.bridge, "link", "add", "br0", "type", "bridge"])
        s_run(["ip", "-n", self.bridge, "link", "set", "br0", "up"])
        self._add(self.server)
        self._attach(0, self.server, SERVER_ADDR)
        for i, name in enumerate(self.pods):
            self._add(name)
            self._attach(i + 1, name, s_pod_addr(i))

    def teardown(self):
        for name in reversed(self.made):
            s_run(["ip", "netns", "del", name], check=False)
        self.made = []

    def wrap(self, pod):
        name = self.server if pod is None else self.pods[pod]
        return ["ip", "netns", "exec", name]


class Rdzvd:
    """One rdzvd, in the Pods' namespace (shared) or one of its own (netns)."""

    def __init__(self, args, net, work):
        self.args, self.net, self.work = args, net, work
        self.daemon = None
        self.generation = 0

    def endpoint(self):
        return self.daemon.endpoint

    def start(self):
        """A new rdzvtest.Rdzvd each generation, in a directory of its own:
        its own restart would keep the state, and a restart here starts
        from a fresh one."""
        self.generation += 1
        gen = os.path.join(self.work, "netns" if self.net else "shared",
                           "rdzvd-%d" % self.generation)
        os.makedirs(gen)
        a = self.args
        bind = "tcp://%s:%s" % ((SERVER_ADDR, RDZVD_NS_PORT) if self.net
                                else ("127.0.0.1", "*"))
        extra = ["--port-base", str(a.port_base), "--ports-per-rank", str(a.ports_per_rank),
                 "--port-limit", str(a.port_limit)]
        if self.net:
            # a bridge in namespaces of our own: nobody else can reach it
            extra += s_supported(a.rdzvd, "--insecure-bind-any")
        # Set before it starts, so that stop() has a process to end even when
        # rdzvd never serves.
        self.daemon = rdzvtest.Rdzvd(a.rdzvd, gen, *extra, bind=bind, start=False)
        if self.net:
            self.daemon.prefix = self.net.wrap(None)
        self.daemon.new_session = True      # s_kill ends it by process group, as the Pods
        self.daemon.start()

    def group_name(self, trial, g):
        return "race-%d-%d-t%d-g%d" % (os.getpid(), self.generation, trial, g)

    def delete_groups(self, trial, n_groups):
        """As an operator deleting finished deployments: frees their plans."""
        events = []
        if self.daemon.proc.poll() is not None:
            return events      # ensure_running() reports it before the next trial
        for g in range(n_groups):
            cmd = [self.args.rdzv, "group", "delete", "--server", self.endpoint(),
                   "--group", self.group_name(trial, g), "--timeout", "2"]
            if self.net:
                cmd = self.net.wrap(None) + cmd
            res = s_run(cmd, check=False)
            if res.returncode != 0:
                events.append({"kind": "server", "what": "group-delete", "group": g,
                               "detail": "%s; rdzvd log: %s" % (res.stderr.strip(),
                                                                self.log_tail())})
        return events

    def resize_groups(self, trial, n_groups, world):
        """`rdzv group resize` for every group at once, as operators growing
        their deployments in one window.  Returns failures and each group's
        new epoch."""
        procs = []
        for g in range(n_groups):
            cmd = [self.args.rdzv, "group", "resize", "--server", self.endpoint(),
                   "--group", self.group_name(trial, g), "--world", str(world),
                   "--timeout", "5"]
            if self.net:
                cmd = self.net.wrap(None) + cmd
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        events, epochs = [], {}
        for g, p in enumerate(procs):
            out, err = p.communicate()
            m = re.search(r"epoch (\d+)", out)
            if p.returncode == 0 and m:
                epochs[g] = int(m.group(1))
            else:
                events.append({"kind": "server", "what": "group-resize", "group": g,
                               "detail": "exit %d: %s %s; rdzvd log: %s"
                                         % (p.returncode, out.strip(), err.strip(),
                                            self.log_tail())})
        return events, epochs

    def log_tail(self):
        return " | ".join(self.daemon.log().splitlines()[-3:])

    def ensure_running(self):
        """rdzvd gone (it crashed, or someone killed it): report and restart."""
        if self.daemon.proc.poll() is None:
            return []
        ev = {"kind": "server", "what": "rdzvd-exited",
              "detail": "status %s; rdzvd log: %s" % (self.daemon.proc.returncode,
                                                      self.log_tail())}
        # its pid may be reused: stop() must not signal it
        self.daemon = None
        self.start()
        return [ev]

    def stop(self):
        d, self.daemon = self.daemon, None
        if d is not None and d.proc is not None:
            s_kill(d.proc)


def s_supported(program, flag):
    """[FLAG] when PROGRAM's --help names it, else []."""
    res = subprocess.run([program, "--help"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, check=False)
    return [flag] if flag in res.stdout else []


def s_kill(proc):
    """Ends PROC and its process group: SIGTERM, then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)   # stragglers of the group
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def s_reap_leftovers(tdir):
    """A process of a trial that outlived its Pod (the engine's EngineCore,
    an agent's child) could answer the next trial's dials: kill and report."""
    events = []
    needle = tdir.encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if any(needle in arg for arg in argv):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                continue
            events.append({"kind": "leftover", "what": os.path.basename(argv[0].decode()),
                           "detail": "pid %s: %s" % (pid, b" ".join(argv)[-200:].decode())})
    return events


class Harness:
    def __init__(self, args):
        self.args = args
        self.live = []
        self.current = None
        self.kept = 0

    def pods_per_group(self):
        a = self.args
        return a.ranks + (1 if a.scenario == "scale-up" else 0)

    def step_budget_s(self):
        """How long one step of a trial may take: an engine's window after its
        list, its delay, the slack."""
        a = self.args
        return (a.timeout_ms + a.delay_max_ms) / 1000.0 + a.trial_slack_s

    def engine_cmd(self, trial, g, r, tdir, peer, world, epoch):
        a = self.args
        kind = a.engine
        if kind == "mixed":
            kind = "c" if (trial + g + r) % 2 == 0 else "py"
        cmd = [a.engine_c] if kind == "c" else [a.python, a.engine_py]
        cmd += ["--trial", str(trial), "--group", str(g), "--rank", str(r),
                "--world", str(world), "--dir", tdir, "--peer-host", peer,
                "--delay-max-ms", str(a.delay_max_ms),
                "--timeout-ms", str(a.timeout_ms), "--model", a.model,
                "--rpc-port", str(a.rpc_port + g * a.rpc_port_step)]
        if a.scenario == "scale-up":
            # serves until the harness's DIR/stop; its own limit only keeps
            # an engine that lost its harness from serving on
            limit_s = (a.groups + 2) * self.step_budget_s() + AGENT_HEARTBEAT_S
            cmd += ["--elastic", "--epoch", str(epoch), "--scale-world", str(a.ranks + 1),
                    "--elastic-ms", str(int(1000 * limit_s))]
        return cmd

    def pod_cmd(self, trial, g, r, tdir, net, rdzvd, world, epoch=1):
        a = self.args
        pod = g * self.pods_per_group() + r
        host = s_pod_addr(pod) if net else "127.0.0.1"
        peer = s_pod_addr(g * self.pods_per_group()) if net else "127.0.0.1"
        cmd = self.engine_cmd(trial, g, r, tdir, peer, world, epoch)
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        if a.mode == "bare":
            env["VLLM_PORT"] = str(a.vllm_port)
        else:
            env.pop("VLLM_PORT", None)
            group = rdzvd.group_name(trial, g)
            elastic = ["--elastic", "--on-epoch", "USR1", "--heartbeat",
                       str(AGENT_HEARTBEAT_S)] if a.scenario == "scale-up" else []
            cmd = [a.rdzv, "agent", "--server", rdzvd.endpoint(), "--group", group,
                   "--world", str(world), "--rank", str(r), "--host", host,
                   "--socket", os.path.join(tdir, "agent-g%d-r%d.sock" % (g, r)),
                   "--port-range", "%d-%d" % (a.port_base, a.port_limit)] \
                + (["--shim", a.shim] if a.shim else []) + elastic + a.agent_arg \
                + ["--"] + cmd
        if net:
            cmd = net.wrap(pod) + cmd
        return cmd, env

    def start_pod(self, trial, g, r, tdir, net, rdzvd, world, epoch=1):
        cmd, env = self.pod_cmd(trial, g, r, tdir, net, rdzvd, world, epoch)
        log = open(os.path.join(tdir, "pod-g%d-r%d.log" % (g, r)), "w")
        p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.live.append(p)
        return p

    def end_pods(self, procs, deadline):
        for _, _, p in procs:
            try:
                p.wait(max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                s_kill(p)
            self.live.remove(p)

    def run_trial(self, trial, net, rdzvd):
        a = self.args
        tdir = os.path.join(self.work, "netns" if net else "shared", "t%d" % trial)
        os.makedirs(tdir)
        if a.scenario == "scale-up":
            return self.run_scale_up(trial, tdir, net, rdzvd)
        t0 = time.monotonic()
        procs = [(g, r, self.start_pod(trial, g, r, tdir, net, rdzvd, a.ranks))
                 for g in range(a.groups) for r in range(a.ranks)]
        self.end_pods(procs, t0 + a.timeout_ms / 1000.0 + a.trial_slack_s)
        events = self.collect(trial, tdir, procs, net) + s_reap_leftovers(tdir)
        return events, time.monotonic() - t0

    @staticmethod
    def wait_ready(tdir, procs, epochs, deadline):
        """Until every Pod of PROCS has said its part of its group's epoch is
        done (DIR/ready-gG-rR-eE), or has ended."""
        def done(g, r, p):
            return p.poll() is not None or os.path.exists(
                os.path.join(tdir, "ready-g%d-r%d-e%d" % (g, r, epochs.get(g, 0))))
        while time.monotonic() < deadline and not all(done(*x) for x in procs):
            time.sleep(READY_POLL_S)

    def run_scale_up(self, trial, tdir, net, rdzvd):
        """The groups start one after another, as deployments started at
        different times, so that no start-up race gets in; once all serve,
        every group grows by one rank at once, each rank 0 binding its new
        epoch's bootstrap ports while the old epoch's stay bound."""
        a = self.args
        t0 = time.monotonic()
        procs, events = [], []
        for g in range(a.groups):
            group = [(g, r, self.start_pod(trial, g, r, tdir, net, rdzvd, a.ranks))
                     for r in range(a.ranks)]
            procs += group
            self.wait_ready(tdir, group, {g: 1}, time.monotonic() + self.step_budget_s())
        t_move = time.monotonic()
        if a.mode == "bare":
            # as vLLM's scale_elastic_ep() reaching every engine of each
            # deployment, all deployments in the same moment
            for _, _, p in procs:
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGUSR1)
            epochs = {g: 2 for g in range(a.groups)}
        else:
            resize_events, epochs = rdzvd.resize_groups(trial, a.groups, a.ranks + 1)
            events += resize_events
        procs += [(g, a.ranks, self.start_pod(trial, g, a.ranks, tdir, net, rdzvd,
                                              a.ranks + 1, epochs.get(g, 2)))
                  for g in range(a.groups)]
        # the staying ranks' agents learn of the resize at a heartbeat
        self.wait_ready(tdir, procs, epochs,
                        time.monotonic() + self.step_budget_s() + AGENT_HEARTBEAT_S)
        move_s = time.monotonic() - t_move
        # the deployments serve on; the trial ends here
        open(os.path.join(tdir, "stop"), "w").close()
        self.end_pods(procs, time.monotonic() + a.trial_slack_s)
        events += self.collect(trial, tdir, procs, net, epochs) + s_reap_leftovers(tdir)
        return events, time.monotonic() - t0, move_s

    def collect(self, trial, tdir, procs, net, epochs=None):
        events, results = [], {}
        for g, r, p in procs:
            path = os.path.join(tdir, "result-g%d-r%d.json" % (g, r))
            try:
                with open(path) as f:
                    res = json.load(f)
                events += [dict(ev, group=g, rank=r, engine=res["engine"])
                           for ev in res["events"]]
                events += self.check_managed(res, g, r)
                results[g, r] = res
            except (OSError, ValueError, KeyError):
                with open(os.path.join(tdir, "pod-g%d-r%d.log" % (g, r))) as f:
                    log = f.read()
                # the agent found a plan port held by a process outside the run
                # and refused to start the engine rather than let it race
                kind = "reserve_blocked" if "cannot reserve port" in log else "no_result"
                events.append({"kind": kind, "what": "pod", "group": g, "rank": r,
                               "detail": "exit %s: %s" % (p.returncode, log[-300:].strip())})
        for (g, r), res in results.items():
            # a rank that stayed must have moved with its group
            if epochs and r < self.args.ranks and not res.get("moved"):
                events.append({"kind": "timeout", "what": "epoch-move", "group": g, "rank": r,
                               "engine": res["engine"], "epoch": epochs.get(g),
                               "detail": "still in epoch %s when the trial ended"
                                         % res.get("epoch")})
        return events + self.check_roles(results, net)

    def check_roles(self, results, net):
        """Under rdzv, no listener may sit on a port the assignments name for
        another role, in its network namespace, in any epoch: the DP RPC
        listener on its group's dp_rpc port of its epoch, in the scale-up
        scenario the DP store on its group's store port of its epoch, every
        other store in the binding rank's probe pool and on no group's store
        or dp_rpc port."""
        if self.args.mode != "rdzv":
            return []
        ppg = self.pods_per_group()
        ns = (lambda g, r: g * ppg + r) if net else (lambda g, r: 0)
        roles = {}      # (namespace, port): {(group, role, epoch)}
        for (g, r), res in results.items():
            for epoch, named in s_named_by_epoch(res).items():
                for role in ("store", "dp_rpc"):     # rank 0's plan holds them
                    if named.get(role) is not None:
                        roles.setdefault((ns(g, 0), named[role]), set()).add((g, role, epoch))
        events = []
        for (g, r), res in results.items():
            by_epoch = s_named_by_epoch(res)
            for listener in res.get("listeners", []):
                role, port = listener[:2]
                epoch = listener[2] if len(listener) > 2 else res.get("epoch", 1)
                lo, hi = (by_epoch.get(epoch) or {}).get("probe", (0, -1))
                owners = roles.get((ns(g, r), port), set())
                want = NAMED_ROLE.get(role) if role == "dp-rpc" \
                    or self.args.scenario == "scale-up" else None
                if want:
                    others = sorted(o for o in owners if o[:2] != (g, want))
                    bad = ((g, want, epoch) not in owners
                           and "not its group's %s port of epoch %d" % (want, epoch)) \
                        or (others and "group %d's %s port of epoch %d" % others[0])
                elif owners:
                    bad = "group %d's %s port of epoch %d" % min(owners)
                else:
                    bad = not lo <= port <= hi and "outside its probe pool %d-%d" % (lo, hi)
                if bad:
                    events.append({"kind": "role_clash", "what": role, "group": g, "rank": r,
                                   "engine": res["engine"], "epoch": epoch,
                                   "detail": "port %d: %s" % (port, bad)})
        return events

    def check_managed(self, res, g, r):
        """Under rdzv every port an engine chose must be a managed one: else
        the shim was not in the way and a clean run would prove nothing."""
        a = self.args
        if a.mode != "rdzv":
            return []
        chosen = (res["ports"] + [res["tp_port"]] + [lsn[1] for lsn in res.get("listeners", [])]
                  + (res.get("moved") or {}).get("ports", []))
        # 0: a port the engine never got to choose
        off = [p for p in chosen if p and not a.port_base <= p < a.port_limit]
        if not off:
            return []
        return [{"kind": "off_plan", "what": "probe", "group": g, "rank": r,
                 "engine": res["engine"], "detail": "ports %s" % off}]

    def run_topology(self, topology):
        a = self.args
        net = rdzvd = None
        stats = self.current = {
            "mode": a.mode, "topology": topology, "engine": a.engine, "model": a.model,
            "scenario": a.scenario,
            "trials": a.trials, "groups": a.groups, "ranks": a.ranks,
            "failed_trials": 0, "failed_groups": 0,
            "failures": {k: 0 for k in KINDS}, "by_what": {}}
        if a.scenario == "scale-up":
            # where the failures came: the (staggered) start-up, the window
            # in which the groups grew, or neither (the harness's own)
            stats["by_phase"] = {"start-up": 0, "scale-up": 0, "other": 0}
        lock = None
        try:
            if topology == "netns":
                Netns.check()
                net = Netns(a.groups * self.pods_per_group())
                net.setup()
            else:
                lock = s_take_lock()
            if a.mode == "rdzv":
                rdzvd = Rdzvd(a, net, self.work)
                rdzvd.start()
            self.run_trials(stats, net, rdzvd)
        finally:
            for p in list(self.live):
                s_kill(p)
            self.live = []
            if rdzvd:
                rdzvd.stop()
            if net:
                net.teardown()
            if lock:
                lock.close()
        return stats

    def run_trials(self, stats, net, rdzvd):
        """On a signal, STATS holds the trials done so far, marked interrupted."""
        a = self.args
        total_s = 0.0
        moves = []
        stats["trials"] = 0
        try:
            for trial in range(a.trials):
                events = []
                if rdzvd and a.rdzvd_restart_every and trial \
                        and trial % a.rdzvd_restart_every == 0:
                    rdzvd.stop()
                    rdzvd.start()
                if rdzvd:
                    events += rdzvd.ensure_running()
                trial_events, took, *move = self.run_trial(trial, net, rdzvd)
                events += trial_events
                moves += move
                if rdzvd and not a.keep_groups:
                    events += rdzvd.delete_groups(trial, a.groups)
                total_s += took
                stats["trials"] += 1
                self.account(stats, trial, events)
                if events:
                    self.keep_failed(stats["topology"], trial, rdzvd)
        except Interrupted:
            stats["interrupted"] = True
            raise
        finally:
            stats["trial_ms_mean"] = round(1000 * total_s / max(1, stats["trials"]))
            if moves:
                # from growing every group to every rank's part of the new epoch
                stats["scale_up_ms_median"] = round(1000 * sorted(moves)[len(moves) // 2])

    def keep_failed(self, topology, trial, rdzvd):
        """Copies the first failed trials' files (logs, results, the rdzvd log
        so far) to --keep-failed DIR, for a post-mortem."""
        a = self.args
        if not a.keep_failed or self.kept >= KEEP_FAILED_MAX:
            return
        self.kept += 1
        dest = os.path.join(a.keep_failed, "%s-%d-t%d" % (topology, os.getpid(), trial))
        shutil.copytree(os.path.join(self.work, topology, "t%d" % trial), dest,
                        ignore=shutil.ignore_patterns("*.sock"))
        if rdzvd:
            shutil.copy(rdzvd.daemon.log_path, dest)
        print("kept trial %d in %s" % (trial, dest), file=sys.stderr)

    def account(self, stats, trial, events):
        stats["failed_groups"] += len({ev.get("group", -1) for ev in events})
        if events:
            stats["failed_trials"] += 1
            stats.setdefault("failed_trial_ids", [])
            if len(stats["failed_trial_ids"]) < FAILED_IDS_MAX:
                stats["failed_trial_ids"].append(trial)
            stats.setdefault("first_failures", [])
            if len(stats["first_failures"]) < 3:
                stats["first_failures"].append(dict(events[0], trial=trial))
        for ev in events:
            stats["failures"][ev["kind"]] += 1
            if "by_phase" in stats:
                epoch = ev.get("epoch")
                stats["by_phase"]["other" if epoch is None else
                                  "start-up" if epoch <= 1 else "scale-up"] += 1
            key = "%s/%s" % (ev["kind"], ev["what"])
            stats["by_what"][key] = stats["by_what"].get(key, 0) + 1
        if self.args.verbose and events:
            for ev in events:
                print("trial %d: %s" % (trial, json.dumps(ev)), file=sys.stderr)

    def run(self):
        a = self.args
        s_remove_stale_work()
        self.work = tempfile.mkdtemp(prefix="rdzv-race-%d-" % os.getpid())
        results, skipped = [], []
        try:
            for topology in (["shared", "netns"] if a.topology == "both" else [a.topology]):
                try:
                    st = self.run_topology(topology)
                except Interrupted:
                    if self.current and self.current["trials"]:
                        print(json.dumps(self.current), flush=True)
                        s_summary(self.current)
                    raise
                except Skip as e:
                    print("SKIP %s: %s" % (topology, e), file=sys.stderr)
                    skipped.append(topology)
                    continue
                print(json.dumps(st), flush=True)
                s_summary(st)
                results.append(st)
        finally:
            if a.keep:
                print("kept %s" % self.work, file=sys.stderr)
            else:
                shutil.rmtree(self.work, ignore_errors=True)
        if not results:
            return SKIP
        return 0 if s_expectation_met(a.expect, results) else 1


def s_take_lock():
    # read-only: whoever created the file, every user can lock it
    lock = os.fdopen(os.open(SHARED_LOCK, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("waiting for another shared-topology run (%s)" % SHARED_LOCK,
              file=sys.stderr)
        fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def s_remove_stale_work():
    """Work directories of runs that were killed with SIGKILL."""
    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):
        m = re.match(r"rdzv-race-(\d+)-", name)
        if m and not os.path.exists("/proc/%s" % m.group(1)):
            shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)


def s_named_by_epoch(res):
    """A result's named ports by epoch: its start's and, after a move, the
    new epoch's."""
    out = {}
    if res.get("named"):
        out[res.get("epoch", 1)] = res["named"]
    moved = res.get("moved")
    if moved and moved.get("named"):
        out[moved["epoch"]] = moved["named"]
    return out


def s_summary(st):
    f = st["failures"]
    scenario = "" if st["scenario"] == "start-up" else "/" + st["scenario"]
    print("%s/%s/%s%s: %d of %d trials failed, %d of %d groups (%d groups x %d ranks, "
          "%s engines, %d ms a trial): %s"
          % (st["mode"], st["topology"], st["model"], scenario, st["failed_trials"],
             st["trials"], st["failed_groups"], st["trials"] * st["groups"], st["groups"],
             st["ranks"], st["engine"], st["trial_ms_mean"],
             ", ".join("%s %d" % (k, f[k]) for k in KINDS)), file=sys.stderr)
    if "by_phase" in st:
        print("  by phase: %s; growing took %s ms (median)"
              % (", ".join("%s %d" % kv for kv in st["by_phase"].items()),
                 st.get("scale_up_ms_median", "-")), file=sys.stderr)
    for ev in st.get("first_failures", []):
        print("  e.g. %s" % json.dumps(ev), file=sys.stderr)


def s_expectation_met(expect, results):
    ok = True
    for st in results:
        if expect == "race" and st["topology"] == "shared" \
                and 2 * st["failed_trials"] <= st["trials"]:
            print("FAIL: expected the race in most trials of the shared topology",
                  file=sys.stderr)
            ok = False
        if expect == "clean" and st["failed_trials"] > 0:
            print("FAIL: expected no failures in %s" % st["topology"], file=sys.stderr)
            ok = False
    return ok


def s_parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 1)[1])
    p.add_argument("--mode", choices=("bare", "rdzv"), default="bare")
    p.add_argument("--topology", choices=("shared", "netns", "both"), default="shared")
    p.add_argument("--scenario", choices=("start-up", "scale-up"), default="start-up",
                   help="start-up: every Pod starts at once; scale-up (moe): the groups "
                        "start in turn and serve, then all grow by one rank at once")
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--groups", type=int, help="DP groups a trial (default 4; scale-up 2)")
    p.add_argument("--ranks", type=int, default=2,
                   help="ranks (Pods) a group (scale-up: before it grows)")
    p.add_argument("--engine", choices=("c", "py", "mixed"), default="mixed")
    p.add_argument("--model", choices=("moe", "dense"), default="moe",
                   help="moe: rank 0 hosts the DP stores; dense: every Pod its world store")
    p.add_argument("--engine-c", default=os.environ.get("RACE_ENGINE_C", ""))
    p.add_argument("--engine-py", default=os.path.join(HERE, "engine.py"))
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--vllm-port", type=int, default=19500, help="bare mode's VLLM_PORT")
    p.add_argument("--rpc-port", type=int, default=29550,
                   help="bare mode's --data-parallel-rpc-port (vLLM's default)")
    p.add_argument("--rpc-port-step", type=int,
                   help="bare mode: group g's RPC port is --rpc-port + g * STEP (default 0: "
                        "one port for all, as vLLM's default gives; scale-up 1: deployments "
                        "that all serve cannot share one)")
    p.add_argument("--delay-max-ms", type=int, default=300,
                   help="random delay between probe and bind (process start, imports, "
                        "the handshake)")
    p.add_argument("--timeout-ms", type=int, default=600, help="an engine's deadline")
    p.add_argument("--trial-slack-s", type=float, default=5.0,
                   help="after the deadline, how long before Pods are killed")
    p.add_argument("--rdzvd", default=os.environ.get("RDZVD", ""))
    p.add_argument("--rdzv", default=os.environ.get("RDZV", ""))
    p.add_argument("--shim", default=os.environ.get("RDZV_SHIM", ""),
                   help="librdzv_shim.so (default: the agent's own)")
    p.add_argument("--agent-arg", action="append", default=[],
                   help="extra argument for `rdzv agent` (repeatable)")
    p.add_argument("--port-base", type=int, default=20000)
    p.add_argument("--ports-per-rank", type=int, default=32,
                   help="at least 16: the probe pool starts at the plan's tenth port")
    p.add_argument("--port-limit", type=int, default=30000)
    p.add_argument("--rdzvd-restart-every", type=int, default=0,
                   help="restart rdzvd with a fresh state every N trials (0: never)")
    p.add_argument("--keep-groups", action="store_true",
                   help="do not delete each trial's groups from rdzvd afterwards")
    p.add_argument("--expect", choices=("race", "clean", "none"), default="none")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--keep-failed", metavar="DIR",
                   help="copy the first %d failed trials' files to DIR" % KEEP_FAILED_MAX)
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    scale_up = a.scenario == "scale-up"
    if a.groups is None:
        a.groups = 2 if scale_up else 4
    if a.rpc_port_step is None:
        a.rpc_port_step = 1 if scale_up else 0
    if scale_up and a.model != "moe":
        p.error("--scenario scale-up needs --model moe")
    if a.engine != "py" and not os.access(a.engine_c, os.X_OK):
        p.error("--engine %s needs --engine-c (the built rdzv-race-engine)" % a.engine)
    if a.mode == "rdzv" and not (os.access(a.rdzvd, os.X_OK) and os.access(a.rdzv, os.X_OK)):
        p.error("--mode rdzv needs --rdzvd and --rdzv (built executables)")
    if a.trials < 1 or a.groups < 1 or a.ranks < 1:
        p.error("--trials, --groups and --ranks must be positive")
    return a


def s_interrupt(signum, frame):
    raise Interrupted("signal %d" % signum)


def main(argv):
    args = s_parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, s_interrupt)
    try:
        return Harness(args).run()
    except Interrupted as e:
        print("interrupted (%s); cleaned up" % e, file=sys.stderr)
        return 2
    except (RuntimeError, Fail, subprocess.CalledProcessError, OSError) as e:
        detail = getattr(e, "stderr", "") or ""
        print("error: %s %s" % (e, detail.strip()), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
