"""fairsched: the client and worker roles of libfairsched for Python.

Blocking: ``Client`` (frontends) and ``Worker`` (engines). asyncio:
``AsyncClient`` and ``AsyncWorker``. Over the C ABI with ctypes; the
library is found from $FAIRSCHED_LIBRARY, the installed path, the
checkout's build tree or the system (``fairsched.library_path()`` says
which). docs/python.md is the guide.
"""

from ._ffi import MAX_PARAMS_BYTES, LibraryNotFound, library_path
from ._types import Completion, Status, Tenant, WorkerStats, WorkItem, WorkKind
from .aio import AsyncClient, AsyncWorker, Connecting, Request, RetryingStream
from .client import DEFAULT_SOCKET, Client, monotonic_deadline
from .errors import (
    ConnectFailed,
    DaemonLost,
    ErrorCode,
    FairschedError,
    InvalidArgument,
    NoCapacity,
    NotConnected,
    PromptTooLarge,
    ProtocolError,
    Refused,
    RingFull,
    ShuttingDown,
    SystemCallFailed,
    TimedOut,
    Unauthorized,
    UnknownEndpoint,
    UnknownTenant,
    VersionMismatch,
)
from .http import http_headers, http_status, http_status_for_error, retry_after_ms
from .retry import (
    RetryBudget,
    RetryOutcome,
    RetryPolicy,
    RetryStop,
    backoff_window,
    is_retryable,
    retry_delay,
)
from .worker import Worker, prefix_block_hashes

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AsyncWorker",
    "Client",
    "Completion",
    "ConnectFailed",
    "Connecting",
    "DaemonLost",
    "DEFAULT_SOCKET",
    "ErrorCode",
    "FairschedError",
    "InvalidArgument",
    "LibraryNotFound",
    "MAX_PARAMS_BYTES",
    "NoCapacity",
    "NotConnected",
    "PromptTooLarge",
    "ProtocolError",
    "Refused",
    "Request",
    "RetryBudget",
    "RetryOutcome",
    "RetryingStream",
    "RetryPolicy",
    "RetryStop",
    "RingFull",
    "ShuttingDown",
    "Status",
    "SystemCallFailed",
    "Tenant",
    "TimedOut",
    "Unauthorized",
    "UnknownEndpoint",
    "UnknownTenant",
    "VersionMismatch",
    "Worker",
    "WorkerStats",
    "WorkItem",
    "WorkKind",
    "backoff_window",
    "http_headers",
    "prefix_block_hashes",
    "http_status",
    "http_status_for_error",
    "is_retryable",
    "library_path",
    "monotonic_deadline",
    "retry_after_ms",
    "retry_delay",
]
