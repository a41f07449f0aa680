"""The values the package hands out: Status, Tenant, Completion, WorkItem."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional

from . import _httpcodes

_NS = 1e-9


class Status(enum.IntEnum):
    """fairsched_status: the one outcome every submitted request ends with."""

    OK = 0
    RATE_LIMITED = 1  # a limit would be exceeded; retry_after says when it will not
    OVERLOADED = 2  # the backlog cannot meet the endpoint's latency target
    QUEUE_FULL = 3  # the tenant's queue bound is reached
    DEADLINE_EXCEEDED = 4  # the deadline passed before the request could run
    INVALID = 5  # the request can never be served as given
    UNAUTHORIZED = 6  # the client may not submit for this tenant/endpoint
    CANCELLED = 7  # withdrawn (cancel(), client gone, tenant removed)
    SHUTTING_DOWN = 8  # the daemon stopped, or went away with the request outstanding
    EXECUTOR_FAILED = 9  # the executor or worker failed the request
    SLOW_CONSUMER = 10  # the client did not read its token stream; the request was aborted

    @property
    def retryable(self) -> bool:
        """RATE_LIMITED, OVERLOADED and QUEUE_FULL: the daemon may take it a little later."""
        return self in (Status.RATE_LIMITED, Status.OVERLOADED, Status.QUEUE_FULL)


def _status(value: int) -> Status:
    try:
        return Status(value)
    except ValueError:
        # A status this package does not know comes from a newer library;
        # it is reported as the executor's failure, as the library does.
        return Status.EXECUTOR_FAILED


@dataclass(frozen=True)
class Tenant:
    """A tenant opened with open_tenant(): the client's handle for it.

    It stays valid across reconnects of the client that opened it, and
    means nothing to another client.
    """

    name: str
    index: int
    tier: Optional[str] = None


@dataclass(slots=True)
class Completion:
    """One completion of a request: a stream chunk (``partial``) or its final one.

    A chunk holds output tokens ``[first_token, first_token + len(tokens))``
    and ``emitted_ns``; its status is OK and the usage fields are 0. Exactly
    one final completion (``partial`` False) follows a request's last chunk.
    Times are integer nanoseconds as the library reports them, with
    properties in seconds (``queue_wait``, ``service``, ...).
    """

    request_id: int
    tag: int
    status: Status
    output_tokens: int = 0
    retry_after_ns: int = 0
    queue_wait_ns: int = 0
    service_ns: int = 0
    checksum: int = 0
    local: bool = False  # made up by the library: the daemon went away first
    partial: bool = False
    first_token: int = 0
    tokens: list[int] = field(default_factory=list)
    input_tokens: int = 0
    emitted_ns: int = 0  # chunks: CLOCK_MONOTONIC (time.monotonic_ns()) when produced
    time_to_first_token_ns: int = 0

    @property
    def ok(self) -> bool:
        """True when the status is OK."""
        return self.status == Status.OK

    @property
    def retry_after(self) -> float:
        """Seconds to wait at least before retrying (RATE_LIMITED); 0.0 when unknown."""
        return self.retry_after_ns * _NS

    @property
    def queue_wait(self) -> float:
        """Seconds from admission to dispatch."""
        return self.queue_wait_ns * _NS

    @property
    def service(self) -> float:
        """Seconds from dispatch to completion."""
        return self.service_ns * _NS

    @property
    def time_to_first_token(self) -> float:
        """Worker endpoints: seconds from dispatch to the first token; 0.0 when none came."""
        return self.time_to_first_token_ns * _NS

    @property
    def emitted(self) -> float:
        """Chunks: when the worker produced them, on time.monotonic()'s clock."""
        return self.emitted_ns * _NS

    def http_status(self) -> int:
        """The OpenAI-style HTTP status of this completion (fairsched_http_status)."""
        return _httpcodes.http_status(self)

    def http_headers(self) -> list[tuple[str, str]]:
        """retry-after-ms and retry-after, where the HTTP mapping sends them."""
        return _httpcodes.http_headers(self)


class WorkKind(enum.IntEnum):
    """fairsched_work_kind."""

    ASSIGN = 0  # run the request
    ABORT = 1  # stop it and finish it with Status.CANCELLED
    PREEMPT = 2  # give it back: stop it, emit what it generated, then Worker.preempted()


@dataclass(slots=True)
class WorkItem:
    """What Worker.poll() hands out: an assignment, or an abort or preempt (only kind and id set)."""

    kind: WorkKind
    id: int
    tenant: int = 0
    priority: int = 0
    counts_only: bool = False  # prompt_tokens is a count; prompt is empty; params name the body
    deadline_ns: int = 0  # absolute CLOCK_MONOTONIC; 0: none
    prompt_tokens: int = 0
    max_output_tokens: int = 0
    prompt: list[int] = field(default_factory=list)
    params: bytes = b""
    # A resumed sequence: the ids it generated before it was preempted;
    # recompute prompt + these and emit from token len(resumed) on.
    resumed: list[int] = field(default_factory=list)

    @property
    def deadline(self) -> Optional[float]:
        """The deadline on time.monotonic()'s clock, or None."""
        return self.deadline_ns * _NS if self.deadline_ns else None


@dataclass(frozen=True)
class WorkerStats:
    """Counters of a worker since it connected."""

    assigned: int
    aborted: int
    tokens_emitted: int
    finished: int
    ring_full_waits: int
