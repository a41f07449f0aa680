"""Retry arithmetic (retry.hpp's, computed in Python) and the HTTP mapping
(the library's for completions, the documented table for submit errors).
No daemon needed."""

from __future__ import annotations

import random

import pytest

import fairsched
from fairsched import (
    Completion,
    ErrorCode,
    RetryBudget,
    RetryPolicy,
    Status,
    backoff_window,
    http_status_for_error,
    is_retryable,
    retry_delay,
)
from fairsched.errors import error_class
from fairsched.retry import backoff_window_ns


def test_backoff_window_doubles_from_base_and_stops_at_the_cap() -> None:
    p = RetryPolicy(base_backoff=0.1, max_backoff=1.0)
    assert [backoff_window_ns(p, n) for n in range(1, 7)] == [
        100_000_000, 200_000_000, 400_000_000, 800_000_000, 1_000_000_000, 1_000_000_000]
    assert backoff_window(p, 0) == pytest.approx(0.1)


def test_backoff_window_does_not_overflow_at_huge_retry_numbers() -> None:
    p = RetryPolicy(base_backoff=3.0, max_backoff=2**40)
    assert backoff_window_ns(p, 10_000) == int(round(2**40 * 1e9))


def test_backoff_window_with_zero_or_negative_times_is_zero() -> None:
    assert backoff_window_ns(RetryPolicy(base_backoff=0.0), 5) == 0
    assert backoff_window_ns(RetryPolicy(base_backoff=-1.0, max_backoff=-1.0), 1) == 0


def test_retry_delay_is_retry_after_plus_full_jitter_within_the_window() -> None:
    seed = random.randrange(2**32)
    print("seed", seed)
    rng = random.Random(seed)
    p = RetryPolicy(base_backoff=0.1, max_backoff=10.0)
    for n in range(1, 8):
        for _ in range(200):
            d = retry_delay(p, n, retry_after=0.25, rng=rng)
            assert 0.25 <= d < 0.25 + backoff_window(p, n)


class _Fixed(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def test_retry_delay_at_the_ends_of_the_random_range() -> None:
    p = RetryPolicy(base_backoff=0.1, max_backoff=10.0)
    assert retry_delay(p, 1, 0.0, _Fixed(0.0)) == 0.0
    assert retry_delay(p, 3, 1.0, _Fixed(0.5)) == pytest.approx(1.2)
    # A random source out of [0, 1) is clamped: never more than the window.
    assert retry_delay(p, 1, 0.0, _Fixed(7.0)) == pytest.approx(0.1)


def test_retry_budget_starts_full_spends_one_per_retry_and_refills_by_ratio() -> None:
    b = RetryBudget(ratio=0.1, max_tokens=2.0)
    assert b.tokens == 2.0
    assert b.try_acquire_retry() and b.try_acquire_retry()
    assert not b.try_acquire_retry()
    assert b.tokens == 0.0
    for _ in range(9):
        b.on_first_attempt()
    assert not b.try_acquire_retry()  # 0.9 tokens
    b.on_first_attempt()
    assert b.try_acquire_retry()
    for _ in range(100):
        b.on_first_attempt()
    assert b.tokens == 2.0  # capped


def test_retryable_outcomes_are_the_documented_three_and_ring_full() -> None:
    assert {s for s in Status if s.retryable} == {
        Status.RATE_LIMITED, Status.OVERLOADED, Status.QUEUE_FULL}
    assert is_retryable(fairsched.RingFull("full"))
    assert is_retryable(ErrorCode.RING_FULL)
    assert not is_retryable(fairsched.NotConnected("gone"))
    assert not is_retryable(Completion(1, 0, Status.SLOW_CONSUMER))
    assert is_retryable(Completion(1, 0, Status.QUEUE_FULL))


HTTP = {
    Status.OK: 200,
    Status.RATE_LIMITED: 429,
    Status.OVERLOADED: 503,
    Status.QUEUE_FULL: 503,
    Status.DEADLINE_EXCEEDED: 504,
    Status.INVALID: 400,
    Status.UNAUTHORIZED: 403,
    Status.CANCELLED: 499,
    Status.SHUTTING_DOWN: 503,
    Status.EXECUTOR_FAILED: 500,
    Status.SLOW_CONSUMER: 499,
}


def test_every_status_maps_to_the_documented_http_status() -> None:
    assert set(HTTP) == set(Status)
    for status, code in HTTP.items():
        assert Completion(1, 0, status).http_status() == code, status


def test_429_always_carries_retry_headers_rounded_up() -> None:
    c = Completion(1, 0, Status.RATE_LIMITED, retry_after_ns=1_000_000_001)
    assert c.http_headers() == [("retry-after-ms", "1001"), ("retry-after", "2")]
    assert fairsched.retry_after_ms(c) == 1001
    unknown = Completion(1, 0, Status.RATE_LIMITED)
    assert unknown.http_headers() == [("retry-after-ms", "0"), ("retry-after", "0")]


def test_503_carries_retry_headers_only_when_retry_after_is_known() -> None:
    assert Completion(1, 0, Status.OVERLOADED).http_headers() == []
    c = Completion(1, 0, Status.QUEUE_FULL, retry_after_ns=1)
    assert c.http_headers() == [("retry-after-ms", "1"), ("retry-after", "1")]
    assert Completion(1, 0, Status.OK, retry_after_ns=5).http_headers() == []


def test_submit_errors_map_to_the_documented_http_status() -> None:
    want = {503: {"RING_FULL", "NOT_CONNECTED", "DAEMON_LOST", "CONNECT_FAILED", "SHUTTING_DOWN",
                  "NO_CAPACITY"},
            504: {"TIMED_OUT"},
            400: {"INVALID_ARGUMENT", "UNKNOWN_ENDPOINT", "PROMPT_TOO_LARGE"},
            403: {"UNAUTHORIZED"},
            500: {"VERSION_MISMATCH", "REFUSED", "PROTOCOL", "UNKNOWN_TENANT", "SYSTEM"}}
    seen = set()
    for code in ErrorCode:
        if code == ErrorCode.OK:
            continue
        err = error_class(code)("m")
        status = http_status_for_error(err)
        assert code.name in want[status], (code.name, status)
        seen.add(code.name)
    assert seen == set().union(*want.values())


def test_each_error_code_has_its_class_and_the_library_spells_the_same_names() -> None:
    lib = fairsched._ffi.load()
    for code in ErrorCode:
        assert lib.fairsched_error_name(int(code)).decode() == code.name
        if code == ErrorCode.OK:
            continue
        cls = error_class(code)
        assert issubclass(cls, fairsched.FairschedError) and cls is not fairsched.FairschedError
        e = cls("what happened")
        assert (e.code, e.name, e.message) == (code, code.name, "what happened")
        assert str(e) == f"{code.name}: what happened"
    for status in Status:
        assert lib.fairsched_status_name(int(status)).decode() == status.name
    assert issubclass(fairsched.InvalidArgument, ValueError)


def test_errors_survive_pickling_with_their_class_and_message() -> None:
    import pickle

    e = pickle.loads(pickle.dumps(fairsched.RingFull("submission ring full")))
    assert type(e) is fairsched.RingFull and e.message == "submission ring full"
