"""Finding and loading librdzv, and the C signatures this package calls.

The package binds the C library rather than speaking rdzvd's protocol
itself: librdzv already resends a join across an rdzvd restart, keeps the
session, loads CURVE keys and group tokens (RDZV_CURVE_SERVER_PUBLIC,
RDZV_CURVE_SECRET, RDZV_GROUP_TOKEN) and makes rank 0's NCCL IDs, and one
implementation of those rules is one place to get them right.

Where the library comes from, first found wins:
  1. the path given to load() (Client(library=...)) or in RDZV_LIBRARY;
  2. the libdir pkg-config named when this package was built;
  3. `pkg-config --variable=libdir rdzv` now;
  4. the dynamic loader's own search (librdzv.so.0, ldconfig's cache).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
from typing import Optional

SONAME = "librdzv.so.0"

_c = ctypes.c_void_p


class JoinArgs(ctypes.Structure):
    """rdzv_join_args_t."""
    _fields_ = [("group", ctypes.c_char_p), ("world", ctypes.c_int), ("rank", ctypes.c_int),
                ("host", ctypes.c_char_p), ("node", ctypes.c_char_p),
                ("timeout_ms", ctypes.c_int), ("nccl_id", ctypes.c_char_p),
                ("nccl_ids", ctypes.c_int)]


SIGNATURES = {
    "rdzv_client_new": (_c, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
    "rdzv_client_destroy": (None, [ctypes.POINTER(_c)]),
    "rdzv_client_session": (ctypes.c_char_p, [_c]),
    "rdzv_client_error": (ctypes.c_char_p, [_c]),
    "rdzv_client_error_code": (ctypes.c_char_p, [_c]),
    "rdzv_client_set_request_timeout": (ctypes.c_int, [_c, ctypes.c_int]),
    "rdzv_client_set_replace": (ctypes.c_int, [_c, ctypes.c_bool]),
    "rdzv_client_set_members": (ctypes.c_int, [_c, ctypes.c_bool]),
    "rdzv_client_set_router": (ctypes.c_int, [_c, ctypes.c_char_p]),
    "rdzv_group_resize": (ctypes.c_int, [_c, ctypes.c_char_p, ctypes.c_int,
                                         ctypes.POINTER(ctypes.c_int64)]),
    "rdzv_group_resize_fresh": (ctypes.c_int, [_c, ctypes.c_char_p, ctypes.c_int,
                                               ctypes.POINTER(ctypes.c_int64)]),
    "rdzv_join": (ctypes.c_int, [_c, ctypes.POINTER(JoinArgs), ctypes.POINTER(_c)]),
    "rdzv_heartbeat": (ctypes.c_int, [_c, ctypes.c_char_p, ctypes.c_int, ctypes.c_int64,
                                      ctypes.POINTER(ctypes.c_int64)]),
    "rdzv_heartbeat_serving": (ctypes.c_int, [_c, ctypes.c_char_p, ctypes.c_int, ctypes.c_int64,
                                              ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]),
    "rdzv_kv_put": (ctypes.c_int, [_c, ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p,
                                   ctypes.c_char_p]),
    "rdzv_kv_get": (ctypes.c_int, [_c, ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p,
                                   ctypes.POINTER(_c)]),
    "rdzv_kv_wait": (ctypes.c_int, [_c, ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p,
                                    ctypes.c_int, ctypes.POINTER(_c)]),
    "rdzv_status": (ctypes.c_int, [_c, ctypes.c_char_p, ctypes.POINTER(_c)]),
    "rdzv_group_delete": (ctypes.c_int, [_c, ctypes.c_char_p]),
    "rdzv_assignment_destroy": (None, [ctypes.POINTER(_c)]),
    "rdzv_assignment_json": (ctypes.c_char_p, [_c]),
    "rdzv_assignment_env": (_c, [_c]),
    "rdzv_assignment_from_json": (_c, [ctypes.c_char_p]),
}

_lib: Optional[ctypes.CDLL] = None
_libc = ctypes.CDLL(None)
_libc.free.argtypes = [_c]
_libc.free.restype = None


def pkg_config_libdir() -> Optional[str]:
    """`pkg-config --variable=libdir rdzv`, or None (also setup.py's)."""
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "rdzv"], capture_output=True,
                             text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return out or None


def _built_libdir() -> Optional[str]:
    try:
        from . import _build_config
    except ImportError:          # run from a source tree, not installed
        return None
    return _build_config.LIBDIR


def candidates(path: Optional[str] = None) -> list:
    """Where load() looks, in order (for error messages and tests)."""
    found = [p for p in (path, os.environ.get("RDZV_LIBRARY")) if p]
    for libdir in (_built_libdir(), pkg_config_libdir()):
        if libdir:
            found.append(os.path.join(libdir, SONAME))
    found.append(ctypes.util.find_library("rdzv") or SONAME)
    return list(dict.fromkeys(found))


def load(path: Optional[str] = None) -> ctypes.CDLL:
    """librdzv, loaded once per process."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for candidate in candidates(path):
        try:
            lib = ctypes.CDLL(candidate)
        except OSError as e:
            tried.append("%s (%s)" % (candidate, e))
            continue
        for name, (restype, argtypes) in SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        _lib = lib
        return lib
    from .errors import ERR_IO, RdzvError
    raise RdzvError("cannot load librdzv; tried " + "; ".join(tried) + ". " + HOW_TO_FIND, ERR_IO)


# What to do when no librdzv is found, in the words of both the failed load
# and setup.py's warning: the two ways the package can be told.
HOW_TO_FIND = ("Install rdzv (`meson install`), then reinstall this package with "
               "PKG_CONFIG_PATH naming the directory of rdzv.pc (PREFIX/lib/pkgconfig), "
               "so that it records where librdzv is; or set RDZV_LIBRARY to the path of "
               "librdzv.so.0.")


def take_string(ptr) -> Optional[str]:
    """Copies a malloc'd C string and frees it."""
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode()
    finally:
        _libc.free(ptr)
