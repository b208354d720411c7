"""Exceptions. Every failure of a librdzv call raises a subclass of
RdzvError, carrying librdzv's message, its result code and, for a
refusal, the server's error code (docs/protocol.md: "bad_rank",
"world_mismatch", "rank_taken", ...)."""
from __future__ import annotations

OK, ERR_USAGE, ERR_TIMEOUT, ERR_REFUSED, ERR_IO = 0, -1, -2, -3, -4


class RdzvError(Exception):
    """A librdzv call failed. result: the negative rdzv_result_t; code: the
    server's error code when rdzvd refused, else ""."""

    def __init__(self, message: str, result: int = ERR_IO, code: str = ""):
        super().__init__(message)
        self.result = result
        self.code = code


class UsageError(RdzvError, ValueError):
    """Bad arguments (librdzv's RDZV_ERR_USAGE)."""


class Timeout(RdzvError, TimeoutError):
    """The deadline passed: a join whose group did not form, a kv_wait."""


class Refused(RdzvError):
    """rdzvd answered with an error; code says which."""


class Unavailable(RdzvError):
    """No answer, or the reply could not be used (RDZV_ERR_IO)."""


_BY_RESULT = {ERR_USAGE: UsageError, ERR_TIMEOUT: Timeout, ERR_REFUSED: Refused,
              ERR_IO: Unavailable}


def error_for(result: int, message: str, code: str = "") -> RdzvError:
    return _BY_RESULT.get(result, RdzvError)(message, result, code)
