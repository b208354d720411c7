"""rdzv for Python: a small ctypes binding of librdzv (client/include/rdzv.h).

What a Python engine imports to join its group in-process::

    import rdzv
    with rdzv.Client("tcp://rdzvd:29400") as client:
        a = client.join("llm", world=4, rank=2)
        print(a.master_addr, a.master_port, a.ports)
        client.kv_put("llm", a.epoch, "ready/2", "yes")

The library is found through the variable LIBRDZV (a path), else the
system's search path (librdzv.so.0). ctypes releases the GIL during each
call, so threads may block in join() side by side; one Client per thread,
as librdzv asks. Failures raise RdzvError with librdzv's message, its result
(TIMEOUT, REFUSED, ...) and, for a refusal, the server's code ("bad_rank").
"""
import ctypes
import ctypes.util
import json
import os
import shlex

__all__ = ["Client", "Assignment", "RdzvError", "load_library",
           "OK", "ERR_USAGE", "ERR_TIMEOUT", "ERR_REFUSED", "ERR_IO"]

OK, ERR_USAGE, ERR_TIMEOUT, ERR_REFUSED, ERR_IO = 0, -1, -2, -3, -4
_RESULT_NAMES = {ERR_USAGE: "USAGE", ERR_TIMEOUT: "TIMEOUT", ERR_REFUSED: "REFUSED",
                 ERR_IO: "IO"}
_NCCL_ID_BYTES = 128


class RdzvError(Exception):
    """A librdzv call failed: result is the negative rdzv_result_t, code the
    server's error code for ERR_REFUSED ("" otherwise)."""

    def __init__(self, message, result=ERR_IO, code=""):
        super().__init__(message)
        self.result = result
        self.code = code

    @property
    def result_name(self):
        return _RESULT_NAMES.get(self.result, str(self.result))


class _JoinArgs(ctypes.Structure):
    # rdzv_join_args_t; a library built before nccl_ids existed reads only
    # the fields it knows, so the trailing one is harmless there.
    _fields_ = [("group", ctypes.c_char_p), ("world", ctypes.c_int), ("rank", ctypes.c_int),
                ("host", ctypes.c_char_p), ("node", ctypes.c_char_p),
                ("timeout_ms", ctypes.c_int), ("nccl_id", ctypes.c_char_p),
                ("nccl_ids", ctypes.c_int)]


