"""``AsyncWorker``: the worker role for asyncio engines. A Worker whose
waits suspend the task instead of the thread: while it waits, the worker's
event descriptor is watched by the event loop."""

from __future__ import annotations

import asyncio
from typing import Optional

from ._aio_base import Connecting, _other_loop
from ._common import DEFAULT_SOCKET, off_loop
from ._types import WorkerStats, WorkItem
from .errors import NotConnected
from .worker import Worker


class AsyncWorker:
    """A Worker whose waits suspend the task instead of the thread: the
    worker's event descriptor is watched by the event loop while waiting.

    set_capacity(), emit(), emit_step(), finish(), preempted() and the KV
    events (blocks_stored(), blocks_removed(), cache_cleared()) are the
    Worker's, synchronous: they wait at most ``event_timeout`` when the event
    ring is full (the daemon drains it continuously). Use one task to poll
    and wait.
    """

    def __init__(self, worker: Worker, loop: asyncio.AbstractEventLoop) -> None:
        """Internal: use ``await AsyncWorker.connect(...)``."""
        self._worker = worker
        self._loop = loop
        self._fd = worker.event_fd()
        self._closed = False
        self._waiting: Optional[asyncio.Future[None]] = None  # wait()'s, while it waits
        self.set_capacity = worker.set_capacity
        self.emit = worker.emit
        self.emit_step = worker.emit_step
        self.finish = worker.finish
        self.preempted = worker.preempted
        self.blocks_stored = worker.blocks_stored
        self.blocks_removed = worker.blocks_removed
        self.cache_cleared = worker.cache_cleared
        self.poll = worker.poll

    @classmethod
    def connect(
        cls,
        socket_path: str = DEFAULT_SOCKET,
        endpoint: str = "",
        *,
        name: Optional[str] = None,
        connect_timeout: float = 5.0,
        event_timeout: float = 1.0,
    ) -> "Connecting[AsyncWorker]":
        """Worker.connect in the loop's executor. ``await`` it or enter it
        (``async with AsyncWorker.connect(…) as worker:``, closed at the
        end). Raises what Worker.connect raises."""
        return Connecting(cls._connect(socket_path, endpoint, name, connect_timeout,
                                       event_timeout))

    @classmethod
    async def _connect(
        cls,
        socket_path: str,
        endpoint: str,
        name: Optional[str],
        connect_timeout: float,
        event_timeout: float,
    ) -> "AsyncWorker":
        worker = await off_loop(
            Worker.connect,
            socket_path,
            endpoint,
            name=name,
            connect_timeout=connect_timeout,
            event_timeout=event_timeout,
        )
        return cls(worker, asyncio.get_running_loop())

    @property
    def worker(self) -> Worker:
        """The blocking Worker underneath (do not wait on it: wait() does)."""
        return self._worker

    @property
    def endpoint(self) -> str:
        """The endpoint served, as the daemon described it."""
        return self._worker.endpoint

    @property
    def worker_id(self) -> int:
        """The daemon's id for this worker (``fairschedctl status``)."""
        return self._worker.worker_id

    @property
    def connected(self) -> bool:
        """True while the attachment is live (False once lost or closed)."""
        return not self._closed and self._worker.connected

    def stats(self) -> WorkerStats:
        """Counters since connect (Worker.stats)."""
        return self._worker.stats()

    def __repr__(self) -> str:
        w = self._worker
        state = "closed" if self._closed else w._state()
        return (f"<fairsched.AsyncWorker endpoint={w.endpoint!r} id={w.worker_id} "
                f"socket={w.socket_path!r} {state} pid={w._pid}>")

    def _check_loop(self) -> None:
        """Raises RuntimeError, naming fairsched, off this worker's event loop."""
        if asyncio._get_running_loop() is not self._loop:
            if self._worker._in_forked_child():
                raise self._worker._inherited()
            raise RuntimeError(_other_loop("AsyncWorker"))

    async def wait(self, timeout: Optional[float] = None) -> bool:
        """Suspends until poll() has something (True) or ``timeout`` seconds
        pass (False; None: forever). Raises DaemonLost, and NotConnected when
        the worker is closed (also while a task waits here: close() ends the
        wait at once)."""
        self._check_loop()
        deadline = None if timeout is None else self._loop.time() + timeout
        while True:
            if self._closed:
                raise NotConnected("the worker is closed")
            if not self._worker.prepare_to_block():
                return True
            ready: asyncio.Future[None] = self._loop.create_future()

            def on_ready() -> None:
                if not ready.done():
                    ready.set_result(None)

            self._loop.add_reader(self._fd, on_ready)
            self._waiting = ready
            try:
                if deadline is None:
                    await ready
                else:
                    left = deadline - self._loop.time()
                    if left <= 0:
                        return False
                    try:
                        await asyncio.wait_for(ready, left)
                    except asyncio.TimeoutError:
                        return False
            finally:
                self._waiting = None
                if not self._closed:
                    self._loop.remove_reader(self._fd)

    async def next_items(self, timeout: Optional[float] = None) -> list[WorkItem]:
        """The next assignments and aborts, waiting up to ``timeout`` seconds
        for some; [] when none came. Raises NotConnected once the worker is
        closed, a wait in progress included."""
        self._check_loop()
        if self._closed:
            raise NotConnected("the worker is closed")
        items = self._worker.poll()
        if items:
            return items
        if not await self.wait(timeout):
            return []
        return self._worker.poll()

    def close(self) -> None:
        """Detaches (Worker.close); a task waiting in wait() or next_items()
        gets NotConnected at once. Idempotent."""
        if self._closed:
            return
        self._closed = True
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            if not self._worker._in_forked_child():  # else the parent's epoll instance
                try:
                    self._loop.remove_reader(self._fd)
                except (RuntimeError, ValueError):
                    pass  # the loop is closed already
            if not waiting.done():
                waiting.set_exception(NotConnected("the worker was closed while a task waited"))
        self._worker.close()

    async def aclose(self) -> None:
        """close(), awaitable."""
        self.close()

    async def __aenter__(self) -> "AsyncWorker":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
