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
import threading
from ctypes import byref, c_void_p
from typing import Any, Callable, NoReturn, Optional, TypeVar

from . import _ffi
from .errors import ErrorCode, InvalidArgument, NotConnected, library_message, make_error

DEFAULT_SOCKET = "/run/fairsched/fairsched.sock"
POLL_BATCH = 256

NS_PER_S = 1_000_000_000
U32 = 0xFFFFFFFF
U64 = 0xFFFFFFFFFFFFFFFF

T = TypeVar("T")


def raise_error(lib: ctypes.CDLL, rc: int) -> NoReturn:
    """Raises the exception of the library's error code ``rc`` (not 0), with
    the library's message of the failed call (without the code's name and
    words repeated: ``str(e)`` starts with the name)."""
    raise make_error(rc, library_message(rc, _ffi.last_error_message(lib)))


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

# This process's id, as of its last fork (os.register_at_fork keeps it): a
# handle made in another process was inherited by a child of fork().
_pid = os.getpid()


def _after_fork_in_child() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Handle:
    """A handle of the C API owned by one Python object: closed once, by
    close(), a ``with`` block or the garbage collector.

    Every call into the library goes through ``_enter()``/``_leave()``, which
    count it, so close() never frees the handle under a call in progress:
    it shuts the connection down (``_shutdown_fn``: calls blocked in the
    library return at once, with NotConnected) and the last call to leave
    frees it. A handle inherited by a child of os.fork() (the redis-py
    rule) raises NotConnected in the child, and closing it there releases
    only the child's copies: the parent's connection is not touched.

    A subclass names its C functions: ``_close_fn`` (frees the handle),
    ``_shutdown_fn`` (ends it without freeing) and ``_connected_fn`` (nonzero
    while the connection is live), and says what it is in ``_role`` for the
    messages.
    """

    _close_fn = ""
    _shutdown_fn = ""
    _connected_fn = ""
    _role = ""

    def __init__(self, handle: int) -> None:
        self._lib = _ffi.load()
        self._handle: Optional[int] = handle
        self._pid = _pid
        # One entry per call in progress: list.append and list.pop are atomic
        # (under the GIL, and in free-threaded builds), and cheaper than a lock
        # around every call.
        self._calls: list[None] = []
        self._close_lock = threading.Lock()
        self._to_free: Optional[int] = None  # closed, freed by the last call to leave

    def _in_forked_child(self) -> bool:
        """True in a child of fork() that inherited this object."""
        return self._pid != _pid

    def _inherited(self) -> NotConnected:
        return NotConnected(
            f"this {self._role} was connected by process {self._pid}; a child of fork() "
            f"must connect its own"
        )

    def _enter(self) -> int:
        """The handle, counted as in use until ``_leave()``. Raises
        NotConnected when closed or inherited across fork()."""
        if self._pid != _pid:
            raise self._inherited()
        self._calls.append(None)
        h = self._handle
        if h is None:
            self._leave()
            raise NotConnected(f"the {self._role} is closed")
        return h

    def _leave(self) -> None:
        self._calls.pop()
        if self._handle is None and not self._calls and self._to_free is not None:
            self._free()

    def _free(self) -> None:
        with self._close_lock:
            h, self._to_free = self._to_free, None
        if h is not None:
            getattr(self._lib, self._close_fn)(h)

    def _h(self) -> int:
        """The handle for a call that cannot overlap close() (the caller
        holds no count): only for values, never to call the library."""
        h = self._handle
        if h is None:
            raise NotConnected(f"the {self._role} is closed")
        return h

    def _raise(self, rc: int) -> NoReturn:
        """Raises the error of ``rc``; NotConnected when close() came first
        (a call it ended may have seen the connection go before the close)."""
        if self._handle is None and rc != ErrorCode.INVALID_ARGUMENT:
            raise NotConnected(f"the {self._role} was closed during the call")
        raise_error(self._lib, rc)

    def _call(self, fn: Callable[..., int], *args: Any) -> None:
        """``fn(handle, *args)``; raises what it failed with."""
        h = self._enter()
        try:
            rc = fn(h, *args)
        finally:
            self._leave()
        if rc != 0:
            self._raise(rc)

    def _wait(self, fn: Callable[[int, int], int], timeout: Optional[float]) -> bool:
        """``fn(handle, timeout_ns)``, a wait: True when it returned for news,
        False when ``timeout`` passed; raises what it failed with (NotConnected
        when close() ended it)."""
        ns = seconds_to_ns("timeout", timeout)
        h = self._enter()
        try:
            rc = fn(h, ns)
        finally:
            self._leave()
        if rc == ErrorCode.TIMED_OUT:
            return False
        if rc != 0:
            self._raise(rc)
        return True

    def close(self) -> None:
        """Closes the connection; idempotent. Safe while other threads are in
        calls on this object: those blocked in the library (wait(), a round
        trip) raise NotConnected at once, and the handle is freed when the
        last of them returns. In a child of fork() that inherited the
        object, only the child's copies are released."""
        if self._pid != _pid:
            h, self._handle = self._handle, None
            # The library leaves the parent's connection alone; a call that
            # was in progress at the fork may have left its state half-way,
            # so then nothing is freed.
            if h is not None and not self._calls:
                getattr(self._lib, self._close_fn)(h)
            return
        with self._close_lock:
            h = self._handle
            if h is None:
                return
            self._calls.append(None)  # close's own use of h, until _leave()
            self._handle = None
            self._to_free = h
        try:
            if len(self._calls) > 1:
                getattr(self._lib, self._shutdown_fn)(h)
        finally:
            self._leave()

    def __enter__(self: H) -> H:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self.close()

    def _state(self) -> str:
        """One word for repr(): connected, disconnected (lost), closed, or
        inherited (a child of fork())."""
        if self._pid != _pid:
            return f"inherited from pid {self._pid}"
        if self._handle is None:
            return "closed"
        return "connected" if self.connected else "disconnected"

    def _repr_fields(self) -> str:
        return ""

    def __repr__(self) -> str:
        fields = self._repr_fields()
        return (f"<fairsched.{type(self).__name__} {fields}{' ' if fields else ''}"
                f"{self._state()} pid={self._pid}>")

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return self._handle is None

    @property
    def connected(self) -> bool:
        """True while the connection is live (False once lost or closed, and
        in a child of fork())."""
        if self._pid != _pid or self._handle is None:
            return False
        try:
            h = self._enter()
        except NotConnected:
            return False
        try:
            return getattr(self._lib, self._connected_fn)(h) != 0
        finally:
            self._leave()
