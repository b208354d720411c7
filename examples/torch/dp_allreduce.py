#!/usr/bin/env python3
"""A torch.distributed NCCL start and a vLLM-like data-parallel start, with
every port taken from the rdzv plan.

Run one process per rank under the agent, which exports MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE, RDZV_PORTS and VLLM_DP_MASTER_PORT:

    rdzv agent ... -- python3 dp_allreduce.py

1. init_process_group("nccl") from env:// (its TCPStore binds MASTER_PORT on
   rank 0), one all-reduce, checked.
2. vLLM-like: rank 0 hosts a TCPStore on the DP master port and a second one
   for the worker group on the next port of rank 0's plan; the other ranks
   connect. A value goes through each store, then an NCCL group built on the
   worker store runs one all-reduce, checked.

Under the LD_PRELOAD shim, rank 0's binds receive the agent's already bound
sockets; this script does nothing special for that. It prints one JSON line
per rank with the timings in ms and exits 0 when every check passed.
"""

import argparse
import datetime
import json
import os
import sys
import time

# NVLink SHARP needs multicast, which the device machines do not lend.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402  (after the NCCL setting above)
import torch.distributed as dist  # noqa: E402

EXIT_SKIP = 77


def env_int(name, default=None):
    value = os.environ.get(name)
    if value is None or value == "":
        if default is None:
            sys.exit(f"dp_allreduce: {name} is not set (run under `rdzv agent`)")
        return default
    try:
        return int(value)
    except ValueError:
        sys.exit(f"dp_allreduce: {name}={value!r} is not an integer")


def plan_size():
    """Ports per rank: every plan has as many ports as this rank's."""
    ports = [p for p in os.environ.get("RDZV_PORTS", "").split(",") if p.strip()]
    return len(ports) if ports else 1


def pick_ports(args, master_port):
    """DP master and worker-group ports, both inside rank 0's plan, which is
    MASTER_PORT .. MASTER_PORT + K - 1. MASTER_PORT itself is held by the
    env:// store of step 1, so a DP master port equal to it moves to the next
    plan port."""
    end = master_port + plan_size()
    if args.dp_port is not None:
        dp, dp_source = args.dp_port, "--dp-port"
    elif os.environ.get("VLLM_DP_MASTER_PORT"):
        dp, dp_source = env_int("VLLM_DP_MASTER_PORT"), "VLLM_DP_MASTER_PORT"
    else:
        dp, dp_source = master_port + 1, "plan (VLLM_DP_MASTER_PORT unset)"
    if dp == master_port:
        dp, dp_source = master_port + 1, "plan (VLLM_DP_MASTER_PORT is MASTER_PORT)"
    worker = args.worker_port
    if worker is None:
        worker = next(p for p in range(master_port + 1, end + 2) if p != dp)
    if args.dp_port is None and args.worker_port is None and max(dp, worker) >= end:
        sys.exit(f"dp_allreduce: rank 0's plan {master_port}..{end - 1} "
                 f"has no room for ports {dp} and {worker}")
    return dp, dp_source, worker


def pick_device(rank):
    count = torch.cuda.device_count()
    if count == 0:
        return None
    local = os.environ.get("LOCAL_RANK")
    return (int(local) if local else rank) % count


def checked_allreduce(group, rank, world, device, count):
    """All-reduces rank+1 everywhere; returns (ms, ok)."""
    tensor = torch.full((count,), float(rank + 1), device=device)
    torch.cuda.synchronize(device)
    start = time.monotonic()
    dist.all_reduce(tensor, group=group)
    torch.cuda.synchronize(device)
    ms = (time.monotonic() - start) * 1e3
    want = world * (world + 1) / 2
    return ms, bool(torch.all(tensor == want).item())


def exchange(store, name, rank, world, timeout):
    """Every rank sets one key and reads every other rank's; returns (ms, ok)."""
    start = time.monotonic()
    store.set(f"{name}/rank{rank}", f"{name}-{rank}")
    keys = [f"{name}/rank{r}" for r in range(world)]
    store.wait(keys, timeout)
    ok = all(store.get(keys[r]).decode() == f"{name}-{r}" for r in range(world))
    return (time.monotonic() - start) * 1e3, ok


