"""``AsyncClient``: the client role driven by the asyncio event loop.

It registers the client's completion descriptor in the loop
(``loop.add_reader``); one reader polls every completion and hands each to
its Request (_aio_request.py). Submission (submit, asubmit, the retrying
kinds), tenants, cancels and the client's lifetime are here; the package's
guide to the asyncio API is fairsched.aio's docstring.
"""

from __future__ import annotations

import asyncio
import time
from ctypes import byref, c_uint64
from typing import Awaitable, Callable, Iterable, Optional

from ._aio_base import Connecting, _other_loop
from ._aio_request import Request
from ._aio_retry import RetryingStream, _Retries
from ._common import DEFAULT_SOCKET, POLL_BATCH, U32, check_int, off_loop, raise_error
from ._common import seconds_to_ns
from ._types import Completion, Tenant
from .client import Client, Params, Prompt, _Request
from .errors import FairschedError, InvalidArgument, NotConnected, RingFull
from .retry import RetryBudget, RetryOutcome, RetryPolicy, RetryStop

# How soon a cancel that found the ring full is tried again, doubling up to
# the cap, until the request's final completion arrives.
_CANCEL_RETRY_FIRST = 0.0005
_CANCEL_RETRY_MAX = 0.05

# AsyncClient.stream_buffer_tokens by default: the endpoints' default
# max_output_tokens, about 1.4 MB of Completion objects.
DEFAULT_STREAM_BUFFER_TOKENS = 4096

# How soon asubmit() tries again after RingFull, doubling up to the cap: the
# daemon takes submissions off the rings continuously, so room comes back
# within microseconds to a few milliseconds.
_ROOM_RETRY_FIRST = 0.0001
_ROOM_RETRY_MAX = 0.005


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
        prefix: Optional[Iterable[int]] = None,
    ) -> Request:
        """Client.submit; returns the Request to iterate or await. Never
        blocks. Raises what Client.submit raises (RingFull: back off, or
        ``await asubmit(…)``, which waits for room instead)."""
        if self._closed:
            raise NotConnected("the client is closed")
        if asyncio._get_running_loop() is not self._loop:
            self._check_loop()
        c = _Request(tenant, endpoint, prompt, max_output_tokens, priority, timeout, deadline,
                     params, prompt_token_count, stream, tag, prefix)
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
        prefix: Optional[Iterable[int]] = None,
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
                    prefix=prefix,
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
        prefix: Optional[Iterable[int]] = None,
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
                    prompt_token_count=prompt_token_count, tag=tag, prefix=prefix,
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
        prefix: Optional[Iterable[int]] = None,
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
                                   stream=True, tag=tag, prefix=prefix),
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
