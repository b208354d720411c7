# A torchrun worker: one gloo all-reduce, then it waits to be stopped.
import os, time
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print("ROUND rank=%d world=%d sum=%g restart=%s master=%s:%s group_rank=%s" % (
    rank, world, t.item(), os.environ.get("TORCHELASTIC_RESTART_COUNT"),
    os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT"), os.environ.get("GROUP_RANK")),
    flush=True)
time.sleep(float(os.environ.get("TRAIN_SLEEP", "120")))
