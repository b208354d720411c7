#!/usr/bin/env python3
"""One GPU process of the seed layout (docs/gpu.md): P Pods x G GPUs, one DP
rank per Pod, a Pod-local tensor-parallel (TP) group of G ranks and a
cross-Pod expert-parallel (EP) world of P*G ranks. tests/gpu/seed-layout.sh
starts it.

A vLLM-like start, in order:
  1. the DP master: Pod 0's local rank 0 hosts a TCPStore on the DP master
     port, the other ranks connect (rdzv: VLLM_DP_MASTER_IP/PORT from the
     agent's assignment; bare: 127.0.0.1 and VLLM_PORT, the port the user
     gave every Pod);
  2. each Pod's local rank 0 picks its TP store port the way vLLM's
     get_open_port() does (probe from VLLM_PORT, bind, close, skip the ten
     ports from VLLM_DP_MASTER_PORT), sleeps a little ("model loading"),
     then hosts the TP store there and publishes addr:port through the DP
     store; its local ranks connect and check the store's owner token;
  3. the EP communicator (bootstrap through the DP store) and the TP
     communicator (through the TP store), each a ProcessGroupNCCL;
  4. all-reduce, all-gather and reduce-scatter on both, results checked.

NCCL IDs (rdzv mode): the group has 1+P rdzvd-made IDs per epoch (agent with
RDZV_NCCL_IDS=1+P): ID 0 is the EP world's, ID 1+p Pod p's TP group's. The
shim (RDZV_SHIM_NCCL=1) answers the n-th ncclGetUniqueId of a process whose
RDZV_RANK is 0 with the n-th entry of RDZV_NCCL_UNIQUE_IDS; this script sets
both, per process, so that the process that is rank 0 of a communicator gets
that communicator's rdzvd ID: Pod 0 local 0 gets [EP, TP-0], Pod p local 0
gets [TP-p], the others none. Later epochs append to the list (the shim's
count goes on).

With --hold S it waits up to S seconds after a successful start for a new
epoch (rdzv: RDZV_EPOCH in the agent's env file changes; bare: the number in
DIR/epoch changes), then aborts its communicators and starts again from the
new assignment. A surviving DP master keeps its store (and port) across
epochs, as torch cannot close one; each epoch's keys have a prefix of
their own. One JSON line per start on stdout; exit 0 when all passed.
"""

import argparse
import datetime
import json
import os
import random
import socket
import sys
import time

T_PROC = time.time()
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

T_IMPORT = time.time()


class StartError(Exception):
    def __init__(self, kind, msg):
        super().__init__(msg)
        self.kind = kind


def read_env_file(path):
    env = {}
    with open(path) as f:
        for line in f:
            k, sep, v = line.rstrip("\n").partition("=")
            if sep:
                env[k] = v
    return env


def probe_scan(start):
    """vLLM's _get_open_port() with VLLM_PORT set: first port that binds."""
    port = start
    while port < 65536:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("", port))
                return port
        except OSError:
            port += 1
    raise StartError("eaddrinuse", "no free port from %d" % start)


def get_open_port(start, dp_master):
    """vLLM's get_open_port(): never one of the ten ports from the DP master."""
    for _ in range(64):
        port = probe_scan(start)
        if not dp_master <= port < dp_master + 10:
            return port
        start = dp_master + 10
    raise StartError("eaddrinuse", "every scan lands next to the DP master")


def classify(exc):
    text = str(exc)
    if isinstance(exc, StartError):
        return exc.kind
    low = text.lower()
    if "eaddrinuse" in low or "address already in use" in low or "errno: 98" in low:
        return "eaddrinuse"
    if "timeout" in low or "timed out" in low:
        return "timeout"
    return "error"


