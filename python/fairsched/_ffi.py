"""The C ABI of libfairsched (include/fairsched/fairsched.h) through ctypes.

Every struct here mirrors the header field for field; python/tests/
test_abi_layout.py compares their sizes and offsets with a C compiler's.
The library is loaded on first use, from (in this order):

1. ``$FAIRSCHED_LIBRARY`` (a path to ``libfairsched.so.0``), when set;
2. the path ``make install`` recorded next to the package, when it exists;
3. ``build/lib/libfairsched.so.0`` of the checkout this package lives in;
4. the system's search path (``ctypes.util.find_library("fairsched")``,
   then ``libfairsched.so.0``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from ctypes import (
    POINTER,
    Structure,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import Optional

MAX_PARAMS_BYTES = 4096  # FAIRSCHED_MAX_PARAMS_BYTES


class LibraryNotFound(OSError):
    """libfairsched could not be loaded; the message lists where it was looked for."""


class Options(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("socket_path", c_char_p),
        ("client_name", c_char_p),
        ("connect_timeout_ns", c_int64),
        ("control_timeout_ns", c_int64),
        ("spin_ns", c_int64),
        ("reconnect", c_int32),
        ("reserved", c_int32),
        ("reconnect_initial_delay_ns", c_int64),
        ("reconnect_max_delay_ns", c_int64),
    ]


class SubmitRequest(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("tenant", c_uint32),
        ("priority", c_int32),
        ("endpoint", c_char_p),
        ("prompt", c_void_p),  # const uint32_t*: an address, set without a ctypes cast
        ("prompt_tokens", c_size_t),
        ("max_output_tokens", c_uint32),
        ("reserved", c_uint32),
        ("deadline_ns", c_int64),
        ("timeout_ns", c_int64),
        ("tag", c_uint64),
        ("stream", c_int32),
        ("counts_only", c_int32),
        ("params", c_void_p),
        ("params_bytes", c_size_t),
        ("prompt_token_count", c_uint32),
        ("reserved2", c_uint32),
        ("prefix", c_void_p),  # const uint64_t*
        ("prefix_blocks", c_size_t),
    ]


class CCompletion(Structure):
    _fields_ = [
        ("request_id", c_uint64),
        ("tag", c_uint64),
        ("status", c_int32),
        ("output_tokens", c_uint32),
        ("retry_after_ns", c_int64),
        ("queue_wait_ns", c_int64),
        ("service_ns", c_int64),
        ("checksum", c_uint64),
        ("local", c_int32),
        ("reserved", c_int32),
        ("partial", c_int32),
        ("first_token", c_uint32),
        ("tokens", POINTER(c_uint32)),
        ("token_count", c_uint32),
        ("input_tokens", c_uint32),
        ("emitted_ns", c_int64),
        ("time_to_first_token_ns", c_int64),
    ]


class RetryPolicyC(Structure):
    _fields_ = [
        ("max_attempts", c_int32),
        ("reserved", c_int32),
        ("base_backoff_ns", c_int64),
        ("max_backoff_ns", c_int64),
        ("max_retry_after_ns", c_int64),
        ("attempt_timeout_ns", c_int64),
    ]


class WorkerOptions(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("socket_path", c_char_p),
        ("endpoint", c_char_p),
        ("worker_name", c_char_p),
        ("connect_timeout_ns", c_int64),
        ("event_timeout_ns", c_int64),
    ]


class CWorkItem(Structure):
    _fields_ = [
        ("kind", c_int32),
        ("tenant", c_uint32),
        ("id", c_uint64),
        ("priority", c_int32),
        ("counts_only", c_int32),
        ("deadline_ns", c_int64),
        ("prompt_tokens", c_uint32),
        ("max_output_tokens", c_uint32),
        ("prompt", POINTER(c_uint32)),
        ("prompt_len", c_uint32),
        ("params_bytes", c_uint32),
        ("params", c_void_p),
        ("resumed", POINTER(c_uint32)),
        ("resumed_len", c_uint32),
    ]


class CWorkerStats(Structure):
    _fields_ = [
        ("assigned", c_uint64),
        ("aborted", c_uint64),
        ("tokens_emitted", c_uint64),
        ("finished", c_uint64),
        ("ring_full_waits", c_uint64),
    ]


# (name, restype, argtypes) of every function the package calls.
_PROTOTYPES = [
    ("fairsched_options_init", None, [POINTER(Options)]),
    ("fairsched_submit_request_init", None, [POINTER(SubmitRequest)]),
    ("fairsched_retry_policy_init", None, [POINTER(RetryPolicyC)]),
    ("fairsched_connect", c_int, [POINTER(Options), POINTER(c_void_p)]),
    ("fairsched_open_tenant", c_int, [c_void_p, c_char_p, c_char_p, POINTER(c_uint32)]),
    (
        "fairsched_open_tenants",
        c_int,
        [c_void_p, POINTER(c_char_p), c_size_t, c_char_p, POINTER(c_uint32)],
    ),
    ("fairsched_close_tenant", c_int, [c_void_p, c_uint32]),
    ("fairsched_close_tenants", c_int, [c_void_p, POINTER(c_uint32), c_size_t]),
    ("fairsched_submit", c_int, [c_void_p, POINTER(SubmitRequest), POINTER(c_uint64)]),
    ("fairsched_poll", c_size_t, [c_void_p, POINTER(CCompletion), c_size_t]),
    ("fairsched_cancel", c_int, [c_void_p, c_uint64]),
    ("fairsched_wait", c_int, [c_void_p, c_int64]),
    ("fairsched_completion_fd", c_int, [c_void_p]),
    ("fairsched_prepare_to_block", c_int, [c_void_p, POINTER(c_int)]),
    (
        "fairsched_submit_and_wait",
        c_int,
        [c_void_p, POINTER(SubmitRequest), c_int64, POINTER(CCompletion)],
    ),
    (
        "fairsched_submit_with_retry",
        c_int,
        [
            c_void_p,
            POINTER(SubmitRequest),
            POINTER(RetryPolicyC),
            POINTER(CCompletion),
            POINTER(c_int32),
        ],
    ),
    ("fairsched_connected", c_int, [c_void_p]),
    ("fairsched_shutdown", None, [c_void_p]),
    ("fairsched_close", None, [c_void_p]),
    ("fairsched_worker_options_init", None, [POINTER(WorkerOptions)]),
    ("fairsched_worker_connect", c_int, [POINTER(WorkerOptions), POINTER(c_void_p)]),
    ("fairsched_worker_set_capacity", c_int, [c_void_p, c_uint32, c_uint64]),
    ("fairsched_worker_poll", c_size_t, [c_void_p, POINTER(CWorkItem), c_size_t]),
    ("fairsched_worker_wait", c_int, [c_void_p, c_int64]),
    ("fairsched_worker_event_fd", c_int, [c_void_p]),
    ("fairsched_worker_prepare_to_block", c_int, [c_void_p, POINTER(c_int)]),
    ("fairsched_worker_emit", c_int, [c_void_p, c_uint64, POINTER(c_uint32), c_size_t]),
    ("fairsched_worker_emit_step", c_int,
     [c_void_p, POINTER(c_uint64), POINTER(c_uint32), c_size_t]),
    ("fairsched_worker_finish", c_int, [c_void_p, c_uint64, c_int, c_uint32, c_char_p]),
    (
        "fairsched_worker_finish_counted",
        c_int,
        [c_void_p, c_uint64, c_int, c_uint32, c_uint32, c_char_p],
    ),
    ("fairsched_worker_preempted", c_int, [c_void_p, c_uint64, c_uint32]),
    ("fairsched_worker_cache_event", c_int, [c_void_p, c_int32, POINTER(c_uint64), c_size_t]),
    (
        "fairsched_prefix_block_hashes",
        c_size_t,
        [POINTER(c_uint32), c_size_t, c_uint32, POINTER(c_uint64), c_size_t],
    ),
    ("fairsched_worker_connected", c_int, [c_void_p]),
    ("fairsched_worker_endpoint_name", c_char_p, [c_void_p]),
    ("fairsched_worker_id", c_uint64, [c_void_p]),
    ("fairsched_worker_get_stats", None, [c_void_p, POINTER(CWorkerStats)]),
    ("fairsched_worker_shutdown", None, [c_void_p]),
    ("fairsched_worker_close", None, [c_void_p]),
    ("fairsched_status_name", c_char_p, [c_int]),
    ("fairsched_error_name", c_char_p, [c_int]),
    ("fairsched_last_error_message", c_char_p, []),
    ("fairsched_http_status", c_int, [POINTER(CCompletion)]),
    ("fairsched_retry_after_ms", c_int64, [POINTER(CCompletion)]),
]

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None


def _candidates() -> list[tuple[str, str]]:
    """(what, path or name) to try, in order, after $FAIRSCHED_LIBRARY."""
    out: list[tuple[str, str]] = []
    try:
        from . import _install  # type: ignore[attr-defined]  # written by `make install`

        out.append(("the installed library", str(_install.LIBRARY)))
    except ImportError:
        pass
    checkout = Path(__file__).resolve().parent.parent.parent / "build" / "lib" / "libfairsched.so.0"
    out.append(("the checkout's build tree", str(checkout)))
    found = ctypes.util.find_library("fairsched")
    if found:
        out.append(("the system (find_library)", found))
    out.append(("the system (dlopen)", "libfairsched.so.0"))
    return out


def _bind(lib: ctypes.CDLL) -> None:
    for name, restype, argtypes in _PROTOTYPES:
        try:
            fn = getattr(lib, name)
        except AttributeError as e:
            raise LibraryNotFound(
                f"{lib._name} lacks {name}: it is older than this package; "
                "build and install libfairsched from the same tree"
            ) from e
        fn.restype = restype
        fn.argtypes = argtypes


def load() -> ctypes.CDLL:
    """The loaded library (loads it on the first call). Raises LibraryNotFound."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        env = os.environ.get("FAIRSCHED_LIBRARY")
        if env:
            try:
                lib = ctypes.CDLL(env)
            except OSError as e:
                raise LibraryNotFound(f"$FAIRSCHED_LIBRARY={env} does not load: {e}") from e
            _bind(lib)
            _lib, _lib_path = lib, env
            return lib
        tried: list[str] = []
        for what, path in _candidates():
            if os.sep in path and not os.path.exists(path):
                tried.append(f"{what}: {path} (no such file)")
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{what}: {e}")
                continue
            _bind(lib)
            _lib, _lib_path = lib, path
            return lib
        raise LibraryNotFound(
            "libfairsched.so.0 not found; set $FAIRSCHED_LIBRARY to its path. Tried:\n  "
            + "\n  ".join(tried)
        )


def library_path() -> str:
    """The path or name libfairsched was loaded from (loads it first)."""
    load()
    assert _lib_path is not None
    return _lib_path


def last_error_message(lib: ctypes.CDLL) -> str:
    raw: Optional[bytes] = lib.fairsched_last_error_message()
    return raw.decode("utf-8", "replace") if raw else ""
