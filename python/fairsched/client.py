"""The client role, blocking: Client over fairsched_client.

Threading: every method may be called from any number of threads at once
(the library is thread-safe and ctypes releases the GIL during each call),
close() included: calls blocked in the library then raise NotConnected at
once. Blocking calls (wait, submit_and_wait, submit_with_retry) block only
the calling thread.

fork(): a child that inherited a Client gets NotConnected from every call,
and dropping or closing it there leaves the parent's connection alone; a
child connects its own.

Every request submit() accepted gets exactly one final Completion, from
the daemon or, when the daemon goes away first, made up by the library with
status SHUTTING_DOWN and ``local`` set. A request submit() refused (it
raised) gets none.
"""

from __future__ import annotations

import array
import ctypes
import os
import struct
import threading
import time
from ctypes import byref, c_int, c_int32, c_uint32, c_uint64
from typing import Iterable, Optional, Union

from . import _ffi
from ._common import DEFAULT_SOCKET, POLL_BATCH, U32, U64, Handle, check_int, connect
from ._common import encode_name, encode_path, seconds_to_ns
from ._types import Completion, Status, Tenant
from .errors import InvalidArgument
from .retry import RetryOutcome, RetryPolicy

__all__ = ["DEFAULT_SOCKET", "POLL_BATCH", "Client", "Params", "Prompt", "monotonic_deadline"]

Prompt = Union[Iterable[int], "array.array[int]"]
Params = Union[bytes, bytearray, memoryview, str]

_STATUSES = tuple(Status)
_NSTATUSES = len(_STATUSES)
_SUBMIT_REQUEST_SIZE = ctypes.sizeof(_ffi.SubmitRequest)


def _prompt_array(prompt: Prompt) -> "array.array[int]":
    if isinstance(prompt, array.array) and prompt.typecode == "I" and prompt.itemsize == 4:
        return prompt
    if isinstance(prompt, (str, bytes, bytearray)):
        raise TypeError(f"prompt must be token ids (ints), not {type(prompt).__name__}")
    try:
        return array.array("I", prompt)
    except OverflowError as e:
        raise InvalidArgument("prompt: every token id must be in [0, 2**32)") from e
    except TypeError as e:
        raise TypeError(f"prompt must be an iterable of int token ids: {e}") from e


def _params_bytes(params: Optional[Params]) -> bytes:
    if params is None:
        return b""
    if isinstance(params, str):
        data = params.encode("utf-8")
    elif isinstance(params, (bytes, bytearray, memoryview)):
        data = bytes(params)
    else:
        raise TypeError(f"params must be bytes or str, not {type(params).__name__}")
    if len(data) > _ffi.MAX_PARAMS_BYTES:
        raise InvalidArgument(
            f"params are {len(data)} bytes; at most {_ffi.MAX_PARAMS_BYTES} are allowed"
        )
    return data


_endpoint_names: dict[str, bytes] = {}


def _endpoint_bytes(endpoint: str) -> bytes:
    b = _endpoint_names.get(endpoint)
    if b is None:
        b = encode_name("endpoint", endpoint)
        if len(_endpoint_names) < 1024:
            _endpoint_names[endpoint] = b
    return b


