"""Retries: exponential backoff with full jitter that honours retry_after, a
maximum number of attempts, and a retry budget (include/fairsched/retry.hpp).

The blocking ``Client.submit_with_retry`` runs the library's own loop
(fairsched_submit_with_retry, with the client's retry budget). The C ABI
exposes that loop only, not its pieces, so the asyncio path
(``AsyncClient.submit_with_retry``) and frontends with their own scheduling
use the pieces below, which compute exactly what retry.hpp computes:
``backoff_window``, ``retry_delay``, ``is_retryable`` and ``RetryBudget``.
"""

from __future__ import annotations

import enum
import random
import threading
from dataclasses import dataclass
from typing import Optional, Union

from ._types import Completion, Status
from .errors import ErrorCode, FairschedError

_NS_PER_S = 1_000_000_000


def _ns(seconds: float) -> int:
    return int(round(seconds * _NS_PER_S))


@dataclass(frozen=True)
class RetryPolicy:
    """How to retry. Times in seconds.

    The jitter window of retry n (1 = the first retry) is
    min(max_backoff, base_backoff * 2**(n-1)); the wait before it is
    retry_after + uniform[0, window).
    """

    max_attempts: int = 3  # the first attempt included; values below 1 count as 1
    base_backoff: float = 0.1
    max_backoff: float = 10.0
    # A retry_after longer than this ends the retries (a daily limit should
    # reach the caller now, not in five hours).
    max_retry_after: float = 60.0
    # How long to wait for one attempt's completion; None: until the
    # request's deadline, or forever without one.
    attempt_timeout: Optional[float] = None


class RetryStop(enum.Enum):
    """Why the retries ended (RetryStop in retry.hpp)."""

    FINAL = "final"  # the last outcome is final (OK, or not retryable)
    MAX_ATTEMPTS = "max attempts"
    BUDGET_EXHAUSTED = "retry budget exhausted"
    DEADLINE = "deadline"  # the next attempt would start after the deadline
    RETRY_AFTER_TOO_LONG = "retry_after too long"


@dataclass(frozen=True)
class RetryOutcome:
    """The last attempt's completion and how the loop went.

    ``stop`` and ``slept`` are None from ``Client.submit_with_retry``: the
    library's loop does not report them through the C ABI.
    """

    completion: Completion
    attempts: int
    stop: Optional[RetryStop] = None
    slept: Optional[float] = None  # seconds waited between attempts


class RetryBudget:
    """gRPC-style retry throttling as a token bucket.

    It starts full; every first attempt adds ``ratio`` tokens (up to
    ``max_tokens``), every retry costs one, and no retry happens with fewer
    than one token. Kept in thousandths of a token, as the library does.
    Thread-safe.
    """

    _SCALE = 1000

    def __init__(self, ratio: float = 0.1, max_tokens: float = 10.0) -> None:
        self._ratio = int(round(max(0.0, ratio) * self._SCALE))
        self._max = int(round(max(0.0, max_tokens) * self._SCALE))
        self._tokens = self._max
        self._lock = threading.Lock()

    def on_first_attempt(self) -> None:
        """Credits a first attempt: ``ratio`` tokens, up to ``max_tokens``."""
        with self._lock:
            self._tokens = min(self._max, self._tokens + self._ratio)

    def try_acquire_retry(self) -> bool:
        """Takes one token; False (and nothing taken) when fewer than one is left."""
        with self._lock:
            if self._tokens < self._SCALE:
                return False
            self._tokens -= self._SCALE
            return True

    @property
    def tokens(self) -> float:
        """The tokens left now (retries possible while at least 1.0)."""
        return self._tokens / self._SCALE

    def __repr__(self) -> str:
        return (f"<fairsched.RetryBudget tokens={self._tokens / self._SCALE:g}/"
                f"{self._max / self._SCALE:g} ratio={self._ratio / self._SCALE:g}>")


def is_retryable(outcome: Union[Status, Completion, FairschedError, ErrorCode]) -> bool:
    """RATE_LIMITED, OVERLOADED and QUEUE_FULL completions, and the submit
    error RING_FULL, are worth retrying; everything else is final."""
    if isinstance(outcome, Completion):
        return outcome.status.retryable
    if isinstance(outcome, Status):
        return outcome.retryable
    if isinstance(outcome, FairschedError):
        return outcome.code == ErrorCode.RING_FULL
    return outcome == ErrorCode.RING_FULL


def backoff_window_ns(policy: RetryPolicy, retry: int) -> int:
    """The jitter window of retry ``retry`` in nanoseconds:
    min(max_backoff, base_backoff * 2**(retry-1))."""
    cap = max(0, _ns(policy.max_backoff))
    window = max(0, _ns(policy.base_backoff))
    i = 1
    while i < retry and window < cap:
        window = cap if window > cap // 2 else window * 2
        i += 1
    return min(window, cap)


def backoff_window(policy: RetryPolicy, retry: int) -> float:
    """backoff_window_ns in seconds."""
    return backoff_window_ns(policy, retry) / _NS_PER_S


def retry_delay(
    policy: RetryPolicy,
    retry: int,
    retry_after: float = 0.0,
    rng: Optional[random.Random] = None,
) -> float:
    """Seconds to wait before retry ``retry``: retry_after + uniform[0, window).
    Full jitter: clients rejected together spread out instead of coming back
    in step."""
    window = backoff_window_ns(policy, retry)
    r = min(max((rng or _rng).random(), 0.0), 1.0)
    jitter = min(int(r * window), window)
    return (max(0, _ns(retry_after)) + jitter) / _NS_PER_S


_rng = random.Random()
