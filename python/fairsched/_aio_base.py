"""What the asyncio classes share: ``Connecting``, the awaitable (and async
context manager) that AsyncClient.connect() and AsyncWorker.connect()
return, and the error message for a call from another event loop."""

from __future__ import annotations

from typing import Any, Coroutine, Generator, Generic, Optional, Protocol, TypeVar


class _Closable(Protocol):
    """What Connecting needs of what it connects (AsyncClient, AsyncWorker)."""

    async def aclose(self) -> None: ...


C = TypeVar("C", bound=_Closable)


def _other_loop(what: str) -> str:
    return (
        f"fairsched.{what} is bound to the event loop it was connected on; this call "
        f"came from another event loop (or from outside one). Connect one {what} per "
        f"event loop, or hand the work to its loop (asyncio.run_coroutine_threadsafe)."
    )


class Connecting(Generic[C]):
    """What ``AsyncClient.connect()`` and ``AsyncWorker.connect()`` return:
    ``await`` it for the connected object, or enter it directly with
    ``async with`` (the object is closed when the block ends):

        async with AsyncClient.connect(path) as client:
            ...

    Use it once, one way or the other.
    """

    __slots__ = ("_coro", "_connected")

    def __init__(self, coro: Coroutine[Any, Any, C]) -> None:
        self._coro = coro
        self._connected: Optional[C] = None

    def __await__(self) -> Generator[Any, None, C]:
        return self._coro.__await__()

    async def __aenter__(self) -> C:
        self._connected = await self._coro
        return self._connected

    async def __aexit__(self, *exc: object) -> None:
        if self._connected is not None:
            await self._connected.aclose()

    def __repr__(self) -> str:
        return f"<fairsched.Connecting {self._coro.__qualname__}>"
