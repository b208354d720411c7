"""rdzv for Python: join a group through rdzvd and get this rank's
assignment (ports, master address, NCCL IDs, epoch), use the group's KV
space, and run torchrun on rdzv (`--rdzv-backend rdzv`, see
rdzv.torchrun). A binding of librdzv; docs/python.md in the repository.

    import rdzv
    with rdzv.Client("tcp://rdzvd:29400") as client:
        a = client.join("llm", world=4, rank=2)
        print(a.master_addr, a.named_ports.store, a.vllm_args)
"""
from .assignment import Assignment, Member, NamedPorts
from .client import Client
from .errors import RdzvError, Refused, Timeout, Unavailable, UsageError

__version__ = "0.2.0"
__all__ = ["Client", "Assignment", "Member", "NamedPorts", "RdzvError", "Refused", "Timeout",
           "Unavailable", "UsageError"]
