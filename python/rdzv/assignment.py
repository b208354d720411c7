"""What rdzvd told one rank of one epoch (docs/protocol.md, "join"), as a
plain Python value: every field of the JSON assignment."""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple


@dataclass(frozen=True)
class NamedPorts:
    """The roles of the plan layout (docs/concepts.md): the group's store
    and DP RPC ports (rank 0's plan), this rank's probe pool and its
    engine's HTTP API port."""
    store: int
    dp_rpc: int          # 0: an rdzvd too old to name it
    probe: Tuple[int, int]
    api: int = 0         # 0: an rdzvd too old to name it


@dataclass(frozen=True)
class Member:
    rank: int
    host: str
    node: str


@dataclass(frozen=True)
class Assignment:
    group: str
    epoch: int
    rank: int
    world: int
    master_addr: str
    master_port: int
    ports: List[int]
    port_range: Optional[Tuple[int, int]]
    local_rank: int                  # -1 / 0 from an rdzvd too old to send them
    local_world: int
    group_rank: int
    group_world: int
    named_ports: NamedPorts
    nccl_unique_id: Optional[str]    # 256 hex characters, or None
    nccl_unique_ids: List[str]
    members: List[Member]            # only when asked for (Client(members=True))
    json: str = field(repr=False)    # the assignment as rdzvd sent it
    env: Dict[str, str] = field(repr=False)   # what `rdzv join -- CMD` gets

    @classmethod
    def from_json(cls, text: str, env: Dict[str, str]) -> "Assignment":
        """From JSON librdzv has already validated."""
        d = json.loads(text)
        ports = list(d["ports"])
        named = d.get("named_ports") or {}
        probe = named.get("probe") or (ports[0], ports[-1])
        return cls(
            group=d["group"], epoch=d["epoch"], rank=d["rank"], world=d["world"],
            master_addr=d["master_addr"], master_port=d["master_port"], ports=ports,
            port_range=tuple(d["port_range"]) if d.get("port_range") else None,
            local_rank=d.get("local_rank", -1), local_world=d.get("local_world", 0),
            group_rank=d.get("group_rank", -1), group_world=d.get("group_world", 0),
            named_ports=NamedPorts(named.get("store", d["master_port"]), named.get("dp_rpc", 0),
                                   (probe[0], probe[1]), named.get("api", 0)),
            nccl_unique_id=d.get("nccl_unique_id"),
            nccl_unique_ids=list(d.get("nccl_unique_ids") or []),
            members=sorted((Member(m["rank"], m["host"], m["node"])
                            for m in d.get("members") or []), key=lambda m: m.rank),
            json=text, env=env)

    @property
    def nccl_id(self) -> Optional[bytes]:
        """The 128 raw bytes of the first NCCL unique ID, or None."""
        return bytes.fromhex(self.nccl_unique_id) if self.nccl_unique_id else None

    @property
    def vllm_args(self) -> List[str]:
        """The flags of an external-DP `vllm serve` rank ([] from an older rdzvd)."""
        return shlex.split(self.env.get("RDZV_VLLM_ARGS", ""))


def parse_env(text: str) -> Dict[str, str]:
    """librdzv's KEY=VALUE lines, their shell quoting removed."""
    out = {}
    for line in text.splitlines():
        key, eq, value = line.partition("=")
        if eq:
            out[key] = "".join(shlex.split(value)) if value else ""
    return out
