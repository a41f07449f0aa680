"""Errors of the library: ErrorCode mirrors fairsched_error, and each code
has its exception class, a subclass of FairschedError.

These are transport and usage errors (no daemon, a full ring, an unknown
name). The outcome of a request the daemon accepted is a Status in its
Completion, a separate vocabulary: a request that was RATE_LIMITED raises
nothing.
"""

from __future__ import annotations

import enum
from typing import Optional


class ErrorCode(enum.IntEnum):
    """fairsched_error: the library's error codes (0 is success)."""

    OK = 0
    INVALID_ARGUMENT = 1
    CONNECT_FAILED = 2
    TIMED_OUT = 3
    UNAUTHORIZED = 4
    VERSION_MISMATCH = 5
    NO_CAPACITY = 6
    SHUTTING_DOWN = 7
    REFUSED = 8
    PROTOCOL = 9
    NOT_CONNECTED = 10
    DAEMON_LOST = 11
    UNKNOWN_TENANT = 12
    UNKNOWN_ENDPOINT = 13
    PROMPT_TOO_LARGE = 14
    RING_FULL = 15
    SYSTEM = 16


class FairschedError(Exception):
    """A call into libfairsched failed.

    ``code`` is the ErrorCode, ``name`` its name as the library spells it
    ("RING_FULL"), ``message`` the library's message for the call.
    ``str(e)`` is "NAME: message".
    """

    code: ErrorCode = ErrorCode.SYSTEM

    def __init__(self, message: str, code: Optional[ErrorCode] = None) -> None:
        if code is not None:
            self.code = code
        self.name = self.code.name
        self.message = message
        super().__init__(f"{self.name}: {message}" if message else self.name)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_rebuild, (self.code.value, self.message))

    def __repr__(self) -> str:
        # The class names the code: the message is not repeated with it.
        return f"fairsched.{type(self).__name__}({self.message!r})"


class InvalidArgument(FairschedError, ValueError):
    """Options or request fields rejected before anything was sent."""

    code = ErrorCode.INVALID_ARGUMENT


class ConnectFailed(FairschedError):
    """The daemon is not running or not reachable at the socket path."""

    code = ErrorCode.CONNECT_FAILED


class TimedOut(FairschedError):
    """A control reply (Hello, OpenTenant) or a wait did not come in time."""

    code = ErrorCode.TIMED_OUT


class Unauthorized(FairschedError):
    """The daemon refused this client, tenant, tier, endpoint or worker role."""

    code = ErrorCode.UNAUTHORIZED


class VersionMismatch(FairschedError):
    """The daemon speaks another control protocol or segment layout."""

    code = ErrorCode.VERSION_MISMATCH


class NoCapacity(FairschedError):
    """The connection holds the most tenants the daemon allows open (max_tenants_per_connection)."""

    code = ErrorCode.NO_CAPACITY


class ShuttingDown(FairschedError):
    """The daemon refused because it is stopping."""

    code = ErrorCode.SHUTTING_DOWN


class Refused(FairschedError):
    """Another refusal by the daemon; the message says which."""

    code = ErrorCode.REFUSED


class ProtocolError(FairschedError):
    """A malformed reply or a segment that fails its checks."""

    code = ErrorCode.PROTOCOL


class NotConnected(FairschedError):
    """No live connection (lost and not reconnected, or the handle is closed)."""

    code = ErrorCode.NOT_CONNECTED


class DaemonLost(FairschedError):
    """The connection was lost during this call; outstanding requests end SHUTTING_DOWN."""

    code = ErrorCode.DAEMON_LOST


class UnknownTenant(FairschedError):
    """The tenant handle is not open on this client now."""

    code = ErrorCode.UNKNOWN_TENANT


class UnknownEndpoint(FairschedError):
    """The endpoint is not one the daemon announced."""

    code = ErrorCode.UNKNOWN_ENDPOINT


class PromptTooLarge(FairschedError):
    """The prompt (and params) exceed a slot, or the endpoint's batch tokens."""

    code = ErrorCode.PROMPT_TOO_LARGE


class RingFull(FairschedError):
    """The tenant's submission ring (or the worker's event ring) is full: back off and retry."""

    code = ErrorCode.RING_FULL


class SystemCallFailed(FairschedError):
    """An unexpected system call failure; the message names it."""

    code = ErrorCode.SYSTEM


_BY_CODE: dict[int, type[FairschedError]] = {
    cls.code.value: cls
    for cls in (
        InvalidArgument,
        ConnectFailed,
        TimedOut,
        Unauthorized,
        VersionMismatch,
        NoCapacity,
        ShuttingDown,
        Refused,
        ProtocolError,
        NotConnected,
        DaemonLost,
        UnknownTenant,
        UnknownEndpoint,
        PromptTooLarge,
        RingFull,
        SystemCallFailed,
    )
}


def error_class(code: int) -> type[FairschedError]:
    """The exception class of a fairsched_error value (FairschedError when unknown)."""
    return _BY_CODE.get(code, FairschedError)


# The library's words for each code (client/src/error.cpp, toString), which
# begin every message it reports: "unauthorized: the daemon refused tenant
# 'x': UNAUTHORIZED: no client rule ...". The exception's name says the code.
_LIBRARY_WORDS: dict[int, str] = {
    ErrorCode.INVALID_ARGUMENT: "invalid argument",
    ErrorCode.CONNECT_FAILED: "cannot connect to the daemon",
    ErrorCode.TIMED_OUT: "timed out",
    ErrorCode.UNAUTHORIZED: "unauthorized",
    ErrorCode.VERSION_MISMATCH: "version mismatch",
    ErrorCode.NO_CAPACITY: "no capacity",
    ErrorCode.SHUTTING_DOWN: "daemon shutting down",
    ErrorCode.REFUSED: "refused by the daemon",
    ErrorCode.PROTOCOL: "protocol error",
    ErrorCode.NOT_CONNECTED: "not connected",
    ErrorCode.DAEMON_LOST: "daemon lost",
    ErrorCode.UNKNOWN_TENANT: "unknown tenant",
    ErrorCode.UNKNOWN_ENDPOINT: "unknown endpoint",
    ErrorCode.PROMPT_TOO_LARGE: "prompt too large",
    ErrorCode.RING_FULL: "submission ring full",
    ErrorCode.SYSTEM: "system error",
}


def library_message(code: int, message: str) -> str:
    """The library's message for an error of ``code`` without the code said
    again: its leading words for the code ("unauthorized: …") go, and so
    does a daemon's refusal status that spells the code's name (": UNAUTHORIZED:"),
    since the exception's name (``str(e)`` starts with it) says both."""
    words = _LIBRARY_WORDS.get(code)
    if words is not None:
        if message == words:
            return ""
        if message.startswith(words + ": "):
            message = message[len(words) + 2:]
    try:
        tagged = ": " + ErrorCode(code).name
    except ValueError:
        return message
    i = message.find(tagged + ": ")
    if i >= 0:
        return message[:i] + message[i + len(tagged):]
    if message.endswith(tagged):
        return message[: -len(tagged)]
    return message


def make_error(code: int, message: str) -> FairschedError:
    """The exception of error ``code`` with ``message`` (kept as given)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return FairschedError(f"error {code}: {message}", ErrorCode.SYSTEM)
    return cls(message)


def _rebuild(code: int, message: str) -> FairschedError:
    """Unpickles an error: its class from the code, the same message."""
    return make_error(code, message)
