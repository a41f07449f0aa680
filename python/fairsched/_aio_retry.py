"""Retrying submissions on the asyncio side: ``_Retries``, the state and
decisions of one submit-with-retry loop (retry.hpp's rules:
AsyncClient.submit_with_retry), and ``RetryingStream``, what
AsyncClient.stream_with_retry() returns: a stream retried until its first
chunk arrives, and never after."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Generator, Iterable, Optional, Protocol, TypeVar

from ._aio_request import Request
from ._common import seconds_to_ns
from ._types import Completion, Tenant
from .client import Params, Prompt
from .errors import FairschedError, RingFull, TimedOut
from .retry import RetryBudget, RetryOutcome, RetryPolicy, RetryStop, retry_delay

T = TypeVar("T")


class _Submitter(Protocol):
    """What a RetryingStream uses of its AsyncClient: submit()."""

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
    ) -> Request: ...


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

    def __init__(self, client: _Submitter, retries: _Retries, submit: dict[str, Any],
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
