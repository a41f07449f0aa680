"""OpenAI-style HTTP answers for completions and submit errors.

A completion's status code and its retry-after-ms value come from the
library (fairsched_http_status, fairsched_retry_after_ms: the table in
docs/client.md). The C ABI has no mapping for submit errors, so
``http_status_for_error`` is that table (include/fairsched/http.hpp,
``httpStatus(ErrorCode)``) written out here. The completion mapping itself
is in _httpcodes.py, which Completion's http_status() and http_headers()
use too.
"""

from __future__ import annotations

from ._httpcodes import http_headers as http_headers
from ._httpcodes import http_status as http_status
from ._httpcodes import retry_after_ms as retry_after_ms
from ._types import Completion as Completion  # what these functions take, importable here too
from .errors import ErrorCode, FairschedError

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