class _Request:
    """A fairsched_submit_request and the buffers it points into (kept alive with it)."""

    __slots__ = ("c", "_keep")

    def __init__(
        self,
        tenant: Tenant,
        endpoint: str,
        prompt: Prompt,
        max_output_tokens: int,
        priority: int,
        timeout: Optional[float],
        deadline: Optional[float],
        params: Optional[Params],
        prompt_token_count: Optional[int],
        stream: bool,
        tag: int,
        prefix: Optional[Iterable[int]] = None,
    ) -> None:
        if type(tenant) is not Tenant:
            if not isinstance(tenant, Tenant):
                raise TypeError(
                    f"tenant must be a Tenant from open_tenant(), not {type(tenant).__name__}"
                )
        c = _ffi.SubmitRequest()
        c.struct_size = _SUBMIT_REQUEST_SIZE
        c.tenant = tenant.index
        c.endpoint = _endpoint_bytes(endpoint)
        # Range checks inline (the common case), check_int for the message.
        if type(max_output_tokens) is not int or not 0 <= max_output_tokens <= U32:
            check_int("max_output_tokens", max_output_tokens, 0, U32)
        c.max_output_tokens = max_output_tokens
        if type(priority) is not int or priority:
            c.priority = check_int("priority", priority, -(2**31), 2**31 - 1)
        if type(tag) is not int or tag:
            c.tag = check_int("tag", tag, 0, U64)
        if timeout is not None:
            ns = seconds_to_ns("timeout", timeout)
            if ns <= 0:
                raise InvalidArgument(f"timeout = {timeout} must be positive (None: no timeout)")
            c.timeout_ns = ns
        if deadline is not None:
            ns = seconds_to_ns("deadline", deadline)
            if ns <= 0:
                raise InvalidArgument(
                    f"deadline = {deadline} must be a positive time.monotonic() value"
                )
            c.deadline_ns = ns
        tokens = _prompt_array(prompt)
        self._keep: tuple[object, ...] = (tokens,)
        n = len(tokens)
        if n:
            c.prompt = tokens.buffer_info()[0]
            c.prompt_tokens = n
        if prompt_token_count is not None:
            if n:
                raise InvalidArgument("prompt_token_count is for counts-only requests: give no prompt")
            c.counts_only = 1
            c.prompt_token_count = check_int("prompt_token_count", prompt_token_count, 0, U32)
        if params is not None:
            data = _params_bytes(params)
            if data:
                buf = ctypes.create_string_buffer(data, len(data))
                self._keep = (tokens, buf)
                c.params = ctypes.addressof(buf)
                c.params_bytes = len(data)
        if stream:
            c.stream = 1
        if prefix is not None:
            try:
                hashes = array.array("Q", (check_int("prefix", h, 0, U64) for h in prefix))
            except (OverflowError, TypeError) as e:
                raise InvalidArgument("prefix: every block hash must be in [0, 2**64)") from e
            if hashes:
                self._keep = self._keep + (hashes,)
                c.prefix = hashes.buffer_info()[0]
                c.prefix_blocks = len(hashes)
        self.c = c


# fairsched_completion as a struct module format: one unpack_from reads a
# whole slot of the poll buffer (python/tests/test_abi_layout.py checks it).
_COMPLETION = struct.Struct("=QQiIqqqQiiiIQIIqq")


def _from_c(c: _ffi.CCompletion) -> Completion:
    return _from_fields(_COMPLETION.unpack_from(c))


# Up to this many tokens are copied out through a ctypes array (cheapest for
# few); more through one bytes copy and array.tolist() (one C loop).
_SMALL_CHUNK = 24


def _tokens(tokens_at: int, token_count: int) -> list[int]:
    """A completion's tokens, copied out of the library's buffer as one list."""
    if token_count <= _SMALL_CHUNK:
        return (ctypes.c_uint32 * token_count).from_address(tokens_at)[:]
    return array.array("I", ctypes.string_at(tokens_at, 4 * token_count)).tolist()


def _decode(buf: "ctypes.Array[_ffi.CCompletion]", n: int) -> list[Completion]:
    """The first ``n`` completions of a poll buffer, in one pass (the hot
    path of every reader: no call per completion but the constructor's)."""
    unpack = _COMPLETION.unpack_from
    size = _COMPLETION.size
    statuses = _STATUSES
    nstatuses = _NSTATUSES
    ok = Status.OK
    small = _SMALL_CHUNK
    c_u32 = ctypes.c_uint32
    out: list[Completion] = []
    append = out.append
    for off in range(0, n * size, size):
        (rid, tag, status, output_tokens, retry_after, queue_wait, service, checksum, local, _,
         partial, first_token, tokens_at, token_count, input_tokens, emitted,
         ttft) = unpack(buf, off)
        if token_count == 0:
            tokens = []
        elif token_count <= small:
            tokens = (c_u32 * token_count).from_address(tokens_at)[:]
        else:
            tokens = array.array("I", ctypes.string_at(tokens_at, 4 * token_count)).tolist()
        append(Completion(
            rid, tag,
            ok if status == 0 else
            statuses[status] if 0 <= status < nstatuses else Status.EXECUTOR_FAILED,
            output_tokens, retry_after, queue_wait, service, checksum, local != 0, partial != 0,
            first_token, tokens, input_tokens, emitted, ttft,
        ))
    return out


