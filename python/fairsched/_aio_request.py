"""``Request``: one request submitted through an AsyncClient, as the caller
sees it. The client's reader feeds it stream chunks and the final
completion; the caller iterates it (``async for chunk in request``) or
awaits it. Stream buffering and the slow-consumer bound
(``AsyncClient.stream_buffer_tokens``) are applied here."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from typing import AsyncIterator, Generator, Optional, Protocol

from ._types import Completion, Status


class _RequestOwner(Protocol):
    """What a Request uses of the AsyncClient that submitted it."""

    @property
    def _loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def stream_buffer_tokens(self) -> Optional[int]: ...

    def _check_loop(self) -> None: ...

    def _send_cancel(self, req: Request) -> bool: ...


class Request:
    """A request submitted through an AsyncClient.

    ``async for chunk in request`` yields its stream chunks (partial
    Completions, in order) and ends after the final completion arrives;
    ``await request`` or ``await request.completion()`` gives the final one.
    Without ``stream`` there are no chunks.
    """

    __slots__ = ("id", "tag", "stream", "_client", "_chunks", "_buffered", "_slow", "_waiters",
                 "_final", "_error")

    def __init__(self, client: _RequestOwner, request_id: int, tag: int, stream: bool) -> None:
        self.id = request_id
        self.tag = tag
        self.stream = stream
        self._client = client
        self._chunks: collections.deque[Completion] = collections.deque()
        self._buffered = 0  # tokens in _chunks
        self._slow = False  # past the client's stream_buffer_tokens: ending SLOW_CONSUMER
        # Futures of the tasks suspended on this request, woken by any news.
        self._waiters: list[asyncio.Future[None]] = []
        self._final: Optional[Completion] = None
        self._error: Optional[BaseException] = None

    def __repr__(self) -> str:
        state = "done" if self.done() else "outstanding"
        return f"<fairsched.Request id={self.id} tag={self.tag} {state}>"

    # -- fed by the client's reader ----------------------------------------

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def _on_chunk(self, c: Completion) -> None:
        if self._slow:
            return  # the request is being ended SLOW_CONSUMER: nothing more is kept
        limit = self._client.stream_buffer_tokens
        if limit is not None and self._buffered + len(c.tokens) > limit:
            # The daemon's slow-consumer policy, applied here: what was kept
            # is delivered, the request is aborted on its worker, and its
            # final completion says SLOW_CONSUMER.
            self._slow = True
            self._client._send_cancel(self)
            return
        self._buffered += len(c.tokens)
        self._chunks.append(c)
        if self._waiters:
            self._wake()

    def _on_final(self, c: Completion) -> None:
        if self._slow and c.status in (Status.OK, Status.CANCELLED):
            c = dataclasses.replace(c, status=Status.SLOW_CONSUMER)
        self._final = c
        self._wake()

    def _on_error(self, e: BaseException) -> None:
        self._error = e
        self._wake()

    # -- the caller's side ---------------------------------------------------

    def done(self) -> bool:
        """True once the final completion arrived (or the client was closed)."""
        return self._final is not None or self._error is not None

    def cancel(self) -> bool:
        """Withdraws the request (see Client.cancel). True when a cancel was
        sent or is being retried; False when the request is already done or
        its connection is gone (it then completes SHUTTING_DOWN by itself).
        Its final completion still arrives."""
        if self.done():
            return False
        return self._client._send_cancel(self)

    def _waiter(self) -> asyncio.Future[None]:
        """A future that the next chunk, final completion or error resolves."""
        loop = self._client._loop
        if asyncio._get_running_loop() is not loop:
            self._client._check_loop()
        w: asyncio.Future[None] = loop.create_future()
        self._waiters.append(w)
        return w

    def _abandon(self, w: asyncio.Future[None]) -> None:
        """The task waiting on ``w`` was cancelled: so is the request."""
        if w in self._waiters:
            self._waiters.remove(w)
        if not self.done():
            self.cancel()

    async def _news(self) -> None:
        """Suspends until a chunk, the final completion or an error comes.
        Cancelling the waiting task cancels the request."""
        w = self._waiter()
        try:
            await w
        except asyncio.CancelledError:
            self._abandon(w)
            raise

    async def _first_news(self) -> None:
        """Suspends until a chunk is buffered or the request is done."""
        while not self._chunks and not self.done():
            await self._news()

    async def completion(self) -> Completion:
        """The final completion. Cancelling the awaiting task cancels the request."""
        while True:
            if self._final is not None:
                return self._final
            if self._error is not None:
                raise self._error
            await self._news()

    def __await__(self) -> Generator[object, None, Completion]:
        # completion() without its coroutine frames: `await request` is the
        # hot path of a frontend.
        while True:
            if self._final is not None:
                return self._final
            if self._error is not None:
                raise self._error
            w = self._waiter()
            try:
                yield from w
            except asyncio.CancelledError:
                self._abandon(w)
                raise

    def __aiter__(self) -> "Request":
        return self

    async def __anext__(self) -> Completion:
        while True:
            if self._chunks:
                c = self._chunks.popleft()
                self._buffered -= len(c.tokens)
                return c
            if self._final is not None:
                raise StopAsyncIteration
            if self._error is not None:
                raise self._error
            await self._news()

    async def tokens(self) -> AsyncIterator[int]:
        """The output tokens one by one (``async for t in request.tokens()``)."""
        async for chunk in self:
            for t in chunk.tokens:
                yield t
