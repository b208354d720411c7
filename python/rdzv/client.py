"""Client: one connection to rdzvd through librdzv (rdzv_client_t).

ctypes releases the GIL during each call, so threads may block in join()
side by side; one Client per thread, as librdzv asks."""
from __future__ import annotations

import ctypes
import json
from typing import List, Optional

from . import _library
from .assignment import Assignment, parse_env
from .errors import ERR_USAGE, OK, RdzvError, error_for

_c = ctypes.c_void_p

# rdzvd's port when an endpoint names none (also the rdzv CLI's, and
# torchrun's for --rdzv-endpoint HOST).
DEFAULT_PORT = 29400


def _with_port(element: str) -> str:
    """One server of a list: "tcp://HOST" gets DEFAULT_PORT. librdzv adds it
    to a bare "HOST" but hands a URL to ZeroMQ as it is, and ZeroMQ refuses
    a tcp:// URL without a port ("Invalid argument")."""
    element = element.strip()
    if not element.startswith("tcp://"):
        return element                       # HOST, HOST:PORT, ipc://...: librdzv's
    addr = element[len("tcp://"):]
    if addr.startswith("["):                 # tcp://[v6] or tcp://[v6]:PORT
        return element if "]:" in addr else "tcp://%s:%d" % (addr, DEFAULT_PORT)
    if addr.count(":") > 1:                  # a bare IPv6 address, as librdzv reads one
        return "tcp://[%s]:%d" % (addr, DEFAULT_PORT)
    return element if ":" in addr else "tcp://%s:%d" % (addr, DEFAULT_PORT)


def normalize_endpoint(endpoint: str) -> str:
    """endpoint (one server, or a comma-separated list of rdzvd replicas)
    with DEFAULT_PORT added to each tcp://HOST that has none; the other
    forms ("HOST", "HOST:PORT", "tcp://HOST:PORT") are left to librdzv,
    which already reads a bare HOST as tcp://HOST:29400."""
    return ",".join(_with_port(e) for e in endpoint.split(","))


def _b(text: Optional[str]) -> Optional[bytes]:
    return None if text is None else text.encode()


def _s(raw: Optional[bytes]) -> Optional[str]:
    return None if raw is None else raw.decode()