def _from_fields(f: tuple[int, ...]) -> Completion:
    (rid, tag, status, output_tokens, retry_after, queue_wait, service, checksum, local, _,
     partial, first_token, tokens_at, token_count, input_tokens, emitted, ttft) = f
    tokens = _tokens(tokens_at, token_count) if token_count else []
    return Completion(
        rid,
        tag,
        _STATUSES[status] if 0 <= status < _NSTATUSES else Status.EXECUTOR_FAILED,
        output_tokens,
        retry_after,
        queue_wait,
        service,
        checksum,
        local != 0,
        partial != 0,
        first_token,
        tokens,
        input_tokens,
        emitted,
        ttft,
    )


_poll_buffers = threading.local()


def _poll_buffer(size: int) -> "ctypes.Array[_ffi.CCompletion]":
    buf: Optional["ctypes.Array[_ffi.CCompletion]"] = getattr(_poll_buffers, "buf", None)
    if buf is None or len(buf) < size:
        buf = (_ffi.CCompletion * size)()
        _poll_buffers.buf = buf
    return buf


class Client(Handle):
    """A connection to fairschedd in the client role (fairsched_client).

    Use ``Client.connect(...)``; close it with ``close()`` (from any thread:
    calls in progress raise NotConnected; requests still outstanding get no
    completion) or a ``with`` block. Times are in seconds; deadlines are
    time.monotonic() values (CLOCK_MONOTONIC, the daemon's clock).
    """

    _close_fn = "fairsched_close"
    _shutdown_fn = "fairsched_shutdown"
    _connected_fn = "fairsched_connected"
    _role = "client"

    def __init__(self, handle: int, socket_path: str) -> None:
        """Internal: use Client.connect()."""
        super().__init__(handle)
        #: The daemon's socket this client connected to.
        self.socket_path = socket_path

    def _repr_fields(self) -> str:
        return f"socket={self.socket_path!r}"

    @classmethod
    def connect(
        cls,
        socket_path: str = DEFAULT_SOCKET,
        *,
        name: Optional[str] = None,
        connect_timeout: float = 5.0,
        control_timeout: float = 5.0,
        spin: float = 20e-6,
        reconnect: bool = False,
        reconnect_initial_delay: float = 0.1,
        reconnect_max_delay: float = 5.0,
    ) -> "Client":
        """Connects and says Hello.

        ``name`` is informational (1 to 63 of ASCII letters, digits and
        ``. _ - : @ / +``). With ``reconnect``, later calls connect again
        after the daemon went away (requests outstanding then still end
        SHUTTING_DOWN). Raises ConnectFailed, TimedOut, Unauthorized,
        VersionMismatch, ShuttingDown, Refused, ProtocolError, InvalidArgument.
        """
        lib = _ffi.load()
        o = _ffi.Options()
        lib.fairsched_options_init(byref(o))
        o.socket_path = encode_path("socket_path", socket_path)
        if name is not None:
            o.client_name = encode_name("name", name)
        o.connect_timeout_ns = seconds_to_ns("connect_timeout", connect_timeout)
        o.control_timeout_ns = seconds_to_ns("control_timeout", control_timeout)
        o.spin_ns = seconds_to_ns("spin", spin)
        o.reconnect = 1 if reconnect else 0
        o.reconnect_initial_delay_ns = seconds_to_ns("reconnect_initial_delay", reconnect_initial_delay)
        o.reconnect_max_delay_ns = seconds_to_ns("reconnect_max_delay", reconnect_max_delay)
        return cls(connect(lib, lib.fairsched_connect, o), socket_path)

    # -- tenants and requests ---------------------------------------------

    def open_tenant(self, name: str, tier: Optional[str] = None) -> Tenant:
        """Opens tenant ``name`` on the daemon (a control round trip), or
        returns the handle already open for it; the tier of the first open
        stays. ``tier`` is a hint honoured only for clients allowed to assign
        tiers. Raises InvalidArgument (a bad name), Unauthorized, NoCapacity,
        ShuttingDown, Refused, TimedOut, NotConnected, DaemonLost."""
        name_b = encode_name("tenant", name)
        tier_b = encode_name("tier", tier) if tier is not None else None
        index = c_uint32()
        self._call(self._lib.fairsched_open_tenant, name_b, tier_b, byref(index))
        return Tenant(name, index.value, tier)

    def open_tenants(self, names: Iterable[str], tier: Optional[str] = None) -> list[Tenant]:
        """Opens many tenants in one pipelined exchange with the daemon (over
        100,000 a second on one connection), in order; one connection holds up
        to the daemon's ``max_tenants_per_connection`` open (65,536 by
        default). Raises the first refusal (the errors of open_tenant()); the
        names before and after it that could be opened stay open."""
        encoded = [encode_name("tenant", n) for n in names]
        tier_b = encode_name("tier", tier) if tier is not None else None
        count = len(encoded)
        if count == 0:
            return []
        c_names = (ctypes.c_char_p * count)(*encoded)
        out = (c_uint32 * count)()
        self._call(self._lib.fairsched_open_tenants, c_names, count, tier_b, out)
        return [Tenant(n.decode(), out[i], tier) for i, n in enumerate(encoded)]

    def close_tenant(self, tenant: Tenant) -> None:
        """Releases ``tenant``: the daemon ends its queued requests CANCELLED
        (running ones finish), and the handle is no longer valid (submit raises
        UnknownTenant). Opening the name again gives a new handle. Raises
        UnknownTenant (not open here), TimedOut, Refused."""
        if not isinstance(tenant, Tenant):
            raise InvalidArgument(
                f"tenant must be a Tenant from open_tenant(), not {type(tenant).__name__}"
            )
        self._call(self._lib.fairsched_close_tenant, check_int("tenant", tenant.index, 0, U32))

    def close_tenants(self, tenants: Iterable[Tenant]) -> None:
        """Closes many tenants in one pipelined exchange; raises the first error
        (the others are closed)."""
        handles = []
        for t in tenants:
            if not isinstance(t, Tenant):
                raise InvalidArgument(
                    f"tenants must be Tenants from open_tenant(), not {type(t).__name__}"
                )
            handles.append(check_int("tenant", t.index, 0, U32))
        if not handles:
            return
        arr = (c_uint32 * len(handles))(*handles)
        self._call(self._lib.fairsched_close_tenants, arr, len(handles))

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
    ) -> int:
        """Writes one request into its tenant's ring and returns its id (never 0).

        ``prompt``: token ids (a list, or ``array.array('I')`` without a
        copy). ``timeout``: seconds from now; ``deadline``: a time.monotonic()
        value; the earlier wins. Worker endpoints only: ``stream`` (the output
        arrives as partial completions before the final one), ``params`` (up
        to 4096 bytes handed to the worker; a str is sent as UTF-8) and
        ``prompt_token_count`` (counts only: the prompt's length, with no
        prompt given). ``tag`` is echoed in the completions. ``prefix``: the
        prompt's block hashes (prefix_block_hashes(), at most 1024), what an
        endpoint with routing = "prefix" places the request by — needed for a
        counts-only request; the daemon hashes the ids it is sent otherwise.

        Never blocks (with ``reconnect``, a call made while disconnected may
        first try to reconnect). Raises RingFull (back off and retry),
        PromptTooLarge, InvalidArgument, UnknownTenant, UnknownEndpoint,
        NotConnected, DaemonLost (no completion will come). TypeError for
        arguments of the wrong type.
        """
        req = _Request(
            tenant, endpoint, prompt, max_output_tokens, priority, timeout, deadline,
            params, prompt_token_count, stream, tag, prefix,
        )
        rid = c_uint64()
        self._call(self._lib.fairsched_submit, byref(req.c), byref(rid))
        return rid.value

    def poll(self, max: int = POLL_BATCH) -> list[Completion]:
        """Up to ``max`` completions (chunks and final ones), without blocking.
        A request's chunks come in order, before its final completion."""
        if max <= 0:
            return []
        buf = _poll_buffer(max)
        h = self._enter()
        try:
            n = self._lib.fairsched_poll(h, buf, max)
        finally:
            self._leave()
        return _decode(buf, n) if n else []

    def cancel(self, request_id: int) -> None:
        """Withdraws a request: queued, it ends CANCELLED at once; running on a
        worker, the worker aborts it and it ends CANCELLED with the tokens
        produced so far; running in an in-daemon executor, it finishes as it
        would have. Exactly one final completion still comes. Never blocks.
        Raises InvalidArgument (not outstanding: already completed, or not
        this client's), RingFull (try again), NotConnected (its connection is
        gone: it completes SHUTTING_DOWN by itself)."""
        self._call(self._lib.fairsched_cancel, check_int("request_id", request_id, 0, U64))

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until poll() has something (True) or ``timeout`` seconds
        pass (False; None waits forever). Raises DaemonLost when the
        connection was lost before or during the call (the outstanding
        requests are ready to poll() as SHUTTING_DOWN), NotConnected."""
        return self._wait(self._lib.fairsched_wait, timeout)

    def completion_fd(self) -> int:
        """A descriptor for select/epoll, readable when poll() may have
        something or the connection was lost. Never read from it. Call
        prepare_to_block() before every blocking wait on it."""
        h = self._enter()
        try:
            return int(self._lib.fairsched_completion_fd(h))
        finally:
            self._leave()

    def prepare_to_block(self) -> bool:
        """True: block on completion_fd() now; False: poll() first. The first
        call switches the client to descriptor mode for good (every
        completion batch signals the descriptor). Raises NotConnected."""
        block = c_int()
        self._call(self._lib.fairsched_prepare_to_block, byref(block))
        return block.value != 0

    def submit_and_wait(
        self,
        tenant: Tenant,
        endpoint: str,
        prompt: Prompt = (),
        *,
        max_output_tokens: int,
        wait_timeout: Optional[float] = None,
        priority: int = 0,
        timeout: Optional[float] = None,
        deadline: Optional[float] = None,
        params: Optional[Params] = None,
        prompt_token_count: Optional[int] = None,
        tag: int = 0,
        prefix: Optional[Iterable[int]] = None,
    ) -> Completion:
        """Submits and blocks until this request's final completion, or
        ``wait_timeout`` seconds (TimedOut; the request stays with the daemon
        and its completion is dropped). Other threads may poll meanwhile.
        Raises what submit() raises."""
        req = _Request(
            tenant, endpoint, prompt, max_output_tokens, priority, timeout, deadline,
            params, prompt_token_count, False, tag, prefix,
        )
        out = _ffi.CCompletion()
        ns = seconds_to_ns("wait_timeout", wait_timeout)
        self._call(self._lib.fairsched_submit_and_wait, byref(req.c), ns, byref(out))
        return _from_c(out)

    def submit_with_retry(
        self,
        tenant: Tenant,
        endpoint: str,
        prompt: Prompt = (),
        *,
        max_output_tokens: int,
        policy: Optional[RetryPolicy] = None,
        priority: int = 0,
        timeout: Optional[float] = None,
        deadline: Optional[float] = None,
        params: Optional[Params] = None,
        prompt_token_count: Optional[int] = None,
        tag: int = 0,
        prefix: Optional[Iterable[int]] = None,
    ) -> RetryOutcome:
        """submit_and_wait with the library's retries: RATE_LIMITED,
        OVERLOADED, QUEUE_FULL and RingFull are retried with backoff and full
        jitter after retry_after, within ``policy`` and the client's retry
        budget; a deadline or timeout bounds the whole loop. Returns the last
        attempt's completion, whatever its status; raises the last attempt's
        submit error when it had no completion."""
        p = policy or RetryPolicy()
        req = _Request(
            tenant, endpoint, prompt, max_output_tokens, priority, timeout, deadline,
            params, prompt_token_count, False, tag, prefix,
        )
        cp = _ffi.RetryPolicyC()
        self._lib.fairsched_retry_policy_init(byref(cp))
        cp.max_attempts = check_int("max_attempts", p.max_attempts, -(2**31), 2**31 - 1)
        cp.base_backoff_ns = seconds_to_ns("base_backoff", p.base_backoff)
        cp.max_backoff_ns = seconds_to_ns("max_backoff", p.max_backoff)
        cp.max_retry_after_ns = seconds_to_ns("max_retry_after", p.max_retry_after)
        cp.attempt_timeout_ns = seconds_to_ns("attempt_timeout", p.attempt_timeout)
        out = _ffi.CCompletion()
        attempts = c_int32()
        self._call(self._lib.fairsched_submit_with_retry, byref(req.c), byref(cp), byref(out),
                   byref(attempts))
        return RetryOutcome(_from_c(out), attempts.value)


def monotonic_deadline(seconds_from_now: float) -> float:
    """A deadline ``seconds_from_now`` ahead, on the clock submit() expects."""
    return time.monotonic() + seconds_from_now