def env_start(rank, world, device, count, timings):
    start = time.monotonic()
    dist.init_process_group("nccl", init_method="env://", rank=rank,
                            world_size=world, device_id=device)
    timings["env_init_ms"] = (time.monotonic() - start) * 1e3
    ms, ok = checked_allreduce(None, rank, world, device, count)
    timings["env_allreduce_ms"] = ms
    return ok


def vllm_start(addr, dp_port, worker_port, rank, world, device, count, timings):
    timeout = datetime.timedelta(seconds=60)
    start = time.monotonic()
    dp_store = dist.TCPStore(addr, dp_port, world, is_master=(rank == 0),
                             timeout=timeout)
    timings["dp_store_ms"] = (time.monotonic() - start) * 1e3
    ms, dp_ok = exchange(dp_store, "dp", rank, world, timeout)
    timings["dp_exchange_ms"] = ms

    start = time.monotonic()
    worker_store = dist.TCPStore(addr, worker_port, world, is_master=(rank == 0),
                                 timeout=timeout)
    timings["worker_store_ms"] = (time.monotonic() - start) * 1e3
    ms, worker_ok = exchange(worker_store, "worker", rank, world, timeout)
    timings["worker_exchange_ms"] = ms

    # A second NCCL communicator whose bootstrap goes through the worker
    # store, the way vLLM's workers build theirs.
    start = time.monotonic()
    prefix = dist.PrefixStore("worker_group", worker_store)
    backend = dist.ProcessGroupNCCL(prefix, rank, world)
    backend.eager_connect_single_device(device)
    timings["worker_init_ms"] = (time.monotonic() - start) * 1e3
    tensor = torch.full((count,), float(rank + 1), device=device)
    torch.cuda.synchronize(device)
    start = time.monotonic()
    backend.allreduce([tensor]).wait()
    torch.cuda.synchronize(device)
    timings["worker_allreduce_ms"] = (time.monotonic() - start) * 1e3
    sum_ok = bool(torch.all(tensor == world * (world + 1) / 2).item())
    backend.shutdown()
    return dp_ok and worker_ok and sum_ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=1 << 20,
                        help="floats per all-reduce (default 1048576)")
    parser.add_argument("--dp-port", type=int, default=None,
                        help="DP master port (default VLLM_DP_MASTER_PORT)")
    parser.add_argument("--worker-port", type=int, default=None,
                        help="worker-group port (default: next port of rank 0's plan)")
    args = parser.parse_args()

    rank, world = env_int("RANK"), env_int("WORLD_SIZE")
    addr, master_port = os.environ.get("MASTER_ADDR"), env_int("MASTER_PORT")
    if not addr:
        sys.exit("dp_allreduce: MASTER_ADDR is not set (run under `rdzv agent`)")
    dp_port, dp_source, worker_port = pick_ports(args, master_port)
    index = pick_device(rank)
    if index is None:
        print("dp_allreduce: no CUDA device", file=sys.stderr)
        return EXIT_SKIP
    device = torch.device("cuda", index)
    torch.cuda.set_device(device)

    timings = {}
    env_ok = env_start(rank, world, device, args.count, timings)
    vllm_ok = vllm_start(addr, dp_port, worker_port, rank, world, device,
                         args.count, timings)
    dist.destroy_process_group()

    report = {"rank": rank, "world": world, "device": index,
              "master": f"{addr}:{master_port}", "dp_port": dp_port,
              "dp_port_source": dp_source, "worker_port": worker_port,
              "torch": torch.__version__,
              "nccl": ".".join(map(str, torch.cuda.nccl.version())),
              "env_ok": env_ok, "vllm_ok": vllm_ok}
    report.update({k: round(v, 3) for k, v in timings.items()})
    print(json.dumps(report), flush=True)
    return 0 if env_ok and vllm_ok else 1


if __name__ == "__main__":
    sys.exit(main())
