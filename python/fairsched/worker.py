"""The worker role, blocking: Worker over fairsched_worker (docs/worker.md).

An engine attached to an endpoint with executor = "worker" runs, at every
iteration:

    worker.set_capacity(free_sequences, free_kv_tokens)  # what it can take now
    for item in worker.poll():     # ASSIGN: add the sequence; ABORT: drop it
        ...
    ... one engine step ...
    worker.emit(id, new_tokens)    # per running sequence, as generated
    worker.finish(id, Status.OK, output_tokens)  # per finished sequence
    (and wait() when idle)

Every assignment ends with exactly one finish(): OK when done, CANCELLED to
acknowledge an ABORT, EXECUTOR_FAILED (with a message) when the engine
failed it, INVALID when it can never serve it.

Threading: set_capacity(), emit() and finish() may be called from any
number of threads at once; poll(), wait() and prepare_to_block() from one
thread at a time; close() from any thread at any time (a wait() in progress
raises NotConnected at once). A child of os.fork() that inherited a Worker
gets NotConnected from every call, and dropping it there leaves the
parent's attachment alone.
"""

from __future__ import annotations

import array
import ctypes
import os
from ctypes import POINTER, byref, c_int, c_uint32, c_uint64, c_void_p, cast
from typing import Iterable, Optional, Union

from . import _ffi
from ._common import DEFAULT_SOCKET, POLL_BATCH, U32, U64, Handle, check_int, connect
from ._common import encode_name, encode_path, seconds_to_ns
from ._types import Status, WorkerStats, WorkItem, WorkKind
from .errors import InvalidArgument

Tokens = Union[Iterable[int], "array.array[int]"]

# fairsched_cache_op
_CACHE_STORED = 1
_CACHE_REMOVED = 2
_CACHE_CLEARED = 3
DEFAULT_PREFIX_BLOCK_TOKENS = 16


def prefix_block_hashes(
    tokens: Tokens, block_tokens: int = DEFAULT_PREFIX_BLOCK_TOKENS, max_blocks: Optional[int] = None
) -> list[int]:
    """A prompt's prefix identity (docs/worker.md "Prefix routing"): the
    hashes of its whole blocks of ``block_tokens`` token ids, hash i
    covering the prompt up to the end of block i — what the daemon computes
    for routing = "prefix" and what blocks_stored() reports."""
    check_int("block_tokens", block_tokens, 1, U32)
    try:
        arr = tokens if isinstance(tokens, array.array) else array.array("I", tokens)
    except (OverflowError, TypeError) as e:
        raise InvalidArgument("tokens: every token id must be in [0, 2**32)") from e
    if arr.typecode != "I":
        arr = array.array("I", arr)
    blocks = len(arr) // block_tokens
    if max_blocks is not None:
        blocks = min(blocks, check_int("max_blocks", max_blocks, 0, U64))
    if blocks == 0:
        return []
    out = (c_uint64 * blocks)()
    addr, _ = arr.buffer_info()
    n = _ffi.load().fairsched_prefix_block_hashes(
        cast(c_void_p(addr), POINTER(c_uint32)), len(arr), block_tokens, out, blocks
    )
    return list(out[:n])


def _item_from_c(c: _ffi.CWorkItem) -> WorkItem:
    if c.kind != WorkKind.ASSIGN:
        return WorkItem(WorkKind(c.kind), c.id)
    n = c.prompt_len
    params = ctypes.string_at(c.params, c.params_bytes) if c.params_bytes else b""
    return WorkItem(
        WorkKind.ASSIGN,
        c.id,
        c.tenant,
        c.priority,
        c.counts_only != 0,
        c.deadline_ns,
        c.prompt_tokens,
        c.max_output_tokens,
        c.prompt[:n] if n else [],
        params,
        c.resumed[: c.resumed_len] if c.resumed_len else [],
    )


