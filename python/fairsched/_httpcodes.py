"""The library's HTTP mapping of a completion (fairsched_http_status,
fairsched_retry_after_ms; the table in docs/client.md): the status code and
the retry headers of an OpenAI-style answer. It reads only a completion's
fields, so Completion (_types.py) and http.py both build on it."""

from __future__ import annotations

from typing import Protocol

from . import _ffi


class _CompletionFields(Protocol):
    """What the mapping reads of a completion (Completion has them all)."""

    @property
    def request_id(self) -> int: ...

    @property
    def tag(self) -> int: ...

    @property
    def status(self) -> int: ...

    @property
    def output_tokens(self) -> int: ...

    @property
    def retry_after_ns(self) -> int: ...


def _c_completion(c: _CompletionFields) -> _ffi.CCompletion:
    out = _ffi.CCompletion()
    out.request_id = c.request_id
    out.tag = c.tag
    out.status = int(c.status)
    out.output_tokens = c.output_tokens
    out.retry_after_ns = c.retry_after_ns
    return out


def http_status(completion: _CompletionFields) -> int:
    """200, 429, 503, 504, 400, 403, 499 or 500 for a completion's status."""
    return int(_ffi.load().fairsched_http_status(_c_completion(completion)))


def retry_after_ms(completion: _CompletionFields) -> int:
    """The retry-after-ms header's value, or -1 when none is sent."""
    return int(_ffi.load().fairsched_retry_after_ms(_c_completion(completion)))


def http_headers(completion: _CompletionFields) -> list[tuple[str, str]]:
    """The headers of the answer: ``retry-after-ms`` (whole milliseconds, rounded
    up) and ``retry-after`` (whole seconds, rounded up) on a 429 always and on a
    503 when retry_after is known; otherwise none. Names are lower case."""
    ms = retry_after_ms(completion)
    if ms < 0:
        return []
    ns = max(0, completion.retry_after_ns)
    seconds = -(-ns // 1_000_000_000)
    return [("retry-after-ms", str(ms)), ("retry-after", str(seconds))]
