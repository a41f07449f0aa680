"""What the two roles share (client.py, worker.py, aio.py): argument checks
and conversions, the library's return codes turned into exceptions, and the
life of a handle from the C API (connect, close, ``with``).

Private: the public names are re-exported by the modules that use them.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
from ctypes import byref, c_void_p
from typing import Any, Callable, NoReturn, Optional, TypeVar

from . import _ffi
from .errors import ErrorCode, InvalidArgument, NotConnected, make_error

DEFAULT_SOCKET = "/run/fairsched/fairsched.sock"
POLL_BATCH = 256

NS_PER_S = 1_000_000_000
U32 = 0xFFFFFFFF
U64 = 0xFFFFFFFFFFFFFFFF

T = TypeVar("T")


def raise_error(lib: ctypes.CDLL, rc: int) -> NoReturn:
    """Raises the exception of the library's error code ``rc`` (not 0), with
    the library's message of the failed call."""
    raise make_error(rc, _ffi.last_error_message(lib))


def check_int(name: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not lo <= value <= hi:
        raise InvalidArgument(f"{name} = {value} is outside [{lo}, {hi}]")
    return value


def seconds_to_ns(name: str, value: Optional[float], *, allow_negative: bool = False) -> int:
    """Seconds as int nanoseconds; None is -1 (forever) where negative is allowed."""
    if value is None:
        return -1
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds or None, not {type(value).__name__}")
    if value != value:  # NaN
        raise InvalidArgument(f"{name} is NaN")
    if value < 0 and not allow_negative:
        raise InvalidArgument(f"{name} = {value} is negative")
    if value == float("inf"):
        return -1
    return int(value * NS_PER_S)


def encode_name(what: str, value: str) -> bytes:
    """``value`` as the C library takes it; a NUL inside it would cut it short
    there (and name another tenant, endpoint or socket), so it is refused."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if "\x00" in value:
        raise InvalidArgument(f"{what} {value!r} contains a NUL character")
    return value.encode("utf-8")


def encode_path(what: str, value: str) -> bytes:
    """A filesystem path for the C library: os.fsencode, with no NUL inside."""
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError(f"{what} must be a path, not {type(value).__name__}")
    b = os.fsencode(value)
    if b"\x00" in b:
        raise InvalidArgument(f"{what} {value!r} contains a NUL character")
    return b


def connect(lib: ctypes.CDLL, connect_fn: Callable[..., int], options: ctypes.Structure) -> int:
    """Calls a fairsched_*connect function with ``options``; the new handle.
    Raises what the call failed with."""
    out = c_void_p()
    rc = connect_fn(byref(options), byref(out))
    if rc != 0:
        raise_error(lib, rc)
    assert out.value is not None
    return out.value


async def off_loop(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a thread of the running loop's executor (a
    call that blocks: a connect, a control round trip)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(fn, *args, **kwargs))


H = TypeVar("H", bound="Handle")


class Handle:
    """A handle of the C API owned by one Python object: closed once, by
    close(), a ``with`` block or the garbage collector.

    A subclass names its C functions: ``_close_fn`` (frees the handle) and
    ``_connected_fn`` (nonzero while the connection is live), and says what
    it is in ``_role`` for the NotConnected of a call after close().
    """

    _close_fn = ""
    _connected_fn = ""
    _role = ""

    def __init__(self, handle: int) -> None:
        self._lib = _ffi.load()
        self._handle: Optional[int] = handle

    def _h(self) -> int:
        h = self._handle
        if h is None:
            raise NotConnected(f"the {self._role} is closed")
        return h

    def _call(self, fn: Callable[..., int], *args: Any) -> None:
        """``fn(handle, *args)``; raises what it failed with."""
        rc = fn(self._h(), *args)
        if rc != 0:
            raise_error(self._lib, rc)

    def _wait(self, fn: Callable[[int, int], int], timeout: Optional[float]) -> bool:
        """``fn(handle, timeout_ns)``, a wait: True when it returned for news,
        False when ``timeout`` passed; raises what it failed with."""
        rc = fn(self._h(), seconds_to_ns("timeout", timeout))
        if rc == ErrorCode.TIMED_OUT:
            return False
        if rc != 0:
            raise_error(self._lib, rc)
        return True

    def close(self) -> None:
        """Frees the handle (the class says what is left behind); idempotent.
        REQUIRES that no other call on this object is in progress."""
        h, self._handle = self._handle, None
        if h is not None:
            getattr(self._lib, self._close_fn)(h)

    def __enter__(self: H) -> H:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self.close()

    @property
    def connected(self) -> bool:
        """True while the connection is live (False once lost or closed)."""
        h = self._handle
        return h is not None and getattr(self._lib, self._connected_fn)(h) != 0
