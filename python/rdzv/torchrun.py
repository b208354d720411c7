"""A torchrun rendezvous backend: `torchrun --rdzv-backend rdzv
--rdzv-endpoint rdzvd:29400 --rdzv-id llm --nnodes 2 --nproc-per-node 1
train.py`.

One rdzv rank per torchrun agent (node); the group is --rdzv-id, its world
--nnodes. An elastic range (--nnodes MIN:MAX) has c10d's semantics: each
round is an epoch where every node joins anew (a "fresh" group_resize to
MAX starts it), and it closes when MAX nodes are in, or MIN are in and
last_call_timeout (seconds, default 30) has passed since (a group_resize
to the nodes that came closes it). A node that arrives after a round
closed starts the next one, which the others see through
num_nodes_waiting(); a node that leaves makes the others' workers fail,
and their next round closes with the survivors if they are MIN or more. The agents' store, which the
workers share (use_agent_store), is a TCPStore on the store port named in
rank 0's plan (docs/concepts.md), bound from the assignment to the listen:
rank 0's handler binds the socket itself (under librdzv_shim.so with an
`rdzv agent` on the node, the bind receives the agent's reservation) and
hands it to TCPStore(master_listen_fd=...). MASTER_ADDR and MASTER_PORT
come from the assignment. When a node restarts, rdzvd moves the group to a
new epoch; the other agents see it through num_nodes_waiting() and
rendezvous again, each epoch with a fresh store.

Options (--rdzv-conf KEY=VALUE,...): rank (this node's rank; default
RDZV_RANK, else the rank this host and node held before, else the first
rank nobody holds), node (default RDZV_NODE, else the hostname), host
(default --local-addr, else RDZV_HOST, else the address that routes to
rdzvd), join_timeout (seconds, default 600), last_call_timeout (seconds,
30; elastic ranges only). Any other key (c10d's read_timeout,
close_timeout, ..., torchrun's timeout) is ignored, and said so in one line.

This module imports torch only when torchrun asks for the handler, so the
package works without it; it needs torch 2.5 or later, and says so in one
line when it is loaded by an older one.
"""
from __future__ import annotations

import datetime
import os
import socket
import sys
import threading
import time
from typing import Any, Callable, Optional

from .client import DEFAULT_PORT, Client, normalize_endpoint
from .errors import RdzvError, Refused, Timeout

DEFAULT_JOIN_TIMEOUT_S = 600.0
DEFAULT_LAST_CALL_S = 30.0
CLOSER_STEP_S = 0.25
CLOSED_KEY = "torchrun/closed"

# The --rdzv-conf keys this backend reads (last_call_timeout only for an
# elastic range); any other is told to the user, not dropped in silence.
CONF_KEYS = ("rank", "node", "host", "join_timeout", "last_call_timeout")
# Why keys other backends read mean nothing here, for the user who copied
# them from a c10d or etcd command line.
_WHY_IGNORED = {
    "timeout": "torchrun's rendezvous timeout; use join_timeout",
    "heartbeat": "the handler heartbeats at most once a second, as torchrun polls",
}
_WHY_IGNORED.update((k, "c10d's; rdzvd keeps this rendezvous, not a TCPStore")
                    for k in ("read_timeout", "close_timeout", "keep_alive_interval",
                              "keep_alive_max_attempt", "is_host", "store_type", "use_libuv"))
_WHY_IGNORED.update((k, "etcd's; rdzvd keeps this rendezvous")
                    for k in ("protocol", "cacert", "cert", "key", "etcd_prefix"))
# torchrun puts timeout=900 into every backend's config itself
# (LaunchConfig); only another value can be the user's.
TORCHRUN_TIMEOUT = 900
_warned: set = set()


# torchrun finds backends through the torchrun.handlers entry points since
# torch 2.5; before it, --rdzv-backend rdzv is "not registered".
MIN_TORCH = (2, 5)


def check_torch_version(version: str) -> None:
    """Raises RuntimeError, in one line, unless version (torch.__version__)
    is MIN_TORCH or later."""
    try:
        have = tuple(int(x) for x in version.split("+")[0].split(".")[:2])
    except ValueError:
        return                          # a build we cannot read: let torch speak
    if have < MIN_TORCH:
        raise RuntimeError("rdzv's torchrun backend needs torch >= %d.%d (torchrun finds it "
                           "through the torchrun.handlers entry points); this is torch %s"
                           % (MIN_TORCH + (version,)))


