# A torchrun worker: one gloo all-reduce, then it waits to be stopped; with
# TRAIN_EVERY set, an all-reduce every TRAIN_EVERY seconds meanwhile, so
# that a node that leaves makes the others' workers fail (as training
# would) and torchrun starts the next round.
import datetime, os, time
import torch
import torch.distributed as dist
print("START master=%s:%s restart=%s group_rank=%s" % (
    os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT"),
    os.environ.get("TORCHELASTIC_RESTART_COUNT"), os.environ.get("GROUP_RANK")), flush=True)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print("ROUND rank=%d world=%d sum=%g restart=%s master=%s:%s group_rank=%s" % (
    rank, world, t.item(), os.environ.get("TORCHELASTIC_RESTART_COUNT"),
    os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT"), os.environ.get("GROUP_RANK")),
    flush=True)
every = float(os.environ.get("TRAIN_EVERY", "0"))
end = time.monotonic() + float(os.environ.get("TRAIN_SLEEP", "120"))
while time.monotonic() < end:
    time.sleep(every or (end - time.monotonic()))
    if every:
        dist.all_reduce(torch.tensor([1.0]))