_c = ctypes.c_void_p
_SIGNATURES = {
    "rdzv_client_new": (_c, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
    "rdzv_client_destroy": (None, [ctypes.POINTER(_c)]),
    "rdzv_client_session": (ctypes.c_char_p, [_c]),
    "rdzv_client_error": (ctypes.c_char_p, [_c]),
    "rdzv_client_error_code": (ctypes.c_char_p, [_c]),
    "rdzv_client_set_request_timeout": (ctypes.c_int, [_c, ctypes.c_int]),
    "rdzv_join": (ctypes.c_int, [_c, ctypes.POINTER(_JoinArgs), ctypes.POINTER(_c)]),
    "rdzv_heartbeat": (ctypes.c_int, [_c, ctypes.c_char_p, ctypes.c_int, ctypes.c_int64,
                                      ctypes.POINTER(ctypes.c_int64)]),
    "rdzv_kv_put": (ctypes.c_int, [_c, ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p,
                                   ctypes.c_char_p]),
    "rdzv_kv_get": (ctypes.c_int, [_c, ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p,
                                   ctypes.POINTER(_c)]),
    "rdzv_kv_wait": (ctypes.c_int, [_c, ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p,
                                    ctypes.c_int, ctypes.POINTER(_c)]),
    "rdzv_status": (ctypes.c_int, [_c, ctypes.c_char_p, ctypes.POINTER(_c)]),
    "rdzv_group_delete": (ctypes.c_int, [_c, ctypes.c_char_p]),
    "rdzv_assignment_destroy": (None, [ctypes.POINTER(_c)]),
    "rdzv_assignment_group": (ctypes.c_char_p, [_c]),
    "rdzv_assignment_epoch": (ctypes.c_int64, [_c]),
    "rdzv_assignment_rank": (ctypes.c_int, [_c]),
    "rdzv_assignment_world": (ctypes.c_int, [_c]),
    "rdzv_assignment_master_addr": (ctypes.c_char_p, [_c]),
    "rdzv_assignment_master_port": (ctypes.c_int, [_c]),
    "rdzv_assignment_port_count": (ctypes.c_size_t, [_c]),
    "rdzv_assignment_port": (ctypes.c_int, [_c, ctypes.c_size_t]),
    "rdzv_assignment_nccl_id_hex": (ctypes.c_char_p, [_c]),
    "rdzv_assignment_member_count": (ctypes.c_size_t, [_c]),
    "rdzv_assignment_member_host": (ctypes.c_char_p, [_c, ctypes.c_size_t]),
    "rdzv_assignment_member_node": (ctypes.c_char_p, [_c, ctypes.c_size_t]),
    "rdzv_assignment_json": (ctypes.c_char_p, [_c]),
    "rdzv_assignment_env": (_c, [_c]),
}
# Newer than the first release: bound when the library has them.
_OPTIONAL = {
    "rdzv_assignment_nccl_id_count": (ctypes.c_size_t, [_c]),
    "rdzv_assignment_nccl_id_hex_at": (ctypes.c_char_p, [_c, ctypes.c_size_t]),
    "rdzv_client_set_members": (ctypes.c_int, [_c, ctypes.c_bool]),
    "rdzv_assignment_local_rank": (ctypes.c_int, [_c]),
    "rdzv_assignment_local_world": (ctypes.c_int, [_c]),
}

_lib = None
_libc = ctypes.CDLL(None)
_libc.free.argtypes = [_c]
_libc.free.restype = None


def load_library(path=None):
    """Loads librdzv once: path, else $LIBRDZV, else the system's librdzv.so.0."""
    global _lib
    if _lib is not None:
        return _lib
    path = path or os.environ.get("LIBRDZV") or ctypes.util.find_library("rdzv") or "librdzv.so.0"
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise RdzvError(f"cannot load librdzv from {path} (set LIBRDZV to its path): {e}",
                        ERR_IO) from e
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    for name, (restype, argtypes) in _OPTIONAL.items():
        if hasattr(lib, name):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
    _lib = lib
    return lib


def _b(text):
    return None if text is None else text.encode()


def _s(raw):
    return None if raw is None else raw.decode()


def _take_string(ptr):
    """Copies a malloc'd C string and frees it."""
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode()
    finally:
        _libc.free(ptr)


class Assignment:
    """A rank's assignment. The fields are copied out of librdzv's object at
    construction, so an Assignment is a plain Python value."""

    def __init__(self, lib, handle):
        a = handle
        self.group = _s(lib.rdzv_assignment_group(a))
        self.epoch = lib.rdzv_assignment_epoch(a)
        self.rank = lib.rdzv_assignment_rank(a)
        self.world = lib.rdzv_assignment_world(a)
        self.master_addr = _s(lib.rdzv_assignment_master_addr(a))
        self.master_port = lib.rdzv_assignment_master_port(a)
        self.ports = [lib.rdzv_assignment_port(a, i)
                      for i in range(lib.rdzv_assignment_port_count(a))]
        self.nccl_id_hex = _s(lib.rdzv_assignment_nccl_id_hex(a))
        if hasattr(lib, "rdzv_assignment_nccl_id_count"):
            self.nccl_ids_hex = [_s(lib.rdzv_assignment_nccl_id_hex_at(a, i))
                                 for i in range(lib.rdzv_assignment_nccl_id_count(a))]
        else:
            self.nccl_ids_hex = [self.nccl_id_hex] if self.nccl_id_hex else []
        # Where this rank stands among its node's ranks (-1, 0: unknown).
        has_local = hasattr(lib, "rdzv_assignment_local_rank")
        self.local_rank = lib.rdzv_assignment_local_rank(a) if has_local else -1
        self.local_world = lib.rdzv_assignment_local_world(a) if has_local else 0
        self.members = [(_s(lib.rdzv_assignment_member_host(a, i)),
                         _s(lib.rdzv_assignment_member_node(a, i)))
                        for i in range(lib.rdzv_assignment_member_count(a))]
        self.json = _s(lib.rdzv_assignment_json(a))
        doc = json.loads(self.json)
        # The named ports (docs/concepts.md) and the node's place in the
        # group; an older rdzvd names none (dp_rpc_port 0).
        named = doc.get("named_ports") or {}
        self.store_port = named.get("store", self.master_port)
        self.dp_rpc_port = named.get("dp_rpc", 0)
        self.probe_ports = tuple(named.get("probe", (self.ports[0], self.ports[-1])))
        self.group_rank = doc.get("group_rank", -1)
        self.group_world = doc.get("group_world", 0)
        text = _take_string(lib.rdzv_assignment_env(a)) or ""
        # KEY=VALUE lines a shell can source: a value may be single-quoted.
        self.env = {k: "".join(shlex.split(v)) for k, v in
                    (line.split("=", 1) for line in text.splitlines() if "=" in line)}
        self.vllm_args = shlex.split(self.env.get("RDZV_VLLM_ARGS", ""))

    @property
    def nccl_id(self):
        """The 128 raw bytes of the first NCCL unique ID, or None."""
        return bytes.fromhex(self.nccl_id_hex) if self.nccl_id_hex else None

    def __repr__(self):
        return (f"Assignment(group={self.group!r}, epoch={self.epoch}, rank={self.rank}, "
                f"world={self.world}, master={self.master_addr}:{self.master_port}, "
                f"ports={self.ports[0] if self.ports else None}+{len(self.ports)})")


class Client:
    """One connection to rdzvd (librdzv's rdzv_client_t). session None: a
    fresh one, what a new process should use; pass the old one to resume."""

    def __init__(self, endpoint, session=None, library=None, members=False):
        """members: ask for every rank's host and node in the assignment
        (Assignment.members; O(world) per rank, so off by default)."""
        self._lib = load_library(library)
        err = ctypes.create_string_buffer(512)
        self._handle = _c(self._lib.rdzv_client_new(_b(endpoint), _b(session), err,
                                                    ctypes.sizeof(err)))
        if not self._handle:
            raise RdzvError(err.value.decode() or f"cannot create a client for {endpoint}",
                            ERR_USAGE)
        if members:
            self._lib.rdzv_client_set_members(self._handle, True)

    def close(self):
        if getattr(self, "_handle", None):
            self._lib.rdzv_client_destroy(ctypes.byref(self._handle))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    @property
    def session(self):
        return _s(self._lib.rdzv_client_session(self._h()))

    def _h(self):
        if not self._handle:
            raise RdzvError("the client is closed", ERR_USAGE)
        return self._handle

    def _check(self, rc):
        if rc != OK:
            raise RdzvError(_s(self._lib.rdzv_client_error(self._handle)) or f"error {rc}",
                            rc, _s(self._lib.rdzv_client_error_code(self._handle)) or "")

    def set_request_timeout(self, seconds):
        """Deadline of status, KV, heartbeat and delete requests."""
        self._check(self._lib.rdzv_client_set_request_timeout(self._h(), int(seconds * 1000)))

    def join(self, group, world, rank, host=None, node=None, timeout=None, nccl_id=None,
             nccl_ids=0):
        """Blocks until every rank has joined; returns this rank's Assignment.
        timeout in seconds (None: librdzv's 60 s); nccl_id "server", "rank0",
        "none" or None (the server's default)."""
        args = _JoinArgs(_b(group), world, rank, _b(host), _b(node),
                         0 if timeout is None else int(timeout * 1000), _b(nccl_id), nccl_ids)
        out = _c()
        self._check(self._lib.rdzv_join(self._h(), ctypes.byref(args), ctypes.byref(out)))
        try:
            return Assignment(self._lib, out)
        finally:
            self._lib.rdzv_assignment_destroy(ctypes.byref(out))

    def heartbeat(self, group, rank, epoch):
        """Tells rdzvd the rank is alive; returns the group's current epoch.
        RdzvError with code "stale_epoch" once the group has moved on."""
        current = ctypes.c_int64()
        self._check(self._lib.rdzv_heartbeat(self._h(), _b(group), rank, epoch,
                                             ctypes.byref(current)))
        return current.value

    def kv_put(self, group, epoch, key, value):
        self._check(self._lib.rdzv_kv_put(self._h(), _b(group), epoch, _b(key), _b(value)))

    def kv_get(self, group, epoch, key):
        """The value, or RdzvError with code "not_found"."""
        out = _c()
        self._check(self._lib.rdzv_kv_get(self._h(), _b(group), epoch, _b(key),
                                          ctypes.byref(out)))
        return _take_string(out)

    def kv_wait(self, group, epoch, key, timeout=60):
        out = _c()
        self._check(self._lib.rdzv_kv_wait(self._h(), _b(group), epoch, _b(key),
                                           int(timeout * 1000), ctypes.byref(out)))
        return _take_string(out)

    def status(self, group=None):
        """The groups rdzvd knows (a list of dicts, as `rdzv status --json` prints)."""
        out = _c()
        self._check(self._lib.rdzv_status(self._h(), _b(group), ctypes.byref(out)))
        return json.loads(_take_string(out))

    def group_delete(self, group):
        self._check(self._lib.rdzv_group_delete(self._h(), _b(group)))