def handler_creator() -> Callable[[Any], Any]:
    """The `torchrun.handlers` entry point: torchrun calls it with no
    arguments and registers what it returns as the creator of handlers."""
    return create_handler


def create_handler(params: Any) -> Any:
    return _handler_class()(params)


def _log(msg: str) -> None:
    print("rdzv torchrun: %s" % msg, file=sys.stderr, flush=True)


def _endpoint(params: Any) -> str:
    """--rdzv-endpoint as torchrun passes it: HOST[:PORT] (torchrun's own
    default port, 29400, is rdzvd's), a URL, or a list of replicas; the
    Client adds what is missing. Empty: rdzvd on this host."""
    return normalize_endpoint(params.endpoint or "127.0.0.1:%d" % DEFAULT_PORT)


def ignored_conf(config: dict, elastic: bool) -> list:
    """The --rdzv-conf keys of config this backend does not read, each with
    why: [(key, reason)], in config's order."""
    out = []
    for key, value in config.items():
        if key == "timeout" and str(value) == str(TORCHRUN_TIMEOUT):
            continue
        if key == "last_call_timeout" and not elastic:
            out.append((key, "applies to --nnodes MIN:MAX only"))
        elif key not in CONF_KEYS:
            out.append((key, _WHY_IGNORED.get(key, "unknown to this backend")))
    return out


def _warn_ignored(config: dict, elastic: bool) -> None:
    """One line naming the keys this backend ignores, once per set of keys
    in a process (torchrun may make a handler more than once)."""
    ignored = ignored_conf(config, elastic)
    keys = frozenset(k for k, _ in ignored)
    if not ignored or keys in _warned:
        return
    _warned.add(keys)
    _log("--rdzv-conf %s ignored; this backend reads only %s"
         % (", ".join("%s (%s)" % kv for kv in ignored), ", ".join(CONF_KEYS)))


