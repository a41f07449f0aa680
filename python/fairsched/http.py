"""OpenAI-style HTTP answers for completions and submit errors.

A completion's status code and its retry-after-ms value come from the
library (fairsched_http_status, fairsched_retry_after_ms: the table in
docs/client.md). The C ABI has no mapping for submit errors, so
``http_status_for_error`` is that table (include/fairsched/http.hpp,
``httpStatus(ErrorCode)``) written out here.
"""

from __future__ import annotations

from . import _ffi
from ._types import Completion
from .errors import ErrorCode, FairschedError


def _c_completion(c: Completion) -> _ffi.CCompletion:
    out = _ffi.CCompletion()
    out.request_id = c.request_id
    out.tag = c.tag
    out.status = int(c.status)
    out.output_tokens = c.output_tokens
    out.retry_after_ns = c.retry_after_ns
    return out


def http_status(completion: Completion) -> int:
    """200, 429, 503, 504, 400, 403, 499 or 500 for a completion's status."""
    return int(_ffi.load().fairsched_http_status(_c_completion(completion)))


def retry_after_ms(completion: Completion) -> int:
    """The retry-after-ms header's value, or -1 when none is sent."""
    return int(_ffi.load().fairsched_retry_after_ms(_c_completion(completion)))


def http_headers(completion: Completion) -> list[tuple[str, str]]:
    """The headers of the answer: ``retry-after-ms`` (whole milliseconds, rounded
    up) and ``retry-after`` (whole seconds, rounded up) on a 429 always and on a
    503 when retry_after is known; otherwise none. Names are lower case."""
    ms = retry_after_ms(completion)
    if ms < 0:
        return []
    ns = max(0, completion.retry_after_ns)
    seconds = -(-ns // 1_000_000_000)
    return [("retry-after-ms", str(ms)), ("retry-after", str(seconds))]


_ERROR_STATUS = {
    ErrorCode.RING_FULL: 503,
    ErrorCode.NOT_CONNECTED: 503,
    ErrorCode.DAEMON_LOST: 503,
    ErrorCode.CONNECT_FAILED: 503,
    ErrorCode.SHUTTING_DOWN: 503,
    ErrorCode.NO_CAPACITY: 503,
    ErrorCode.TIMED_OUT: 504,
    ErrorCode.INVALID_ARGUMENT: 400,
    ErrorCode.UNKNOWN_ENDPOINT: 400,
    ErrorCode.PROMPT_TOO_LARGE: 400,
    ErrorCode.UNAUTHORIZED: 403,
}


def http_status_for_error(error: FairschedError) -> int:
    """The HTTP status for a submit error (no completion exists): 503 for
    RING_FULL, NOT_CONNECTED, DAEMON_LOST, CONNECT_FAILED, SHUTTING_DOWN and
    NO_CAPACITY; 504 for TIMED_OUT; 400 for INVALID_ARGUMENT,
    UNKNOWN_ENDPOINT and PROMPT_TOO_LARGE; 403 for UNAUTHORIZED; else 500."""
    return _ERROR_STATUS.get(error.code, 500)