class Engine:
    def __init__(self, a):
        self.a = a
        self.ep_rank = a.pod * a.gpus + a.local
        self.ep_world = a.pods * a.gpus
        self.device = torch.device("cuda", a.local)
        self.ids_given = []          # this process's cumulative shim ID list
        self.pgs = []
        self.stores = []
        self.dp_server = None        # (address, port), TCPStore: the DP master's

    # --- the assignment -------------------------------------------------
    def epoch_now(self):
        try:
            if self.a.mode == "rdzv":
                return int(read_env_file(self.a.env_file).get("RDZV_EPOCH", "-1"))
            with open(os.path.join(self.a.dir, "epoch")) as f:
                return int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return -1

    def assignment(self):
        a = self.a
        vllm_port = int(os.environ.get("VLLM_PORT", "19500"))
        if a.mode == "bare":
            return {"epoch": self.epoch_now(), "dp_addr": "127.0.0.1",
                    "dp_port": vllm_port, "my_addr": "127.0.0.1",
                    "vllm_port": vllm_port, "ids": []}
        env = read_env_file(a.env_file)
        ids = [x for x in env.get("RDZV_NCCL_UNIQUE_IDS", "").split(",") if x]
        if len(ids) < 1 + a.pods:
            raise StartError("error", "assignment has %d NCCL IDs, need %d"
                             % (len(ids), 1 + a.pods))
        return {"epoch": int(env["RDZV_EPOCH"]), "dp_addr": env["VLLM_DP_MASTER_IP"],
                "dp_port": int(env["VLLM_DP_MASTER_PORT"]),
                "my_addr": a.addr, "vllm_port": vllm_port, "ids": ids}

    def hand_ids_to_shim(self, ids):
        """The IDs this process must produce, in the order it creates
        communicators (EP first, then TP)."""
        if self.a.mode != "rdzv" or self.a.local != 0:
            os.environ["RDZV_SHIM_NCCL"] = "0"
            return
        if self.a.pod == 0:
            self.ids_given += [ids[0], ids[1]]
        else:
            self.ids_given += [ids[1 + self.a.pod]]
        os.environ["RDZV_RANK"] = "0"
        os.environ["RDZV_SHIM_NCCL"] = "1"
        os.environ["RDZV_NCCL_UNIQUE_IDS"] = ",".join(self.ids_given)

    # --- one start --------------------------------------------------------
    def start(self, t_begin):
        a = self.a
        tm = {}
        asg = self.assignment()
        res = {"pod": a.pod, "local": a.local, "ep_rank": self.ep_rank,
               "epoch": asg["epoch"], "mode": a.mode, "dp_port": asg["dp_port"]}
        timeout = datetime.timedelta(seconds=a.store_timeout)
        run = "%s-e%d" % (a.run, asg["epoch"])
        self.hand_ids_to_shim(asg["ids"])

        t = time.time()
        master = self.ep_rank == 0
        base = self.dp_store(asg, master, timeout)
        if master:
            base.set("owner", run)
        self.wait_owner(base, run, timeout)
        dp = dist.PrefixStore(run + "/", base)
        tm["dp_store_ms"] = (time.time() - t) * 1e3

        t = time.time()
        key = "tp/%d" % a.pod
        if a.local == 0:
            tp_port = get_open_port(asg["vllm_port"], asg["dp_port"])
            time.sleep(random.uniform(0, a.load_delay))
            tp = dist.TCPStore("0.0.0.0", tp_port, None, True, timeout,
                               wait_for_workers=False)
            tp.set("owner", "%s-pod%d" % (run, a.pod))
            dp.set(key, "%s:%d" % (asg["my_addr"], tp_port))
        else:
            dp.wait([key], timeout)
            host, _, port = dp.get(key).decode().rpartition(":")
            tp_port = int(port)
            tp = dist.TCPStore(host, tp_port, None, False, timeout,
                               wait_for_workers=False)
        self.stores.append(tp)
        tp.wait(["owner"], timeout)
        if tp.get("owner").decode() != "%s-pod%d" % (run, a.pod):
            raise StartError("wrong_peer", "TP store on %d belongs to %s"
                             % (tp_port, tp.get("owner").decode()))
        res["tp_port"] = tp_port
        tm["tp_store_ms"] = (time.time() - t) * 1e3

        t = time.time()
        ep = dist.ProcessGroupNCCL(dist.PrefixStore("ep", dp), self.ep_rank, self.ep_world)
        self.pgs.append(ep)
        ep.eager_connect_single_device(self.device)
        tm["ep_init_ms"] = (time.time() - t) * 1e3
        t = time.time()
        tpg = dist.ProcessGroupNCCL(dist.PrefixStore("tp", tp), a.local, a.gpus)
        self.pgs.append(tpg)
        tpg.eager_connect_single_device(self.device)
        tm["tp_init_ms"] = (time.time() - t) * 1e3

        t = time.time()
        bad = self.check(ep, self.ep_rank, self.ep_world, "ep")
        bad += self.check(tpg, a.local, a.gpus, "tp")
        torch.cuda.synchronize(self.device)
        tm["collectives_ms"] = (time.time() - t) * 1e3
        if bad:
            raise StartError("wrong_result", "; ".join(bad))
        tm["start_ms"] = (time.time() - t_begin) * 1e3
        res.update({k: round(v, 1) for k, v in tm.items()})
        return res

    def dp_store(self, asg, master, timeout):
        """The DP store: the master's server lives as long as the process.
        A new epoch keeps the master's address and port unless the master
        Pod itself restarted, and the old server still holds that port
        (torch has no way to close it, and the communicators built on it may
        keep it alive past their abort), so a surviving master must not
        bind it again; each epoch's keys live under the epoch's prefix."""
        where = (asg["dp_addr"], asg["dp_port"])
        if master and self.dp_server and self.dp_server[0] == where:
            return self.dp_server[1]
        store = dist.TCPStore(where[0], where[1], None, master, timeout,
                              wait_for_workers=False)
        if master:
            self.dp_server = (where, store)
        else:
            self.stores.append(store)
        return store

    def wait_owner(self, store, run, timeout):
        """The store's owner must be this start's epoch. A surviving master
        may still name the epoch before for a moment; anything else is a
        stranger's store on our port."""
        deadline = time.time() + timeout.total_seconds()
        while True:
            store.wait(["owner"], timeout)
            owner = store.get("owner").decode()
            if owner == run:
                return
            if not owner.startswith(self.a.run + "-e") or time.time() > deadline:
                raise StartError("wrong_peer", "DP store belongs to %s" % owner)
            time.sleep(0.05)

    def check(self, pg, rank, world, name):
        n, bad = self.a.count, []
        dev = self.device
        x = torch.full((n,), float(rank + 1), device=dev)
        pg.allreduce([x]).wait()
        if not torch.all(x == world * (world + 1) / 2).item():
            bad.append(name + " all-reduce")
        outs = [torch.empty(n, device=dev) for _ in range(world)]
        pg.allgather([outs], [torch.full((n,), float(rank), device=dev)]).wait()
        if not all(torch.all(o == r).item() for r, o in enumerate(outs)):
            bad.append(name + " all-gather")
        ins = [torch.full((n,), float((rank + 1) * (c + 1)), device=dev) for c in range(world)]
        out = torch.empty(n, device=dev)
        pg.reduce_scatter([out], [ins]).wait()
        if not torch.all(out == (rank + 1) * world * (world + 1) / 2).item():
            bad.append(name + " reduce-scatter")
        return bad

    def teardown(self):
        for pg in self.pgs:
            try:
                (getattr(pg, "abort", None) or pg.shutdown)()
            except Exception:  # noqa: BLE001  (best effort on a broken group)
                pass
        self.pgs, self.stores = [], []


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=["rdzv", "bare"], required=True)
    p.add_argument("--pods", type=int, required=True)
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--pod", type=int, required=True)
    p.add_argument("--local", type=int, required=True)
    p.add_argument("--addr", default="127.0.0.1", help="this Pod's address")
    p.add_argument("--env-file", help="rdzv: the agent's SOCKET.env")
    p.add_argument("--dir", help="bare: shared directory (epoch file)")
    p.add_argument("--run", default="run")
    p.add_argument("--hold", type=float, default=0)
    p.add_argument("--count", type=int, default=1 << 18)
    p.add_argument("--load-delay", type=float, default=0.3)
    p.add_argument("--store-timeout", type=float, default=20)
    a = p.parse_args()
    torch.cuda.set_device(a.local)
    eng = Engine(a)
    ok = True
    while True:
        t_begin = time.time()
        try:
            res = eng.start(t_begin)
            res["ok"] = True
        except Exception as exc:  # noqa: BLE001  (reported, not raised)
            res = {"pod": a.pod, "local": a.local, "ok": False,
                   "kind": classify(exc), "err": str(exc)[:300]}
            ok = False
        res["import_ms"] = round((T_IMPORT - T_PROC) * 1e3, 1)
        res["t_done"] = round(time.time(), 3)
        print("RESULT " + json.dumps(res), flush=True)
        if not res["ok"] or a.hold <= 0:
            break
        epoch, until = res["epoch"], time.time() + a.hold
        while time.time() < until and eng.epoch_now() in (epoch, -1):
            time.sleep(0.05)
        if eng.epoch_now() in (epoch, -1):
            break
        eng.teardown()
        a.hold = 0
    eng.teardown()
    sys.stdout.flush()
    os._exit(0 if ok else 1)


if __name__ == "__main__":
    main()