class Client:
    """endpoint: rdzvd's ZeroMQ endpoint ("tcp://rdzvd:29400"; "rdzvd",
    "rdzvd:29400" and "tcp://rdzvd" mean the same, a missing port being
    29400; a comma-separated list names rdzvd's replicas). session None: a
    fresh one, what a new process should use; pass an old one to resume.
    members: ask for every rank's host and node in assignments. replace:
    joins take their rank from a live holder (a process known to be gone).
    router: the group's router URL, sent with each join (rdzvd registers
    the group's serving ranks there; docs/deployment.md, "Routing").
    request_timeout: seconds for status, KV, heartbeat and delete requests.
    library: librdzv's path (default: see rdzv._library). CURVE keys and
    group tokens come from RDZV_CURVE_SERVER_PUBLIC, RDZV_CURVE_SECRET and
    RDZV_GROUP_TOKEN, as for the rdzv command line."""

    def __init__(self, endpoint: str = "tcp://127.0.0.1:29400", *,
                 session: Optional[str] = None, members: bool = False, replace: bool = False,
                 router: Optional[str] = None,
                 request_timeout: Optional[float] = None, library: Optional[str] = None):
        self._lib = _library.load(library)
        endpoint = normalize_endpoint(endpoint)
        self.endpoint = endpoint
        err = ctypes.create_string_buffer(512)
        self._handle = _c(self._lib.rdzv_client_new(_b(endpoint), _b(session), err,
                                                    ctypes.sizeof(err)))
        if not self._handle:
            raise error_for(ERR_USAGE, err.value.decode()
                            or "cannot create a client for %s" % endpoint)
        if members:
            self._check(self._lib.rdzv_client_set_members(self._handle, True))
        if replace:
            self._check(self._lib.rdzv_client_set_replace(self._handle, True))
        if router:
            self._check(self._lib.rdzv_client_set_router(self._handle, _b(router)))
        if request_timeout is not None:
            self._check(self._lib.rdzv_client_set_request_timeout(
                self._handle, int(request_timeout * 1000)))

    def close(self) -> None:
        if getattr(self, "_handle", None):
            self._lib.rdzv_client_destroy(ctypes.byref(self._handle))

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    @property
    def session(self) -> str:
        return _s(self._lib.rdzv_client_session(self._h()))

    def _h(self):
        if not self._handle:
            raise error_for(ERR_USAGE, "the client is closed")
        return self._handle

    def _check(self, rc: int) -> None:
        if rc != OK:
            raise error_for(rc, _s(self._lib.rdzv_client_error(self._handle)) or "error %d" % rc,
                            _s(self._lib.rdzv_client_error_code(self._handle)) or "")

    def join(self, group: str, world: int, rank: int, *, host: Optional[str] = None,
             node: Optional[str] = None, timeout: Optional[float] = None,
             nccl_id: Optional[str] = None, nccl_ids: int = 0) -> Assignment:
        """Blocks until every rank has joined; this rank's Assignment.
        timeout in seconds (None: 60); nccl_id "server", "rank0", "none" or
        None (the group's, else the server's default); nccl_ids: IDs per
        epoch (0: 1). Raises Timeout, or Refused with the server's code."""
        args = _library.JoinArgs(_b(group), world, rank, _b(host), _b(node),
                                 0 if timeout is None else int(timeout * 1000), _b(nccl_id),
                                 nccl_ids)
        out = _c()
        self._check(self._lib.rdzv_join(self._h(), ctypes.byref(args), ctypes.byref(out)))
        try:
            env = _library.take_string(self._lib.rdzv_assignment_env(out)) or ""
            return Assignment.from_json(_s(self._lib.rdzv_assignment_json(out)), parse_env(env))
        finally:
            self._lib.rdzv_assignment_destroy(ctypes.byref(out))

    def heartbeat(self, group: str, rank: int, epoch: int,
                  serving: Optional[bool] = None) -> int:
        """Tells rdzvd the rank is alive, and with serving whether its
        engine answers its health check (None: says nothing); the group's
        current epoch. Refused with code "stale_epoch" once the group has
        moved past epoch."""
        current = ctypes.c_int64()
        flag = -1 if serving is None else int(bool(serving))
        self._check(self._lib.rdzv_heartbeat_serving(self._h(), _b(group), rank, epoch, flag,
                                                     ctypes.byref(current)))
        return current.value

    def kv_put(self, group: str, epoch: int, key: str, value: str) -> None:
        self._check(self._lib.rdzv_kv_put(self._h(), _b(group), epoch, _b(key), _b(value)))

    def kv_get(self, group: str, epoch: int, key: str) -> str:
        """The value; Refused with code "not_found" if there is none."""
        out = _c()
        self._check(self._lib.rdzv_kv_get(self._h(), _b(group), epoch, _b(key),
                                          ctypes.byref(out)))
        return _library.take_string(out)

    def kv_wait(self, group: str, epoch: int, key: str, timeout: float = 60) -> str:
        """The value once some rank has put it; Timeout after timeout seconds."""
        out = _c()
        self._check(self._lib.rdzv_kv_wait(self._h(), _b(group), epoch, _b(key),
                                           int(timeout * 1000), ctypes.byref(out)))
        return _library.take_string(out)

    def status(self, group: Optional[str] = None) -> List[dict]:
        """The groups rdzvd knows, as `rdzv status --json` prints them."""
        out = _c()
        self._check(self._lib.rdzv_status(self._h(), _b(group), ctypes.byref(out)))
        return json.loads(_library.take_string(out))

    def group_delete(self, group: str) -> None:
        self._check(self._lib.rdzv_group_delete(self._h(), _b(group)))

    def group_resize(self, group: str, world: int, fresh: bool = False) -> int:
        """Resizes a formed group to world ranks at its next epoch, which
        forms again (`rdzv group resize`), or closes a forming one at its
        ranks 0..world-1 if exactly they joined; the epoch. fresh: a new
        round, no rank keeping its place (`rdzv group resize --fresh`)."""
        epoch = ctypes.c_int64()
        call = self._lib.rdzv_group_resize_fresh if fresh else self._lib.rdzv_group_resize
        self._check(call(self._h(), _b(group), world, ctypes.byref(epoch)))
        return epoch.value


__all__ = ["Client", "RdzvError", "normalize_endpoint"]