def _bound_socket(port: int) -> socket.socket:
    """The store's socket, bound now: under the shim the bind hands over the
    agent's reservation; without it SO_REUSEADDR lets a store of the last
    epoch's TIME_WAIT go."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    return s


def _master_store(TCPStore: Any, addr: str, port: int, world: int,
                  timeout: datetime.timedelta, fd: int) -> Any:
    """The store's server on the socket bound for it. A torch whose libuv
    backend takes no listening descriptor gets the older backend."""
    try:
        return TCPStore(addr, port, world, True, timeout, wait_for_workers=False,
                        master_listen_fd=fd)
    except (RuntimeError, ValueError, TypeError) as e:
        _log("TCPStore(master_listen_fd=...) with the default backend failed (%s); "
             "using use_libuv=False" % e)
        return TCPStore(addr, port, world, True, timeout, wait_for_workers=False,
                        master_listen_fd=fd, use_libuv=False)


class _Base:
    """The handler's logic, without torch's base class (see _handler_class)."""

    def __init__(self, params: Any):
        if not 1 <= params.min_nodes <= params.max_nodes:
            raise ValueError("--nnodes %d:%d: MIN must be at least 1 and at most MAX"
                             % (params.min_nodes, params.max_nodes))
        self._params = params
        self._group = params.run_id
        self._world = params.max_nodes
        self._min = params.min_nodes
        self._elastic = params.min_nodes < params.max_nodes
        conf = params.config
        self._last_call_s = float(conf.get("last_call_timeout", DEFAULT_LAST_CALL_S))
        self._rank_wanted = conf.get("rank", os.environ.get("RDZV_RANK"))
        self._node = conf.get("node", os.environ.get("RDZV_NODE")) or socket.gethostname()
        self._host = (params.local_addr or conf.get("host", os.environ.get("RDZV_HOST")))
        self._join_timeout = float(conf.get("join_timeout", DEFAULT_JOIN_TIMEOUT_S))
        _warn_ignored(conf, self._elastic)
        self._endpoint = _endpoint(params)
        self._client = Client(self._endpoint)
        self._rank: Optional[int] = None
        self._assignment = None
        self._store = None
        self._listen = None
        self._closed = False
        self._moved_on = False
        self._last_beat = 0.0
        self._lock = threading.Lock()

    # What torchrun reads of the handler.
    def get_backend(self) -> str:
        return "rdzv"

    def get_run_id(self) -> str:
        return self._group

    @property
    def use_agent_store(self) -> bool:
        return True

    def _candidate_ranks(self):
        """The rank this node asks for, in order: the configured one; else
        the rank this host and node held (a restarted node gets its place
        back); else every rank, first free first."""
        if self._rank is not None:
            return [self._rank]
        if self._rank_wanted is not None:
            return [int(self._rank_wanted)]
        mine = []
        try:
            for g in self._client.status(self._group):
                for m in g.get("members", []):
                    if m.get("node") == self._node and (self._host is None
                                                        or m.get("host") == self._host):
                        mine.append(m["rank"])
        except Refused:
            pass
        if len(mine) == 1:
            return mine + [r for r in range(self._world) if r != mine[0]]
        return list(range(self._world))

    def _group_status(self, client: Client):
        """The group's status object, None when there is no such group."""
        try:
            groups = client.status(self._group)
        except Refused:
            return None
        return groups[0] if groups else None

    def _new_round(self) -> None:
        """Starts the next round: every node joins anew, the group's world
        MAX until the round closes. Refused when another node started it
        first (the group forms): that round is the one to join."""
        try:
            epoch = self._client.group_resize(self._group, self._world, fresh=True)
            _log("group %s: round %d begins" % (self._group, epoch))
        except Refused:
            pass

    def _join_elastic(self):
        """A node's part of a round (--nnodes MIN:MAX)."""
        deadline = time.monotonic() + self._join_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout("group %s: no round of %d to %d nodes closed within %g s"
                              % (self._group, self._min, self._world, self._join_timeout))
            g = self._group_status(self._client)
            if g is not None and g.get("complete"):
                mine = self._assignment is not None and self._assignment.epoch == g["epoch"]
                if not mine and g["world"] >= self._world:
                    time.sleep(1.0)       # full: this node waits for the next round
                else:
                    self._new_round()     # torchrun asks again, or a node came late
                continue
            joined = set(g["joined"]) if g else set()
            a = self._join_first_free(joined, g["epoch"] if g else 1, left)
            if a is not None:
                self._rank = a.rank
                return a
            time.sleep(0.2)

    def _join_first_free(self, joined, epoch: int, left: float):
        """Joins the round at the first rank no node has taken, while one
        closer (for the whole attempt, not one per rank tried) watches for
        the last call; the assignment, or None when the round closed or
        moved on meanwhile, or the join timed out."""
        closer = _Closer(self, epoch)
        try:
            for rank in [r for r in range(self._world) if r not in joined]:
                try:
                    return self._client.join(self._group, self._world, rank, host=self._host,
                                             node=self._node, timeout=max(left, 1.0),
                                             nccl_id="none")
                except Refused as e:
                    if e.code == "rank_taken":
                        continue          # another node came first: the next rank
                    if e.code in ("world_mismatch", "not_found", "stale_epoch"):
                        return None       # the round closed or moved on meanwhile
                    raise
                except Timeout:
                    return None           # said by the caller, in the handler's words
            return None
        finally:
            closer.stop()

    def _join(self):
        if self._elastic:
            return self._join_elastic()
        deadline = time.monotonic() + self._join_timeout
        while True:
            for rank in self._candidate_ranks():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Timeout("group %s: no rank of %d formed within %g s"
                                  % (self._group, self._world, self._join_timeout))
                try:
                    a = self._client.join(self._group, self._world, rank, host=self._host,
                                          node=self._node, timeout=left, nccl_id="none")
                except Refused as e:
                    if e.code == "rank_taken" and self._rank is None \
                            and self._rank_wanted is None:
                        continue            # another node holds it: try the next
                    raise
                self._rank = rank
                return a
            time.sleep(1.0)          # every rank held: wait for a holder to go quiet

    def next_rendezvous(self):
        from torch.distributed import PrefixStore, TCPStore
        from torch.distributed.elastic.rendezvous import (RendezvousClosedError,
                                                          RendezvousInfo,
                                                          RendezvousTimeoutError)
        from torch.distributed.elastic.rendezvous.api import RendezvousStoreInfo
        if self.is_closed():
            raise RendezvousClosedError("group %s is closed" % self._group)
        self._drop_store()
        try:
            a = self._join()
        except Timeout as e:
            raise RendezvousTimeoutError(str(e)) from e
        self._assignment, self._moved_on = a, False
        port = a.named_ports.store
        timeout = datetime.timedelta(seconds=self._join_timeout)
        if a.rank == 0:
            self._listen = _bound_socket(port)
            store = _master_store(TCPStore, a.master_addr, port, a.world, timeout,
                                  self._listen.fileno())
        else:
            store = TCPStore(a.master_addr, port, a.world, False, timeout)
        self._store = store
        _log("group %s epoch %d: rank %d of %d, store %s:%d" % (a.group, a.epoch, a.rank,
                                                                 a.world, a.master_addr, port))
        # Keys of one epoch never meet another's, though the port stays.
        prefixed = PrefixStore("rdzv/epoch%d" % a.epoch, store)
        return RendezvousInfo(prefixed, a.rank, a.world, RendezvousStoreInfo(a.master_addr, port))

    def _drop_store(self):
        self._store = None
        if self._listen is not None:
            self._listen.close()
            self._listen = None

    def _beat(self, force: bool = False) -> None:
        """A heartbeat at most every few seconds: rdzvd shows the rank alive,
        and says whether the group moved on (a node restarted)."""
        a = self._assignment
        now = time.monotonic()
        if a is None or self._moved_on or (not force and now - self._last_beat < 1.0):
            return
        with self._lock:
            self._last_beat = now
            try:
                current = self._client.heartbeat(a.group, a.rank, a.epoch)
                self._moved_on = current > a.epoch
            except Refused as e:
                if e.code in ("stale_epoch", "not_found"):
                    self._moved_on = True

    def num_nodes_waiting(self) -> int:
        self._beat()
        return 1 if self._moved_on else 0

    def is_closed(self) -> bool:
        if self._closed:
            return True
        a = self._assignment
        if a is None:
            return False
        try:
            self._closed = self._client.kv_get(a.group, a.epoch, CLOSED_KEY) == "1"
        except Refused:
            pass
        return self._closed

    def set_closed(self) -> None:
        self._closed = True
        a = self._assignment
        if a is not None:
            try:
                self._client.kv_put(a.group, a.epoch, CLOSED_KEY, "1")
            except Refused:
                pass

    def shutdown(self) -> bool:
        self._drop_store()
        self._client.close()
        return True