class Worker(Handle):
    """An engine attached to one worker endpoint (fairsched_worker).

    Use ``Worker.connect(...)``; close it (detach) with ``close()`` or a
    ``with`` block: what it still runs then ends EXECUTOR_FAILED at its
    clients, or goes back to its queue when nothing of it was streamed yet
    and the endpoint's ``worker.requeue_on_loss`` says so.
    """

    _close_fn = "fairsched_worker_close"
    _shutdown_fn = "fairsched_worker_shutdown"
    _connected_fn = "fairsched_worker_connected"
    _role = "worker"

    def __init__(self, handle: int, endpoint: str, socket_path: str = "") -> None:
        """Internal: use Worker.connect()."""
        super().__init__(handle)
        #: The daemon's socket this worker connected to.
        self.socket_path = socket_path
        name = self._lib.fairsched_worker_endpoint_name(handle)
        #: The endpoint served, as the daemon described it.
        self.endpoint = name.decode("utf-8") if name else endpoint
        #: The daemon's id for this worker: ``fairschedctl status`` lists it under it.
        self.worker_id = int(self._lib.fairsched_worker_id(handle))
        self._items = (_ffi.CWorkItem * POLL_BATCH)()

    @classmethod
    def connect(
        cls,
        socket_path: str = DEFAULT_SOCKET,
        endpoint: str = "",
        *,
        name: Optional[str] = None,
        connect_timeout: float = 5.0,
        event_timeout: float = 1.0,
    ) -> "Worker":
        """Connects and attaches to ``endpoint``. ``event_timeout``: how long
        emit()/finish()/set_capacity() wait for room in a full event ring
        before RingFull. Raises what Client.connect raises, and
        InvalidArgument (no endpoint or a bad name), Refused (no such
        endpoint, or not executor = "worker"), Unauthorized (no [[clients]]
        rule lists the endpoint in its ``workers``), ShuttingDown (the
        daemon is stopping, or draining: no new workers until it resumes)."""
        if not endpoint:
            raise InvalidArgument("endpoint is required: an endpoint with executor = \"worker\"")
        lib = _ffi.load()
        o = _ffi.WorkerOptions()
        lib.fairsched_worker_options_init(byref(o))
        o.socket_path = encode_path("socket_path", socket_path)
        o.endpoint = encode_name("endpoint", endpoint)
        if name is not None:
            o.worker_name = encode_name("name", name)
        o.connect_timeout_ns = seconds_to_ns("connect_timeout", connect_timeout)
        o.event_timeout_ns = seconds_to_ns("event_timeout", event_timeout)
        return cls(connect(lib, lib.fairsched_worker_connect, o), endpoint, socket_path)

    def _repr_fields(self) -> str:
        return f"endpoint={self.endpoint!r} id={self.worker_id} socket={self.socket_path!r}"

    def set_capacity(self, free_sequences: int, free_kv_tokens: int) -> None:
        """What the engine can take now: the daemon never assigns more than
        the last call left room for (one sequence and prompt +
        max_output_tokens of KV tokens per request). Raises DaemonLost,
        RingFull."""
        self._call(
            self._lib.fairsched_worker_set_capacity,
            check_int("free_sequences", free_sequences, 0, U32),
            check_int("free_kv_tokens", free_kv_tokens, 0, U64),
        )

    def poll(self, max: int = POLL_BATCH) -> list[WorkItem]:
        """Up to ``max`` assignments and aborts, in the daemon's order. Never blocks."""
        if max <= 0:
            return []
        buf = self._items if max <= POLL_BATCH else (_ffi.CWorkItem * max)()
        h = self._enter()
        try:
            n = self._lib.fairsched_worker_poll(h, buf, max)
            # The items point into the library's buffer until the next poll.
            return [_item_from_c(buf[i]) for i in range(n)]
        finally:
            self._leave()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until poll() has something (True) or ``timeout`` seconds
        pass (False; None: forever). Raises DaemonLost."""
        return self._wait(self._lib.fairsched_worker_wait, timeout)

    def event_fd(self) -> int:
        """A descriptor readable when poll() may have something or the daemon
        went away. Call prepare_to_block() before every blocking wait on it."""
        h = self._enter()
        try:
            return int(self._lib.fairsched_worker_event_fd(h))
        finally:
            self._leave()

    def prepare_to_block(self) -> bool:
        """True: block on event_fd() now; False: poll() first. Raises DaemonLost."""
        block = c_int()
        self._call(self._lib.fairsched_worker_prepare_to_block, byref(block))
        return block.value != 0

    def emit(self, request_id: int, tokens: Tokens) -> None:
        """Output tokens of assignment ``request_id``, in order, as generated
        (at least one). Emitting more than its max_output_tokens in all gets
        the worker dropped. Raises InvalidArgument (none), DaemonLost,
        RingFull."""
        if isinstance(tokens, array.array) and tokens.typecode == "I":
            arr = tokens
        else:
            try:
                arr = array.array("I", tokens)
            except OverflowError as e:
                raise InvalidArgument("tokens: every token id must be in [0, 2**32)") from e
        n = len(arr)
        if n == 0:
            raise InvalidArgument("emit() needs at least one token")
        addr, _ = arr.buffer_info()
        self._call(
            self._lib.fairsched_worker_emit,
            check_int("request_id", request_id, 0, U64),
            cast(c_void_p(addr), POINTER(c_uint32)),
            n,
        )

    def emit_step(self, step: Iterable[tuple[int, int]]) -> None:
        """One engine step's output: ``(request_id, token)`` pairs, a token
        of each of several assignments, in order (an id may appear more than
        once). Sent as one record per 85 tokens instead of one each. Raises
        as emit()."""
        pairs = list(step)
        if not pairs:
            raise InvalidArgument("emit_step() needs at least one token")
        try:
            ids = array.array("Q", (check_int("request_id", i, 0, U64) for i, _ in pairs))
            toks = array.array("I", (t for _, t in pairs))
        except (OverflowError, TypeError) as e:
            raise InvalidArgument("emit_step: every token id must be in [0, 2**32)") from e
        ids_addr, _ = ids.buffer_info()
        toks_addr, _ = toks.buffer_info()
        self._call(
            self._lib.fairsched_worker_emit_step,
            cast(c_void_p(ids_addr), POINTER(c_uint64)),
            cast(c_void_p(toks_addr), POINTER(c_uint32)),
            len(pairs),
        )

    def finish(
        self,
        request_id: int,
        status: Status,
        output_tokens: int,
        message: str = "",
        *,
        input_tokens: int = 0,
    ) -> None:
        """Ends assignment ``request_id`` after ``output_tokens`` tokens in
        all (at least those emitted; any not emitted are charged, not
        streamed). ``message`` (at most 4096 bytes are sent) says why when
        status is not OK. ``input_tokens``, when not 0, is the prompt's
        length as the engine counted it (an upstream's usage): the tenant is
        charged the difference from the submitted count and the request's
        completion reports it; more than the endpoint's max_batch_tokens
        gets the worker dropped. Raises InvalidArgument, DaemonLost,
        RingFull."""
        if not isinstance(status, int) or isinstance(status, bool):
            raise TypeError(f"status must be a Status, not {type(status).__name__}")
        try:
            st = Status(status)
        except ValueError:
            raise InvalidArgument(f"status {status} is not a fairsched Status") from None
        msg = message.encode("utf-8") if message else None
        self._call(
            self._lib.fairsched_worker_finish_counted,
            check_int("request_id", request_id, 0, U64),
            int(st),
            check_int("output_tokens", output_tokens, 0, U32),
            check_int("input_tokens", input_tokens, 0, U32),
            msg,
        )

    def preempted(self, request_id: int, output_tokens: int) -> None:
        """Acknowledges a PREEMPT: ``request_id`` stopped after generating
        ``output_tokens`` in all, every one emitted. Raises DaemonLost,
        RingFull."""
        self._call(
            self._lib.fairsched_worker_preempted,
            check_int("request_id", request_id, 0, U64),
            check_int("output_tokens", output_tokens, 0, U32),
        )

    def blocks_stored(self, hashes: Iterable[int]) -> None:
        """KV event, for an endpoint with ``routing = "prefix"``: the
        engine's prefix cache stored these blocks — a run of one prompt's
        block hash chain (prefix_block_hashes()), leading block first. From
        a worker's first KV event on, the daemon routes by what it reports.
        Raises InvalidArgument (none, or not 64-bit), DaemonLost, RingFull."""
        self._cache_event(_CACHE_STORED, hashes)

    def blocks_removed(self, hashes: Iterable[int]) -> None:
        """KV event: the engine evicted these blocks. Raises as
        blocks_stored()."""
        self._cache_event(_CACHE_REMOVED, hashes)

    def cache_cleared(self) -> None:
        """KV event: the engine dropped its whole prefix cache. Raises
        DaemonLost, RingFull."""
        self._call(self._lib.fairsched_worker_cache_event, _CACHE_CLEARED, None, 0)

    def _cache_event(self, op: int, hashes: Iterable[int]) -> None:
        try:
            arr = array.array("Q", (check_int("hash", h, 0, U64) for h in hashes))
        except (OverflowError, TypeError) as e:
            raise InvalidArgument("hashes: every hash must be in [0, 2**64)") from e
        if len(arr) == 0:
            raise InvalidArgument("a KV event needs at least one block hash")
        addr, _ = arr.buffer_info()
        self._call(
            self._lib.fairsched_worker_cache_event,
            op,
            cast(c_void_p(addr), POINTER(c_uint64)),
            len(arr),
        )

    def stats(self) -> WorkerStats:
        """Counters since connect."""
        s = _ffi.CWorkerStats()
        h = self._enter()
        try:
            self._lib.fairsched_worker_get_stats(h, byref(s))
        finally:
            self._leave()
        return WorkerStats(s.assigned, s.aborted, s.tokens_emitted, s.finished, s.ring_full_waits)

