"""The asyncio API: AsyncClient (client role) and AsyncWorker (worker role).

AsyncClient registers the client's completion descriptor in the running
event loop (``loop.add_reader``): one reader polls every completion and
hands each to its request — no thread per request, no busy loop. Many tasks
share one client:

    client = await AsyncClient.connect("/run/fairsched/fairsched.sock", name="frontend")
    acme = await client.open_tenant("acme")
    request = client.submit(acme, "chat", prompt, max_output_tokens=256, stream=True)
    async for chunk in request:        # the output tokens, in order, as generated
        send(chunk.tokens)
    final = await request.completion() # status, usage

Cancelling the task that awaits a request (``await request`` /
``request.completion()`` / ``async for``) cancels the request at the daemon;
its final completion (CANCELLED) still arrives, and awaiting the request
again returns it. Wrap the await in ``asyncio.shield`` to stop waiting
without cancelling.

An AsyncClient belongs to the event loop it was connected in; call it from
that loop's thread only.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
from ctypes import byref, c_uint64
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    Generic,
    Iterable,
    Optional,
    TypeVar,
)

from ._common import DEFAULT_SOCKET, POLL_BATCH, U32, check_int, off_loop, raise_error
from ._common import seconds_to_ns
from .client import Client, Params, Prompt, _Request
from ._types import Completion, Status, Tenant, WorkerStats, WorkItem
from .errors import FairschedError, InvalidArgument, NotConnected, RingFull, TimedOut
from .retry import RetryBudget, RetryOutcome, RetryPolicy, RetryStop, retry_delay
from .worker import Worker

# How soon a cancel that found the ring full is tried again, doubling up to
# the cap, until the request's final completion arrives.
_CANCEL_RETRY_FIRST = 0.0005
_CANCEL_RETRY_MAX = 0.05

# How soon asubmit() tries again after RingFull, doubling up to the cap: the
# daemon takes submissions off the rings continuously, so room comes back
# within microseconds to a few milliseconds.
# AsyncClient.stream_buffer_tokens by default: the endpoints' default
# max_output_tokens, about 1.4 MB of Completion objects.
DEFAULT_STREAM_BUFFER_TOKENS = 4096

_ROOM_RETRY_FIRST = 0.0001
_ROOM_RETRY_MAX = 0.005

C = TypeVar("C", "AsyncClient", "AsyncWorker")
T = TypeVar("T")


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


class Request:
    """A request submitted through an AsyncClient.

    ``async for chunk in request`` yields its stream chunks (partial
    Completions, in order) and ends after the final completion arrives;
    ``await request`` or ``await request.completion()`` gives the final one.
    Without ``stream`` there are no chunks.
    """

    __slots__ = ("id", "tag", "stream", "_client", "_chunks", "_buffered", "_slow", "_waiters",
                 "_final", "_error")

    def __init__(self, client: "AsyncClient", request_id: int, tag: int, stream: bool) -> None:
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


class _Retries:
    """The state of one submit-with-retry loop and its decisions, shared by
    AsyncClient.submit_with_retry and RetryingStream (retry.hpp's loop)."""

    __slots__ = ("policy", "budget", "deadline", "attempts", "slept", "_timeout", "_started")

    def __init__(self, policy: Optional[RetryPolicy], budget: RetryBudget,
                 timeout: Optional[float], deadline: Optional[float], start: bool = True) -> None:
        self.policy = policy or RetryPolicy()
        self.budget = budget
        self.deadline = deadline
        self.attempts = 0
        self.slept = 0.0
        if timeout is not None:
            seconds_to_ns("timeout", timeout)
        self._timeout = timeout
        self._started = False
        if start:
            self.start()

    def start(self) -> None:
        """Before the first attempt: a timeout becomes a deadline, and the
        budget is credited with a first attempt."""
        if self._started:
            return
        self._started = True
        if self._timeout is not None:
            t = time.monotonic() + self._timeout
            self.deadline = t if self.deadline is None or t < self.deadline else self.deadline
        self.budget.on_first_attempt()

    def wait_limit(self) -> Optional[float]:
        """Seconds to wait for an attempt's news; None: no bound."""
        wait_for = self.policy.attempt_timeout
        if wait_for is None and self.deadline is not None:
            # Past its deadline the daemon answers DEADLINE_EXCEEDED itself;
            # the margin covers that answer's trip back.
            wait_for = max(0.0, self.deadline - time.monotonic()) + 1.0
        return wait_for

    async def bounded(self, aw: Awaitable[T]) -> T:
        """``await aw`` within wait_limit(); TimedOut past it (``aw`` is
        cancelled, and so the request it waits on)."""
        wait_for = self.wait_limit()
        if wait_for is None:
            return await aw
        try:
            return await asyncio.wait_for(aw, wait_for)
        except asyncio.TimeoutError:
            raise TimedOut(f"no completion within {wait_for:.3f} s") from None

    def next(self, completion: Optional[Completion]) -> tuple[Optional[RetryStop], float]:
        """After an attempt that ended retryable (``completion``; None: its
        submit raised RingFull): why the loop stops, or the delay before the
        next attempt (a budget token taken)."""
        p = self.policy
        retry_after = completion.retry_after if completion is not None else 0.0
        if self.attempts >= max(1, p.max_attempts):
            return RetryStop.MAX_ATTEMPTS, 0.0
        if retry_after > p.max_retry_after:
            return RetryStop.RETRY_AFTER_TOO_LONG, 0.0
        delay = retry_delay(p, self.attempts, retry_after)
        if self.deadline is not None and time.monotonic() + delay >= self.deadline:
            return RetryStop.DEADLINE, 0.0
        if not self.budget.try_acquire_retry():
            return RetryStop.BUDGET_EXHAUSTED, 0.0
        return None, delay

    def outcome(self, completion: Completion, stop: RetryStop) -> RetryOutcome:
        """The RetryOutcome of the loop so far."""
        return RetryOutcome(completion, self.attempts, stop, self.slept)


class RetryingStream:
    """What ``AsyncClient.stream_with_retry()`` returns: a stream whose
    submission is retried (RATE_LIMITED, OVERLOADED, QUEUE_FULL, RingFull,
    as submit_with_retry()) until an attempt's first chunk arrives, and never
    after: tokens that reached the caller are not asked for twice.

        stream = client.stream_with_retry(acme, "chat", prompt, max_output_tokens=256)
        async for chunk in stream:      # the chunks of the attempt that streamed
            send(chunk.tokens)
        outcome = await stream          # RetryOutcome: completion, attempts, stop, slept

    When no attempt streamed, the loop yields nothing and the outcome holds
    the last attempt's final completion (its status, ``stop`` why the
    retries ended). Cancelling the iterating (or awaiting) task cancels the
    attempt in flight. Iterate it once, from one task.
    """

    __slots__ = ("_client", "_retries", "_submit", "_sleep", "_request", "_outcome", "_error",
                 "_settled")

    def __init__(self, client: "AsyncClient", retries: _Retries, submit: dict[str, Any],
                 sleep: Callable[[float], Awaitable[None]]) -> None:
        """Internal: use AsyncClient.stream_with_retry()."""
        self._client = client
        self._retries = retries
        self._submit = submit
        self._sleep = sleep
        self._request: Optional[Request] = None
        self._outcome: Optional[RetryOutcome] = None
        self._error: Optional[BaseException] = None
        self._settled = False

    def __repr__(self) -> str:
        if self._outcome is not None:
            state = f"done {self._outcome.completion.status.name}"
        elif self._settled:
            state = "streaming"
        else:
            state = "retrying" if self._retries.attempts else "not started"
        rid = self._request.id if self._request is not None else None
        return (f"<fairsched.RetryingStream attempts={self._retries.attempts} request={rid} "
                f"{state}>")

    @property
    def request(self) -> Optional[Request]:
        """The attempt being read (the last one submitted); None before the first."""
        return self._request

    @property
    def attempts(self) -> int:
        """Attempts submitted so far (those that raised RingFull included)."""
        return self._retries.attempts

    def cancel(self) -> bool:
        """Cancels the attempt in flight (Request.cancel); False when there is none."""
        return self._request.cancel() if self._request is not None else False

    async def _settle(self) -> None:
        """Submits, and retries, until an attempt is the stream (its first
        chunk came) or its final completion is the outcome."""
        if self._settled:
            if self._error is not None:
                raise self._error
            return
        r = self._retries
        r.start()
        client = self._client
        try:
            while True:
                r.attempts += 1
                error: Optional[FairschedError] = None
                completion: Optional[Completion] = None
                try:
                    req = client.submit(deadline=r.deadline, **self._submit)
                except RingFull as e:
                    error = e
                else:
                    self._request = req
                    await r.bounded(req._first_news())
                    if req._chunks:
                        return  # streaming: this attempt is the one
                    if req._error is not None:
                        raise req._error
                    completion = req._final
                    assert completion is not None
                    if not completion.status.retryable:
                        self._outcome = r.outcome(completion, RetryStop.FINAL)
                        return
                stop, delay = r.next(completion)
                if stop is not None:
                    if completion is None:
                        assert error is not None
                        raise error
                    self._outcome = r.outcome(completion, stop)
                    return
                await self._sleep(delay)
                r.slept += delay
        except asyncio.CancelledError:
            # Cancelled: nothing more is submitted. The attempt in flight
            # (cancelled with the task) still ends, and is what is read.
            if self._request is None:
                self._error = asyncio.CancelledError("stream_with_retry() was cancelled")
            raise
        except BaseException as e:
            self._error = e
            raise
        finally:
            self._settled = True  # every way out of the loop ends it

    def __aiter__(self) -> "RetryingStream":
        return self

    async def __anext__(self) -> Completion:
        if not self._settled:
            await self._settle()
        elif self._error is not None:
            raise self._error
        req = self._request
        assert req is not None
        try:
            return await req.__anext__()
        except StopAsyncIteration:
            if self._outcome is None:
                assert req._final is not None
                self._outcome = self._retries.outcome(req._final, RetryStop.FINAL)
            raise

    async def outcome(self) -> RetryOutcome:
        """The RetryOutcome: the final completion of the attempt that
        streamed (stop FINAL), or of the last attempt when none did.
        Chunks not read stay buffered (stream_buffer_tokens applies)."""
        await self._settle()
        if self._outcome is None:
            req = self._request
            assert req is not None
            self._outcome = self._retries.outcome(await req.completion(), RetryStop.FINAL)
        return self._outcome

    def __await__(self) -> Generator[Any, None, RetryOutcome]:
        return self.outcome().__await__()


class AsyncClient:
    """A Client driven by the asyncio event loop (see the module docstring)."""

    def __init__(self, client: Client, loop: asyncio.AbstractEventLoop) -> None:
        """Internal: use ``await AsyncClient.connect(...)``."""
        self._client = client
        self._loop = loop
        self._lib = client._lib
        self._submit = client._lib.fairsched_submit
        self._rid = c_uint64()
        self._requests: dict[int, Request] = {}
        self._tenants: dict[tuple[str, Optional[str]], Tenant] = {}
        self._fd = client.completion_fd()
        self._closed = False
        self.retry_budget = RetryBudget()
        self.unclaimed = 0  # completions of requests this object did not submit (dropped)
        self.ring_full_waits = 0  # times asubmit() waited for room
        # The most output tokens kept for one request that its reader has not
        # taken yet (None: no bound); past it the request ends SLOW_CONSUMER.
        self.stream_buffer_tokens: Optional[int] = DEFAULT_STREAM_BUFFER_TOKENS
        loop.add_reader(self._fd, self._drain)
        self._drain()  # descriptor mode starts with the first prepare_to_block

    @classmethod
    def connect(
        cls,
        socket_path: str = DEFAULT_SOCKET,
        *,
        name: Optional[str] = None,
        connect_timeout: float = 5.0,
        control_timeout: float = 5.0,
        reconnect: bool = False,
        reconnect_initial_delay: float = 0.1,
        reconnect_max_delay: float = 5.0,
        stream_buffer_tokens: Optional[int] = DEFAULT_STREAM_BUFFER_TOKENS,
    ) -> "Connecting[AsyncClient]":
        """Client.connect in a thread of the loop's executor (the Hello round
        trip may take up to connect_timeout), then the reader on its
        descriptor. ``await`` it (``client = await AsyncClient.connect(…)``)
        or enter it (``async with AsyncClient.connect(…) as client:``, closed
        at the end). ``stream_buffer_tokens``: the most output tokens kept
        for one streamed request that its reader has not taken yet (None: no
        bound); a request past it ends SLOW_CONSUMER. Raises what
        Client.connect raises."""
        if stream_buffer_tokens is not None:
            check_int("stream_buffer_tokens", stream_buffer_tokens, 1, U32)
        return Connecting(cls._connect(
            socket_path, name, connect_timeout, control_timeout, reconnect,
            reconnect_initial_delay, reconnect_max_delay, stream_buffer_tokens,
        ))

    @classmethod
    async def _connect(
        cls,
        socket_path: str,
        name: Optional[str],
        connect_timeout: float,
        control_timeout: float,
        reconnect: bool,
        reconnect_initial_delay: float,
        reconnect_max_delay: float,
        stream_buffer_tokens: Optional[int],
    ) -> "AsyncClient":
        client = await off_loop(
            Client.connect,
            socket_path,
            name=name,
            connect_timeout=connect_timeout,
            control_timeout=control_timeout,
            spin=0.0,
            reconnect=reconnect,
            reconnect_initial_delay=reconnect_initial_delay,
            reconnect_max_delay=reconnect_max_delay,
        )
        try:
            connected = cls(client, asyncio.get_running_loop())
        except BaseException:
            client.close()
            raise
        connected.stream_buffer_tokens = stream_buffer_tokens
        return connected

    @property
    def client(self) -> Client:
        """The blocking Client underneath (do not poll it: the reader does)."""
        return self._client

    @property
    def connected(self) -> bool:
        """True while the connection is live (False once lost or closed)."""
        return not self._closed and self._client.connected

    def __repr__(self) -> str:
        c = self._client
        if self._closed:
            state = "closed"
        else:
            state = c._state()
        return (f"<fairsched.AsyncClient socket={c.socket_path!r} {state} pid={c._pid} "
                f"outstanding={len(self._requests)}>")

    def _check_loop(self) -> None:
        """Raises RuntimeError, naming fairsched, when the running event
        loop (or none) is not the one this client was connected on."""
        if asyncio._get_running_loop() is not self._loop:
            if self._client._in_forked_child():
                raise self._client._inherited()
            raise RuntimeError(_other_loop("AsyncClient"))

    @property
    def outstanding(self) -> int:
        """Requests submitted here whose final completion has not arrived."""
        return len(self._requests)

    async def open_tenant(self, name: str, tier: Optional[str] = None) -> Tenant:
        """Client.open_tenant in the loop's executor; handles are cached per (name, tier)."""
        self._check_loop()
        key = (name, tier)
        t = self._tenants.get(key)
        if t is not None:
            return t
        t = await off_loop(self._client.open_tenant, name, tier)
        self._tenants[key] = t
        return t

    async def open_tenants(self, names: Iterable[str], tier: Optional[str] = None) -> list[Tenant]:
        """Client.open_tenants in the loop's executor (one pipelined exchange)."""
        self._check_loop()
        wanted = list(names)
        opened = await off_loop(self._client.open_tenants, wanted, tier)
        for t in opened:
            self._tenants[(t.name, tier)] = t
        return opened

    async def close_tenants(self, tenants: Iterable[Tenant]) -> None:
        """Client.close_tenants in the loop's executor; the cached handles are forgotten."""
        self._check_loop()
        wanted = list(tenants)
        for key in [k for k, v in self._tenants.items() if v in wanted]:
            del self._tenants[key]
        await off_loop(self._client.close_tenants, wanted)

    async def close_tenant(self, tenant: Tenant) -> None:
        """Client.close_tenant in the loop's executor; the cached handle is forgotten."""
        self._check_loop()
        for key in [k for k, v in self._tenants.items() if v == tenant]:
            del self._tenants[key]
        await off_loop(self._client.close_tenant, tenant)

    def submit(
        self,
        tenant: Tenant,
        endpoint: str,
        prompt: Prompt = (),
        *,
        max_output_tokens: int,
        priority: int = 0,
        timeout: Optional[float] = None,
        deadline: Optional[float] = None,
        params: Optional[Params] = None,
        prompt_token_count: Optional[int] = None,
        stream: bool = False,
        tag: int = 0,
    ) -> Request:
        """Client.submit; returns the Request to iterate or await. Never
        blocks. Raises what Client.submit raises (RingFull: back off, or
        ``await asubmit(…)``, which waits for room instead)."""
        if self._closed:
            raise NotConnected("the client is closed")
        if asyncio._get_running_loop() is not self._loop:
            self._check_loop()
        c = _Request(tenant, endpoint, prompt, max_output_tokens, priority, timeout, deadline,
                     params, prompt_token_count, stream, tag)
        client = self._client
        h = client._enter()
        try:
            rc = self._submit(h, byref(c.c), byref(self._rid))
        finally:
            client._leave()
        if rc != 0:
            raise_error(self._lib, rc)
        rid = self._rid.value
        req = Request(self, rid, tag, stream)
        self._requests[rid] = req
        return req

    async def asubmit(
        self,
        tenant: Tenant,
        endpoint: str,
        prompt: Prompt = (),
        *,
        max_output_tokens: int,
        priority: int = 0,
        timeout: Optional[float] = None,
        deadline: Optional[float] = None,
        params: Optional[Params] = None,
        prompt_token_count: Optional[int] = None,
        stream: bool = False,
        tag: int = 0,
    ) -> Request:
        """submit(), awaited: while the submission lanes are full (RingFull)
        the task waits for room — the daemon takes submissions off them
        continuously — instead of the error being raised; then it returns the
        Request. A ``timeout`` counts from this call (it becomes a deadline),
        and a deadline bounds the wait: past it, RingFull is raised. Raises
        what submit() raises otherwise. Cancelling the task while it waits
        submits nothing."""
        if timeout is not None:
            ns = seconds_to_ns("timeout", timeout)
            if ns <= 0:
                raise InvalidArgument(f"timeout = {timeout} must be positive (None: no timeout)")
            t = time.monotonic() + ns / 1e9
            deadline = t if deadline is None or t < deadline else deadline
        delay = _ROOM_RETRY_FIRST
        while True:
            try:
                return self.submit(
                    tenant, endpoint, prompt, max_output_tokens=max_output_tokens,
                    priority=priority, deadline=deadline, params=params,
                    prompt_token_count=prompt_token_count, stream=stream, tag=tag,
                )
            except RingFull:
                if deadline is not None and time.monotonic() + delay >= deadline:
                    raise
            self.ring_full_waits += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, _ROOM_RETRY_MAX)

    def cancel(self, request_id: int) -> bool:
        """Request.cancel() by id; False when no such request is outstanding here."""
        req = self._requests.get(request_id)
        return req.cancel() if req is not None else False

    async def submit_with_retry(
        self,
        tenant: Tenant,
        endpoint: str,
        prompt: Prompt = (),
        *,
        max_output_tokens: int,
        policy: Optional[RetryPolicy] = None,
        budget: Optional[RetryBudget] = None,
        priority: int = 0,
        timeout: Optional[float] = None,
        deadline: Optional[float] = None,
        params: Optional[Params] = None,
        prompt_token_count: Optional[int] = None,
        tag: int = 0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> RetryOutcome:
        """Submits and awaits the final completion, retrying RATE_LIMITED,
        OVERLOADED, QUEUE_FULL and RingFull as the library's
        submitWithRetry does (retry.hpp): retry_after waited in full, then
        full jitter; at most policy.max_attempts; a retry_after above
        policy.max_retry_after ends it; the deadline (or timeout, fixed at the
        first attempt) bounds the loop; each retry costs a token of ``budget``
        (default: this client's ``retry_budget``). Returns the last
        completion; raises the last attempt's submit error when it had none,
        and TimedOut when an attempt's completion took longer than
        policy.attempt_timeout. stream_with_retry() is the streaming kind."""
        self._check_loop()
        r = _Retries(policy, budget or self.retry_budget, timeout, deadline)
        while True:
            r.attempts += 1
            error: Optional[FairschedError] = None
            completion: Optional[Completion] = None
            try:
                req = self.submit(
                    tenant, endpoint, prompt, max_output_tokens=max_output_tokens,
                    priority=priority, deadline=r.deadline, params=params,
                    prompt_token_count=prompt_token_count, tag=tag,
                )
            except RingFull as e:
                error = e
            else:
                completion = await r.bounded(req.completion())
                if not completion.status.retryable:
                    return r.outcome(completion, RetryStop.FINAL)
            stop, delay = r.next(completion)
            if stop is not None:
                if completion is None:
                    assert error is not None
                    raise error
                return r.outcome(completion, stop)
            await sleep(delay)
            r.slept += delay

    def stream_with_retry(
        self,
        tenant: Tenant,
        endpoint: str,
        prompt: Prompt = (),
        *,
        max_output_tokens: int,
        policy: Optional[RetryPolicy] = None,
        budget: Optional[RetryBudget] = None,
        priority: int = 0,
        timeout: Optional[float] = None,
        deadline: Optional[float] = None,
        params: Optional[Params] = None,
        prompt_token_count: Optional[int] = None,
        tag: int = 0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> "RetryingStream":
        """submit_with_retry() for a stream: ``async for chunk in
        client.stream_with_retry(…)`` submits with ``stream`` and retries
        exactly as submit_with_retry() does (same arguments) until an
        attempt's first chunk arrives; from then on that attempt is the
        stream: its chunks are yielded and it is never submitted again,
        whatever its end. ``await`` the returned RetryingStream (after the
        loop) for the RetryOutcome. policy.attempt_timeout bounds each
        attempt's wait for its first chunk or final completion (TimedOut).
        Nothing is submitted before the iteration (or the await) starts."""
        self._check_loop()
        return RetryingStream(self, _Retries(policy, budget or self.retry_budget, timeout,
                                             deadline, start=False),
                              dict(tenant=tenant, endpoint=endpoint, prompt=prompt,
                                   max_output_tokens=max_output_tokens, priority=priority,
                                   params=params, prompt_token_count=prompt_token_count,
                                   stream=True, tag=tag),
                              sleep)

    # -- the reader ------------------------------------------------------------

    def _drain(self) -> None:
        """Reader callback: polls until the client says block, dispatching
        every completion to its Request. A request's chunks of one batch
        wake its reader once (the first chunk resolves its waiter; the rest
        are buffered behind it)."""
        if self._closed:
            return
        client = self._client
        requests = self._requests
        get = requests.get
        while True:
            batch = client.poll(POLL_BATCH)
            for c in batch:
                req = get(c.request_id)
                if req is None:
                    self.unclaimed += 1
                elif c.partial:
                    # Request._on_chunk inlined (the hot path of a stream).
                    limit = self.stream_buffer_tokens
                    if (req._slow or limit is not None
                            and req._buffered + len(c.tokens) > limit):
                        req._on_chunk(c)  # past the bound: the slow-consumer path
                        continue
                    req._buffered += len(c.tokens)
                    req._chunks.append(c)
                    if req._waiters:
                        req._wake()
                else:
                    del requests[c.request_id]
                    req._on_final(c)
            if len(batch) == POLL_BATCH:
                continue
            try:
                if client.prepare_to_block():
                    return
            except NotConnected:
                # Lost and not reconnected: the outstanding requests already
                # got their SHUTTING_DOWN completions above. The descriptor
                # stays registered: a reconnect (submit() with reconnect on)
                # signals it again.
                return

    def _send_cancel(self, req: Request, delay: float = _CANCEL_RETRY_FIRST) -> bool:
        try:
            self._client.cancel(req.id)
        except RingFull:
            self._loop.call_later(delay, self._retry_cancel, req, min(delay * 2, _CANCEL_RETRY_MAX))
            return True
        except (InvalidArgument, NotConnected):
            return False  # not outstanding any more, or it ends SHUTTING_DOWN by itself
        return True

    def _retry_cancel(self, req: Request, delay: float) -> None:
        if not req.done() and not self._closed:
            self._send_cancel(req, delay)

    # -- lifetime --------------------------------------------------------------

    def close(self) -> None:
        """Stops the reader and closes the client. Requests still outstanding
        fail with NotConnected. Idempotent."""
        if self._closed:
            return
        self._closed = True
        # In a child of fork() the loop's epoll instance is the parent's too:
        # leave it as it is.
        if not self._client._in_forked_child():
            try:
                self._loop.remove_reader(self._fd)
            except (RuntimeError, ValueError):
                pass  # the loop is closed already
        pending = list(self._requests.values())
        self._requests.clear()
        for req in pending:
            req._on_error(NotConnected(f"the client was closed with request {req.id} outstanding"))
        self._client.close()

    async def aclose(self) -> None:
        """close(), awaitable (as in aiohttp, redis.asyncio and httpx)."""
        self.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class AsyncWorker:
    """A Worker whose waits suspend the task instead of the thread: the
    worker's event descriptor is watched by the event loop while waiting.

    set_capacity(), emit(), emit_step(), finish() and preempted() are the
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