class _Closer:
    """While this node waits in a round: once MIN nodes are in and
    last_call_timeout has passed, closes the round at the nodes that came
    (each waiting node runs one; the first close wins, the others find the
    round closed). Its own client: the node's is blocked in the join."""

    def __init__(self, handler: "_Base", epoch: int):
        self._h, self._epoch = handler, epoch
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        h = self._h
        since = None
        try:
            client = Client(h._endpoint)
        except RdzvError:
            return
        with client:
            while not self._stop.wait(CLOSER_STEP_S):
                g = h._group_status(client)
                if g is None or g.get("complete"):
                    since = None
                    continue
                joined = sorted(g["joined"])
                if len(joined) < h._min or g["epoch"] != self._epoch:
                    since, self._epoch = None, g["epoch"]
                    continue
                since = since or time.monotonic()
                if (time.monotonic() - since >= h._last_call_s
                        and joined == list(range(len(joined)))):
                    try:
                        client.group_resize(h._group, len(joined))
                        _log("group %s: round %d closed at %d nodes (last call)"
                             % (h._group, g["epoch"], len(joined)))
                    except Refused:
                        pass      # another node closed it, or one more came

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


_CLASS = None


def _handler_class():
    """RdzvRendezvousHandler, made on first use so that torch is imported
    only by torchrun."""
    global _CLASS
    if _CLASS is None:
        import torch
        check_torch_version(torch.__version__)
        from torch.distributed.elastic.rendezvous import RendezvousHandler

        class RdzvRendezvousHandler(_Base, RendezvousHandler):
            """rdzv as a torchrun rendezvous backend (module rdzv.torchrun)."""
        _CLASS = RdzvRendezvousHandler
    return _CLASS
